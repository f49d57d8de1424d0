"""A synchronous, gevent-friendly MRTR client, lean enough never to be the load generator's bottleneck.

`MrtrClient.call_tool` drives one `tools/call` through its rounds (2026-07-28 wire:
one POST per round, no session), asking a `Responder` (the simulated person) between
rounds; a `Router` picks the replica of every round; a `Transport` (share one per
process) pools connections without holding any across a person's think time. Every
round comes back as a `RoundRecord`, classified by the one `Outcome` enum that
Locust, the metrics and the journal all use.
"""
