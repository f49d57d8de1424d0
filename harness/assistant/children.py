"""The harness's own commands as child processes of the server: `python -m harness COMMAND ...`, output captured.

A child keeps the server's event loop free while it works, keeps a run's gevent (its patching,
Locust, the target's processes) out of the server's process, and says what the command line
says, exit code and all. Its standard input is /dev/null and its output is captured: the
server's own standard input and output are the MCP connection, which nothing else may touch.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import ByteReceiveStream, Process

TICK_SECONDS = 1.0
"""How often a waiting caller is told how long the child has run (the run tool's progress notifications)."""
STOP_SECONDS = 30.0
"""How long a child stopped with SIGTERM (a run past its deadline: rollback, results written) has before SIGKILL."""
COMMAND_SECONDS = 600.0
"""How long a command that is not a run (validate, report, compare) has: a folder handed over may be huge or
hostile, and no tool call waits forever; one stopped at it ends like a Ctrl-C (its exit code, no verdict from it)."""
DRAIN_SECONDS = 5.0
"""How long the output is still read once the child has exited (a process it left may hold the pipe open)."""

OnTick = Callable[[float], Awaitable[None]]
"""Called with the seconds the child has run: at its start, then every `TICK_SECONDS` until it exits."""


@dataclass(frozen=True)
class Finished:
    """A child's end: its exit code, its standard output and error, and whether it was stopped at its deadline."""

    code: int
    stdout: str
    stderr: str
    stopped: bool = False

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def harness_argv(*argv: str) -> list[str]:
    """The command line of `mrtr-harness ARGV` with this interpreter (the one serving, so the same harness)."""
    return [sys.executable, "-m", "harness", *argv]


async def run_child(argv: Sequence[str], *, deadline: float = COMMAND_SECONDS,
                    on_tick: OnTick | None = None) -> Finished:
    """Run `argv` to its end, or until `deadline` seconds, when it gets SIGTERM (then SIGKILL after STOP_SECONDS)
    and its standard error ends with the line saying so.

    If the call is cancelled (the client went away), the child is killed: nothing the server
    started outlives it.
    """
    process = await anyio.open_process(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
    out, err = _Pipe(), _Pipe()
    stopped = False
    try:
        async with anyio.create_task_group() as group:
            assert process.stdout is not None and process.stderr is not None
            group.start_soon(out.drain, process.stdout)
            group.start_soon(err.drain, process.stderr)
            with anyio.move_on_after(deadline) as limit:
                await _wait(process, on_tick)
            if limit.cancelled_caught:
                stopped = True
                await _stop(process)
            with anyio.move_on_after(DRAIN_SECONDS):
                await out.ended.wait()
                await err.ended.wait()
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()
    assert process.returncode is not None
    said = f"\nstopped by the server after {deadline:g}s (its limit for this command)\n" if stopped else ""
    return Finished(process.returncode, out.text(), err.text() + said, stopped)


class _Pipe:
    """One of the child's output pipes, read to its end."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.ended = anyio.Event()

    async def drain(self, stream: ByteReceiveStream) -> None:
        try:
            async for chunk in stream:
                self.data += chunk
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self.ended.set()

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


async def _wait(process: Process, on_tick: OnTick | None) -> None:
    started = time.monotonic()
    while True:
        if on_tick is not None:
            await on_tick(time.monotonic() - started)
        with anyio.move_on_after(TICK_SECONDS):
            await process.wait()
            return


async def _stop(process: Process) -> None:
    """SIGTERM, as CI runners cancel a run (it rolls chaos back and writes its results), then SIGKILL."""
    process.send_signal(signal.SIGTERM)
    with anyio.move_on_after(STOP_SECONDS):
        await process.wait()
        return
    process.kill()
    await process.wait()
