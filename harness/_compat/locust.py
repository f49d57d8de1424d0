"""Locust's private parts and hidden inputs the harness relies on (pinned by tests/test_compat.py).

- A worker's stats report, `WorkerRunner._send_stats()`: sent on its own only every few
  seconds and on quit; a worker that is finishing sends it at once, ahead of the message
  that must follow it.
- The command line Locust's web UI reads: on every page load it parses `sys.argv` as
  Locust's own (`locust.argument_parser.ui_extra_args_dict()`, called with no arguments),
  for the extra options it shows. In a harness process `sys.argv` is the harness's, already
  parsed, which Locust's parser would refuse.
- A master's socket, `MasterRunner.server`: Locust's `quit()` stops the runner but leaves the
  port bound until the process ends; a sweep's next step binds the same port (`--master`).

Nothing here imports Locust: the runner is given.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["clear_command_line_for_web_ui", "release_master_port", "send_stats_now"]


def send_stats_now(runner: Any) -> None:
    """Send a Locust worker runner's stats report to its master now."""
    runner._send_stats()


def release_master_port(runner: Any) -> None:
    """Close a Locust master runner's socket once it has quit, so another master in this process can bind the port."""
    runner.server.close(linger=0)


def clear_command_line_for_web_ui() -> None:
    """Leave only the program name in `sys.argv`, so Locust's web UI reads an empty command line of its own.

    Call it once the harness has parsed its command line, before the web UI serves a page.
    """
    del sys.argv[1:]
