"""`mrtr-harness run`: the order of one run, and the parts it orders.

`run` (target up, load, chaos, wind-down, checks, results: the order, nothing else), `hypothesis`
(the steady state probed over windows around the chaos), `load` (which load, and when it ends),
`live_fold` (the fold of the journal in a process of its own, and the journal made with it),
`stopping` and `failures` (early stops, the harness's own errors and greenlets), `progress` (the line
shown while it runs), `load_processes` (where the load comes from, as `run` and `capacity` take it
on the command line), `cpu` (what the harness and the replicas spent per round), `end_checks`
(reconciliation and the invariants), `options`, `results` and `results_folder`.
"""
