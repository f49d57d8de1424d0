"""Files the harness writes in a folder it was handed: whole or not at all, and never through a planted link.

A results folder, a hunt's folder or a comparison's `--output` is a folder someone gave the
harness; a symbolic link planted there (`report.html -> ~/.bashrc`) must not make it write
anywhere else. A file is written to a temporary file made fresh beside it (O_EXCL: never an
existing file or link) and renamed over its name, so a reader never sees half of it; a name
that is a symbolic link is refused (`PlantedLink`, one line, exit 2) and left as it is. A file
the harness appends to (a log kept open) is opened with O_NOFOLLOW, refused the same way.
Standard library only: every layer that writes a file uses it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Literal, overload

from harness.errors import UsageError

__all__ = ["PlantedLink", "open_append", "refuse_link", "write_atomically"]


class PlantedLink(UsageError):
    """A file the harness would write is a symbolic link: nothing is written through it (bad input: exit 2)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} is a symbolic link: not written (the harness never writes through a link in a "
                         "folder it was given; remove the link and try again)")
        self.path = path


def refuse_link(path: Path) -> None:
    """`PlantedLink` when `path` is a symbolic link (`lstat`: the link itself, never what it points at)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise PlantedLink(path)


def write_atomically(path: Path, data: str | bytes) -> Path:
    """Replace `path` with `data` (text as UTF-8) in one step: a temporary file made fresh in its folder, renamed over.

    A symbolic link at `path` is refused (`PlantedLink`), not followed and not replaced; the
    rename itself replaces a name, never what a link points at, so a link planted between the
    check and the rename is replaced, not written through. The new file's mode is the umask's.
    """
    refuse_link(path)
    content = data.encode("utf-8") if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


@overload
def open_append(path: Path, *, binary: Literal[False] = False) -> IO[str]: ...
@overload
def open_append(path: Path, *, binary: Literal[True]) -> IO[bytes]: ...
def open_append(path: Path, *, binary: bool = False) -> IO[str] | IO[bytes]:
    """`path` opened to append to (made when missing), never through a symbolic link (`PlantedLink`)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PlantedLink(path) from None
        raise
    return os.fdopen(descriptor, "ab") if binary else os.fdopen(descriptor, "a", encoding="utf-8")
