"""`mrtr-harness run`: the timeline of one run, and the parts it orders.

`timeline` (target up, load, chaos, wind-down, checks, results), `hypothesis` (the steady
state probed around the chaos), `progress` (the line shown while it runs), `cpu` (what
the harness and the replicas spent per round) and `results_folder`.
"""
