"""The load side of a run: flows that call MRTR tools with simulated leads between rounds, and Locust users."""
