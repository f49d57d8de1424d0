"""What a run proves at its end: the ledger invariants, and every client -32602 matched to a logged reason."""
