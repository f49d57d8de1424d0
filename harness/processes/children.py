"""The processes the harness starts, and its own: free ports, its own command line, /proc readers, and the lifeline.

The lifeline: every process the harness starts (the shop's API, replicas and zygote,
redis-server, Locust workers, `command:` log sources) dies with the harness, also when the
harness is killed with SIGKILL and has no chance to stop anything. The kernel does it:
each child asks, between fork and exec, for SIGKILL when its parent dies
(`prctl(PR_SET_PDEATHSIG, SIGKILL)`). SIGKILL because a paused (SIGSTOPped) replica must
die too, and no handler may delay it. The usual race is closed: if the parent died
before the request was made, the child is already re-parented and exits at once.

prctl is reached through ctypes on the C library: the PyPI wrappers for it are
unmaintained, and this is one call. On a system without prctl (not Linux) the lifeline
is a no-op and children are stopped the ordinary way, by PID, at the end of the run.

Caveat: the kernel sends the signal when the *thread* that forked the child exits, not
the process. Start children from the main thread only (greenlets are fine: they all run
on it); a child started from a worker thread would be killed when that thread ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1, chosen by the kernel."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def harness_command(*args: str) -> list[str]:
    """The harness's own command line, through this interpreter, so a venv need not be on PATH."""
    return [sys.executable, "-m", "harness", *args]


# --- /proc readers -----------------------------------------------------------------------------


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3, the state, first), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].decode("ascii").split()
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie left by a parent that does not reap counts as gone)."""
    fields = stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] != "Z"


def parent_of(pid: int) -> int | None:
    """The parent PID of a live process, or None when it is gone."""
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def process_cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process in seconds, or None when it is gone."""
    fields = stat_fields(pid) if pid is not None else None
    return cpu_seconds_of(fields) if fields else None


def cpu_seconds_of(fields: list[str]) -> float:
    """utime + stime, in seconds, from a process's `stat_fields` (utime is field 14: index 11 after the name)."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` now: children, their children, and so on (one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


# --- the lifeline ------------------------------------------------------------------------------


@cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once in the parent (never between fork and exec), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent: int) -> None:
    """In a new child: be SIGKILLed when `parent` (the process that forked us) dies; exit now if it already has.

    Call it right after fork, before anything else runs in the child.
    """
    prctl = _prctl()
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request: we were re-parented already
        os._exit(1)


def lifeline() -> Callable[[], None]:
    """A `preexec_fn` that ties the child to this process (see `die_with_parent`)."""
    _prctl()  # load libc now, in the parent
    parent = os.getpid()
    return lambda: die_with_parent(parent)


def start_child(args: list[str], **options: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(args, **options)` in its own session, tied to this process by the lifeline.

    Its own session, so a Ctrl-C at the terminal reaches the harness only and the harness
    decides how each child stops. Call it from the main thread (see the module docstring).
    """
    return subprocess.Popen(args, start_new_session=True, preexec_fn=lifeline(), **options)


def kill_session(process: subprocess.Popen[Any]) -> None:
    """Kill a child started with `start_child` that ran out of time, with what it started in its session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Within the block, SIGTERM (what CI runners, systemd and Kubernetes send to cancel) raises KeyboardInterrupt, so
    it stops the work as Ctrl-C does; the handler before is put back after. Off the main thread (where signal
    handlers cannot be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
