"""A throwaway redis-server for an embedded target that asks for `store = "redis"`."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from harness.atomic_files import open_append
from harness.processes.children import free_port, start_child
from harness.targets.interface import TargetError


class RedisProcess:
    """redis-server on a free 127.0.0.1 port, no persistence, stopped by its PID; it dies with the harness."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        import redis  # here, not at the top: a run on sqlite or memory should not import it (0.07 s of CPU)

        binary = shutil.which("redis-server")
        if binary is None:
            raise TargetError("the scenario asks for store = \"redis\", but redis-server is not on PATH "
                              "(apt-get install redis-server, or use store = \"sqlite\")")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = open_append(self.workdir / "redis.log", binary=True)  # redis keeps it for its life
        self.process = start_child([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", str(self.workdir)],
                                   stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        self.stop()
        raise TargetError(f"redis-server did not answer on port {self.port} within {timeout:g}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
