"""`mrtr-harness compare BASELINE CURRENT`: two runs' journals, metric by metric, against the tolerances.

Nightly CI cannot gate on fixed thresholds alone: a build that makes rounds 40% slower,
or adds a round to every return, passes as long as it stays under the fixed numbers.
Comparing with the last good run catches it, without paging anyone for noise.

One module per concept, in the order a comparison runs: `samples` (a results folder's
journal read into per-round samples and counts), `tolerances` (the current run's
`[compare]` table with the command line's overrides), `stats` (the significance test),
`comparison` (a verdict per metric), `outputs` (the terminal table, compare.json,
compare-junit.xml), `page` (compare.html), `folders` (the entry points: two folders in,
a comparison out) and `cli` (`compare`, the end of `run --baseline`, and `history`).
`mrtr-harness history DIR...` follows the same metrics over many nights: `trend` (the
Mann-Kendall test and Sen's slope), `history` (the nights read and each metric's trend
judged), `history_outputs` (table, history.json) and `history_page` (history.html). This package
imports nothing itself, so the command line stays instant and gevent unpatched until
a handler runs.
"""
