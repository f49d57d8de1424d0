"""Test MCP servers run as real subprocesses on free 127.0.0.1 ports.

Real processes, because what the MRTR client must survive lives in the process
boundary: sealing keys shared (or not) between replicas, sockets closed under it,
SSE committed by a slow handler. Each server is stopped by its own PID, never by
name, so parallel runs and anything a developer runs by hand are left alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["Running", "free_port", "start_server"]

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0


def free_port() -> int:
    """A port nothing listens on right now (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Running:
    """A started server process: its URL, its PID, and how to stop it (and close its log, if it has one)."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, path: str,
                 log: IO[bytes] | None = None, restart: Callable[[int], subprocess.Popen[bytes]] | None = None) -> None:
        self.process = process
        self.path = path
        self.port = port
        self.url = f"http://127.0.0.1:{port}{path}"
        self.log = log
        self._restart = restart

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait (bounded) until this process listens on its port; stop it and raise if it never does.

        uvicorn binds only after the app's lifespan started, so a listening socket means the
        server is ready to serve. The listener must be this process's own: between picking a
        free port and binding it, another test's server may take the port, and a connection
        that merely succeeds would send this test's requests to that server. When that
        happens to a port this module picked, the server is started again on a fresh one.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _listens(self.process.pid, self.port):
                return
            if self.process.poll() is not None:
                if self._restart is not None and _someone_listens(self.port):
                    self._start_again()
                    continue
                raise RuntimeError(f"server exited with {self.process.returncode} before serving on {self.port}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not serve on port {self.port} within {timeout:.0f} s")

    def _start_again(self) -> None:
        """Start the same server on a fresh port: the one picked was taken before it bound."""
        assert self._restart is not None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}{self.path}"
        self.process = self._restart(self.port)

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate this process (and only it), killing it if it does not exit in time; close its log."""
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
        finally:
            if self.log is not None:
                self.log.close()


def start_server(
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    path: str = "/mcp",
    port: int | None = None,
    wait: bool = True,
    log: Path | None = None,
) -> Running:
    """Start `python -m <module> --port P *args`; with `wait`, return once it serves.

    Pass `wait=False` to start several servers at once and then `wait_ready()` on each:
    most of a start is importing the SDK, which the processes can do in parallel.
    With `log`, the server's stdout and stderr go to that file (truncated first), which
    `stop()` closes; without it they are this process's.
    """
    chosen = port if port is not None else free_port()
    output = open(log, "wb") if log is not None else None  # noqa: SIM115 - closed when the server stops

    def launch(on_port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(on_port), *args],
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdout=output,
            stderr=output,
        )

    try:
        process = launch(chosen)
    except BaseException:
        if output is not None:
            output.close()
        raise
    running = Running(process, chosen, path, log=output, restart=launch if port is None else None)
    if wait:
        running.wait_ready()
    return running


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on 127.0.0.1 or any address at `port`, from the kernel's table."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _someone_listens(port: int) -> bool:
    """Whether any process listens on `port`."""
    return bool(_listening_inodes(port))


def _listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself holds a socket listening on `port`."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                return True
        except OSError:
            continue
    return False


def serve_main(build_app: Callable[[], Any] | Callable[[int], Any], description: str, *,
               knows_its_port: bool = False) -> None:
    """A test server's `main`: `--port P`, served on 127.0.0.1 by uvicorn, quietly. `knows_its_port`: the app is
    built for its port (a server that names its own URL, such as an OAuth issuer or resource)."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = build_app(args.port) if knows_its_port else build_app()  # type: ignore[call-arg]
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
