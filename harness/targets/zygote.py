"""A parent that imports the replica's code once and forks a fresh replica process per start.

A replica's start is mostly Python importing the MCP SDK, so a restart done as a new
interpreter is too slow to test what clients see during one (benchmarks/README.md, replica
restart), and three replicas cost three imports. Forked from a parent that has imported
everything, a replica serves again at once. It is still a new process
with a new PID: its in-memory keys (`ephemeral`), caches and connections are gone, exactly
what a restart is meant to exercise.

The parent (`python -m harness.targets.zygote`) reads one JSON request per line on stdin
(`{"argv": [...], "log": path, "env": {...}}`: `argv` are the options of
`mrtr-harness shop replica`; `env` with OpenTelemetry's variables as the harness has them now, so a replica
exports as `run --otlp` says) and answers one line per request (`{"pid": n}`). Each child
calls the replica's entry point (`harness.shop.replica.main`) directly: the zygote never
imports the harness's CLI. Its children are reaped by the kernel (SIGCHLD ignored), each
runs in its own session with its output appended to its log. The zygote dies with the
harness (its lifeline, `harness.processes.children`) and exits when its stdin closes; each replica
it forks is tied to the zygote the same way right after the fork, so a harness killed
with SIGKILL takes the zygote, and with it every replica, along. It imports only; it
never starts a thread, so forking it is safe.

A hunt runs many trials, each starting and stopping a whole shop; the zygote's start (the
imports, over half a second) is the same every time. Inside `lent_zygote` (one per hunt)
every deployment forks its replicas from the one zygote started there, and leaves it running
when it stops. That carries nothing from one trial to the next: the zygote never runs replica
code, so each fork is the same fresh process a new zygote would give (a new PID, its own
keys, ring and store as its deployment gives them); a lent zygote that is gone is not used
(the deployment starts its own). It is tied to the harness by its lifeline like any other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from harness.atomic_files import open_append
from harness.processes.children import die_with_parent, start_child
from harness.telemetry.switch import tracing_on
from harness.telemetry.variables import otel_variables

PRELOAD = (
    "harness.shop.replica",
    "harness.shop.server",
    "harness.shop.sealing",
    "harness.shop.store",
    "harness.metrics.instrument",
    "mcp.server.transport_security",
    "prometheus_client",
    "starlette.responses",
    "uvicorn",
)
"""What a replica imports before it serves (see `harness.shop.replica.build_app`)."""
TRACING_PRELOAD = (
    "opentelemetry.sdk.trace",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk.resources",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
"""What a replica imports to export its spans, when tracing is on (`harness.shop.tracing`): imported only, so no
exporter thread exists before a fork; each replica starts its own after it."""

READY = "ready"


class ZygoteError(RuntimeError):
    """The zygote could not be started, or could not fork a replica."""


class Zygote:
    """The harness's side: starts the parent once, asks it for replicas, stops it by its PID."""

    def __init__(self, log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open_append(log_path, binary=True)  # held for the life of the zygote
        self.process: subprocess.Popen[str] = start_child(
            [sys.executable, "-m", "harness.targets.zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True)
        answer = self._read_line()
        if answer != READY:
            self.stop()
            raise ZygoteError(f"the replica zygote did not start (said {answer!r}); see {log_path}")

    def spawn(self, argv: list[str], log_path: Path, env: dict[str, str]) -> int:
        """A new replica process running `mrtr-harness shop replica <argv>`, its output appended to `log_path`;
        its PID."""
        assert self.process.stdin is not None
        request = {"argv": argv, "log": str(log_path), "env": {**otel_variables(), **env}}
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError as exc:
            raise ZygoteError(f"the replica zygote is gone: {exc}") from exc
        answer = json.loads(self._read_line() or "{}")
        if "pid" not in answer:
            raise ZygoteError(f"the replica zygote could not fork: {answer.get('error', 'no answer')}")
        return int(answer["pid"])

    def _read_line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def stop(self) -> None:
        """Close its stdin (it exits by itself), then make sure, by its PID; its replicas are not touched."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(5)
        self._log.close()


_lent: Zygote | None = None
"""The zygote `lent_zygote` lends, while its block runs."""


@contextmanager
def lent_zygote(log_path: Path) -> Iterator[Zygote | None]:
    """One zygote lent to every deployment started inside the block (`borrowed_zygote`), stopped by its PID at the
    end; None (and nothing lent) when it could not start: each deployment then starts its own, as without it."""
    global _lent
    try:
        zygote: Zygote | None = Zygote(log_path)
    except (ZygoteError, OSError):
        zygote = None
    _lent = zygote
    try:
        yield zygote
    finally:
        _lent = None
        if zygote is not None:
            zygote.stop()


def borrowed_zygote() -> Zygote | None:
    """The zygote lent now, when it is still running; None: none lent, or it is gone (start a fresh one)."""
    return _lent if _lent is not None and _lent.process.poll() is None else None


def _serve(requests: IO[str], answers: IO[str]) -> None:
    zygote = os.getpid()
    for line in requests:
        try:
            request: dict[str, Any] = json.loads(line)
            pid = os.fork()
        except (ValueError, OSError) as exc:
            answers.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
            answers.flush()
            continue
        if pid == 0:
            die_with_parent(zygote)
            _child(request)  # never returns
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become a replica process of its own, then run the replica command."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.update(request.get("env") or {})
        sys.argv = ["mrtr-harness", "shop", "replica", *request["argv"]]
        from harness.shop.replica import main
        from harness.shop.server import build_replica_server

        code = int(main(request["argv"], build_replica_server) or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever ends the child is printed to its log; it exits below
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> int:
    import importlib

    for module in (*PRELOAD, *(TRACING_PRELOAD if tracing_on() else ())):
        importlib.import_module(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the replicas: no zombies
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops it, through its stdin
    print(READY, flush=True)
    _serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
