"""The load process's plumbing: timers that ride on existing wake-ups, and the processes the harness starts."""
