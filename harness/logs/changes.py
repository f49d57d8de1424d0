"""Waiting until a followed log file may have grown: the kernel says so (inotify), else a timer does.

A file cannot say it grew except by being looked at, and looking ten times a second is a
wake-up every 0.1 s for the whole life of a run, also while nothing at all is logged
(most of it). On Linux the kernel tells instead: one inotify watch on the folder of each
followed file reports writes to it, a new file under its name (rotation) and its
truncation, so a quiet log costs no wake-ups. A watch on a folder, not on the file: the
file may not exist yet, or be replaced, and the folder's watch sees both.

What inotify cannot see (a file on a network file system written by another machine, a
folder that does not exist yet) the caller covers with a slow look anyway
(`FALLBACK_SECONDS`), or with its old fast poll while some folder cannot be watched.
Without inotify (not Linux) every wait is the caller's timer. inotify is reached through
ctypes on the C library, as `harness.processes.children` reaches prctl: three calls, no package.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["FileChanges"]

# From <sys/inotify.h>.
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
WATCHED = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
"""A write, a truncation, and a file appearing, leaving or being renamed under a followed name."""

_EVENT = struct.Struct("iIII")
"""struct inotify_event: wd, mask, cookie, len (then `len` bytes of NUL-padded name)."""


@cache
def _libc() -> Any | None:
    """The C library with inotify, looked up once; None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


class FileChanges:
    """Waits until one of the files given to `watch` may have changed, `wake()` is called, or a timeout passes.

    `wait` returns True when the kernel reported a change to a watched name (or lost
    count: its queue overflowed), False on the timeout or a `wake()`. Usable from a
    thread or, under gevent's patching, a greenlet (`select` is then gevent's).
    """

    def __init__(self) -> None:
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._libc = _libc()
        self._fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC) if self._libc is not None else -1
        self._folders: dict[Path, int] = {}
        """Each watched folder and its watch descriptor."""
        self._names: dict[int, set[bytes]] = {}
        """Per watch descriptor: the names in that folder that are followed."""

    @property
    def available(self) -> bool:
        """Whether the kernel reports changes here (False: every wait is a timeout)."""
        return self._fd >= 0

    def watch(self, paths: Iterable[Path]) -> bool:
        """Watch the folders of `paths` (those not watched yet); True when every one of them is watched."""
        if self._fd < 0 or self._libc is None:
            return False
        complete = True
        for path in paths:
            folder = path.parent.absolute()
            wd = self._folders.get(folder)
            if wd is None:
                wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), WATCHED)
                if wd < 0:  # no such folder (yet), no permission, out of watches: the caller looks anyway
                    complete = False
                    continue
                self._folders[folder] = wd
            self._names.setdefault(wd, set()).add(os.fsencode(path.name))
        return complete

    def wait(self, timeout: float | None) -> bool:
        """Block until a watched name changed (True), or `timeout` seconds passed or `wake()` was called (False)."""
        fds = [self._wake_read, *([self._fd] if self._fd >= 0 else [])]
        while True:
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                continue
            break
        if self._wake_read in ready:
            self._drain(self._wake_read)
            return False
        return self._fd in ready and self._relevant(self._read_events())

    def wake(self) -> None:
        """Make a `wait` in progress (or the next one) return at once."""
        try:
            os.write(self._wake_write, b"x")
        except OSError:
            pass  # the pipe is full (a wake is pending anyway) or closed

    def close(self) -> None:
        for fd in (self._fd, self._wake_read, self._wake_write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._wake_read = self._wake_write = -1

    def _read_events(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def _relevant(self, events: bytes) -> bool:
        """Whether any event names a followed file (or the queue overflowed and it cannot be told)."""
        offset = 0
        while offset + _EVENT.size <= len(events):
            wd, mask, _cookie, length = _EVENT.unpack_from(events, offset)
            name = events[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & IN_Q_OVERFLOW or name in self._names.get(wd, ()):
                return True
        return False

    @staticmethod
    def _drain(fd: int) -> None:
        try:
            while os.read(fd, 4096):
                pass
        except BlockingIOError:
            pass
