"""A log file followed like `tail -F`: across truncation and replacement, in bounded reads.

The process backend's replica logs survive restarts by appending to the same file; an
external deployment's files may be rotated under us. A follower only reads when asked
(`read_lines`), so one poller can serve every file of a run (`harness.logs.readers`).

A gzipped log (a rotated `app.log.2.gz`) is read once, decompressed as it is read: it is
never written again, so there is nothing to follow. `sniff` tells a log from a compressed
one and from a file that is no log at all (a NUL byte in its first bytes, as grep and git
decide), so a binary file is refused by name rather than read as no rejection.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Literal, TextIO

from harness.logs.parse import LINE_CAP

GZIP_MAGIC = b"\x1f\x8b"
SNIFF_BYTES = 8192
"""How much of a file (decompressed, for gzip) is looked at to tell a text log from a binary file."""

Kind = Literal["text", "gzip", "binary", "damaged gzip"]


def sniff(path: Path) -> Kind:
    """What `path` holds, by its first bytes: a text log, a gzipped one, or something that is no log."""
    with path.open("rb") as raw:
        head = raw.read(SNIFF_BYTES)
    kind: Kind = "text"
    if head.startswith(GZIP_MAGIC):
        kind = "gzip"
        try:
            with gzip.open(path, "rb") as unpacked:
                head = unpacked.read(SNIFF_BYTES)
        except (OSError, EOFError):
            return "damaged gzip"
    return "binary" if b"\0" in head else kind


class FileFollower:
    """Reads whole lines appended to a file, following it across truncation and replacement (tail -F).

    `from_start=False` reads only what is written from now on: the file is opened at its
    end as of this call (what it held is history, not this run). A file that does not
    exist yet is new throughout, so it is read from its start when it appears.
    """

    def __init__(self, path: Path, *, from_start: bool = True, compressed: bool = False) -> None:
        self.path = path
        self.compressed = compressed
        self._file: TextIO | None = None
        self._inode: int | None = None
        self._partial = ""
        if not from_start:
            self._reopen_if_replaced()
            if self._file is not None:
                self._file.seek(0, os.SEEK_END)

    def read_lines(self, max_chars: int | None = None) -> list[str]:
        """Every complete line added since the last call; [] when there is nothing new.

        `max_chars` bounds one read (a reader that must keep its memory flat over a huge
        file calls again until it gets []); by default the whole rest is read at once.
        """
        lines = self._reopen_if_replaced()
        if self._file is None:
            return lines
        size = -1 if max_chars is None else max_chars
        text = self._partial
        while chunk := self._file.read(size):
            text += chunk
            if size < 0 or "\n" in chunk:
                break  # [] keeps meaning "nothing new": a line longer than max_chars is read on
            text = text[:LINE_CAP + 1]  # no newline in it yet: one line, of which the parser reads LINE_CAP
        new = text.split("\n")
        self._partial = new.pop()[:LINE_CAP + 1]
        return lines + new if lines else new

    def take_partial(self) -> str:
        """The unfinished last line read so far, now taken: a file read once may not end with a newline."""
        partial, self._partial = self._partial, ""
        return partial

    def _reopen_if_replaced(self) -> list[str]:
        """Switch to a file that replaced ours; returns the old file's unfinished last line, if any.

        A renamed file is read to its end before the switch (as `tail -F` does), so lines
        written just before a rotation are not lost.
        """
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return []
        if self.compressed:
            return self._open_compressed()
        if self._file is not None and stat.st_ino == self._inode and stat.st_size >= self._file.tell():
            return []
        tail: list[str] = []
        if self._file is not None:
            if stat.st_ino != self._inode:
                if os.fstat(self._file.fileno()).st_size > self._file.tell():
                    return []  # replaced, but the old file still holds unread lines: those first
                if self._partial:
                    tail = [self._partial]
            self._file.close()
        try:
            self._file = open(self.path, encoding="utf-8", errors="replace")  # noqa: SIM115 - kept open while following
        except FileNotFoundError:  # removed between the stat and the open: looked for again next time
            self._file = None
            return tail
        self._inode = stat.st_ino
        self._partial = ""
        return tail

    def _open_compressed(self) -> list[str]:
        """A gzipped log is opened once and read through; its offsets are not the file's, so never reopened."""
        if self._file is None and self._inode is None:
            self._file = gzip.open(self.path, "rt", encoding="utf-8", errors="replace")  # noqa: SIM115 - kept open
            self._inode = os.fstat(self._file.fileno()).st_ino
        return []

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
