"""Configuration: the scenario file read into validated models, before anything runs.

A leaf: nothing here imports the runtime (gevent, Locust, the client, the target), so
`mrtr-harness validate` checks a file without loading any of it. Durations, the threshold
syntax, think-time distributions, log locations and the compare tolerances are parsed here.
"""
