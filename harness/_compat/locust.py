"""Locust's private parts and hidden inputs the harness relies on (pinned by tests/test_compat.py).

- A worker's stats report, `WorkerRunner._send_stats()`: sent on its own only every few
  seconds and on quit; a worker that is finishing sends it at once, ahead of the message
  that must follow it.
- The command line Locust's web UI reads: on every page load it parses `sys.argv` as
  Locust's own (`locust.argument_parser.ui_extra_args_dict()`, called with no arguments),
  for the extra options it shows. In a harness process `sys.argv` is the harness's, already
  parsed, which Locust's parser would refuse.
- The web UI's page (Locust's React build, `locust/webui/dist`): its header's controls are buttons
  labelled `Edit`, `Reset`, `New` and `Stop`, and its user count is a label `Users` over a number;
  no template argument hides or renames them, so `PAGE_SCRIPT` does, by their text.
- A master's socket, `MasterRunner.server`: Locust's `quit()` stops the runner but leaves the
  port bound until the process ends; a sweep's next step binds the same port (`--master`).

Nothing here imports Locust: the runner is given.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

__all__ = ["PAGE_SCRIPT", "clear_command_line_for_web_ui", "page_with_script", "release_master_port",
           "send_stats_now"]

PAGE_SCRIPT = """<script>
(() => {
  const hidden = new Set(["Edit", "Reset", "New"]);
  const tidy = () => {
    for (const button of document.querySelectorAll("button")) {
      if (hidden.has(button.textContent.trim()) && button.style.display !== "none") button.style.display = "none";
    }
    for (const label of document.querySelectorAll(".MuiTypography-root")) {
      if (label.childElementCount === 0 && label.textContent === "Users") label.textContent = "Flows in flight";
    }
  };
  new MutationObserver(tidy).observe(document.body, {childList: true, subtree: true});
  tidy();
})();
</script>"""
"""Hides the web UI's controls that would change the scenario's run (Edit, Reset, New) and names its user count
for what the harness reports in it: flows in flight."""


def send_stats_now(runner: Any) -> None:
    """Send a Locust worker runner's stats report to its master now."""
    runner._send_stats()


def release_master_port(runner: Any, wait: float = 5.0) -> None:
    """Close a Locust master runner's socket once it has quit, so another master in this process can bind the port.

    ZeroMQ closes a socket in its own I/O thread, after `close()` has returned: wait (at most
    `wait` seconds) until the port can be bound again, or the next master's bind would race it.
    """
    runner.server.close(linger=0)
    host = "" if runner.master_bind_host == "*" else runner.master_bind_host
    deadline = time.monotonic() + wait
    while not _bindable(host, runner.master_bind_port) and time.monotonic() < deadline:
        time.sleep(0.02)


def _bindable(host: str, port: int) -> bool:
    """Whether a listening TCP socket could bind `host:port` now (as ZeroMQ binds: address reuse on)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def clear_command_line_for_web_ui() -> None:
    """Leave only the program name in `sys.argv`, so Locust's web UI reads an empty command line of its own.

    Call it once the harness has parsed its command line, before the web UI serves a page.
    """
    del sys.argv[1:]


def page_with_script(html: str, extra: str = "") -> str:
    """Locust's web UI page with `PAGE_SCRIPT` (and `extra`, the harness's own HTML) at the end of its body."""
    return html.replace("</body>", f"{extra}{PAGE_SCRIPT}\n</body>", 1)
