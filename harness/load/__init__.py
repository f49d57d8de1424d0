"""The load side of a run: flows that call MRTR tools with simulated leads between rounds, and Locust users."""

DEFAULT_MASTER_PORT = 5557
"""Locust's own default master port, so `run --master` and `worker` meet without flags (light: the CLI reads it)."""
