"""`mrtr-harness capacity`: how many flows per second a deployment holds within its SLO, per replica count.

A sweep runs the scenario once per step (a replica count and an arrival rate, held
long enough to reach a steady state), judges each step by the scenario's own `[expect]`
thresholds over the steady window, and never takes a step where the load generator
itself ran out of CPU for the server's limit. Beside the capacity table it sets the
share of request states the leads' think times let expire under the TTL, predicted
from the lead model and measured, and the TTL that would keep expiries under a target.

One module per concept: `plan` (what to sweep, from the command line), `search` (which
rate to try next; pure), `sweep` (running and judging the steps), `expiry` (think time
against TTL), `report` (capacity.json, capacity.html and the plots), `json_fields` (what
each key of capacity.json means), `cli`. Only `sweep`
needs Locust's gevent patching, and imports the run machinery lazily.
"""
