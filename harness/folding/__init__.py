"""Folding the journal: one pass over a run's records into everything its verdict and reports read.

`read` (`JournalRead`, the one pass, live or from a results folder), `figures` (`RunFigures`),
`checks` (the records a verdict needs beyond the figures), `invariants` (the flow checks and the
ledger invariants), `reconcile` (matching each client -32602 to a logged line), `over_time` (the
series the reports plot), `top_errors`, `fuzz` (the fuzzer's table), `thresholds` (the figures
judged against `[expect]`), `snapshot` (the fold saved beside the journal). The run's live fold
(`harness.run.live_fold.worker`) and `report` both use it; it reads only the journal and the layers below.
"""
