"""The OpenTelemetry SDK's private parts the harness relies on (pinned by tests/test_compat.py).

- `MeterProvider._handle_fork`: what every provider registers with `os.register_at_fork` to run in
  a forked child. It re-detects the process's resource through a thread pool; in a gevent process,
  whose `subprocess` forks in Python, starting a thread yields to the hub, so the child would run
  its parent's greenlets (a Locust master's among them) instead of its `exec`. The harness's
  processes never use a provider in a child they fork: `ForkQuietMeterProvider` does nothing there.
"""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider

__all__ = ["ForkQuietMeterProvider"]


class ForkQuietMeterProvider(MeterProvider):
    """A `MeterProvider` whose fork hook does nothing: a forked child of a harness process execs, or never meters."""

    def _handle_fork(self) -> None:
        return None
