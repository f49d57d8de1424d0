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
- A master's way in, `MasterRunner.handle_message(client_id, msg)`: every message its listener took
  goes through it (Locust's own, then those `register_message` named); `gate_master` puts a check
  before it. Its listener, `client_listener`, reads each frame with `server.recv_from_client()` and
  ends for good (no worker heard again) on any error but the few it expects: a frame that is not a
  msgpack'd (type, data, node id) triple, sent by anyone who reaches the port. `guard_master_listener`
  makes every such frame one of the errors it expects (`RPCReceiveError` with no address: dropped),
  also after Locust's `reset_connection()` makes a new socket.
- A master's workers, `MasterRunner.clients` (a dict by node id of nodes with a `state`): a node whose
  heartbeats stopped is `"missing"` (`locust.runners.STATE_MISSING`), one that quit is no longer there.
- How long a master waits for a heartbeat, `locust.runners.HEARTBEAT_LIVENESS` (heartbeat intervals of one
  second, read each time a worker says hello or sends a heartbeat): there is no option for it, and its 3 marks a
  worker missing when its process is starved of the CPU for three seconds on a busy machine.

Nothing here imports Locust when it is imported: the runner is given.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["PAGE_SCRIPT", "clear_command_line_for_web_ui", "gate_master", "guard_master_listener",
           "missing_workers", "page_with_script", "release_master_port", "send_stats_now", "wait_for_heartbeats"]

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


def gate_master(runner: Any, admit: Callable[[str, Any], bool]) -> Callable[[str, Any], None]:
    """Every message a Locust master runner takes in goes to Locust (and the handlers registered with it) only when
    `admit(client_id, msg)` says so. Returns Locust's own handling, to hand it a message `admit` held back."""
    handle = runner.handle_message

    def gated(client_id: str, msg: Any) -> None:
        if admit(client_id, msg):
            handle(client_id, msg)

    runner.handle_message = gated
    return handle


def guard_master_listener(runner: Any, on_garbage: Callable[[], None]) -> None:
    """A frame that is no Locust message is dropped (`on_garbage` told), never the end of the master's listener."""
    from locust.exception import RPCError, RPCReceiveError

    def guard(server: Any) -> None:
        receive = server.recv_from_client

        def recv_from_client() -> tuple[str, Any]:
            try:
                return receive()
            except RPCReceiveError:
                on_garbage()
                raise
            except RPCError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever the frame made msgpack or Message raise
                on_garbage()
                raise RPCReceiveError(f"a frame that is no message ({type(exc).__name__})") from None

        server.recv_from_client = recv_from_client

    reset = runner.reset_connection

    def reset_connection() -> None:
        reset()
        guard(runner.server)

    guard(runner.server)
    runner.reset_connection = reset_connection


def wait_for_heartbeats(seconds: int) -> None:
    """A Locust master made after this marks a worker missing only when it has sent no heartbeat for `seconds`."""
    import locust.runners

    locust.runners.HEARTBEAT_LIVENESS = seconds


def missing_workers(runner: Any, nodes: Iterable[str]) -> list[str]:
    """Which of `nodes` (worker node ids) a Locust master runner has marked missing (their heartbeats stopped) or
    dropped from its workers."""
    return [node for node in nodes if (client := runner.clients.get(node)) is None or client.state == "missing"]


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
