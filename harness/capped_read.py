"""Files the harness reads that others wrote (a triage file, a corpus entry, an adapter, a snapshot): at most so
many bytes, the rest never read, so a huge or endless file (a link to /dev/zero) costs a bounded read.

A caller says what "too large" means in its own words (`TooLarge` carries the cap). With `plain_only`,
the file is opened without following a symbolic link and without blocking on a pipe, and anything but
a plain file is refused (`NotPlain`): for files read from a folder someone else fills. Standard library
only: every layer that reads such a file uses it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["NotPlain", "TooLarge", "read_capped"]


class TooLarge(Exception):
    """The file holds more than the cap: nothing past it was read."""

    def __init__(self, most: int) -> None:
        super().__init__(f"larger than {most} bytes")
        self.most = most


class NotPlain(Exception):
    """`plain_only`: the path is a symbolic link (not followed), or not a plain file; the text says which."""


def read_capped(path: Path, most: int, *, plain_only: bool = False) -> bytes:
    """At most `most` bytes of the file at `path`; `TooLarge` when it holds more, `OSError` as the system says (with
    `plain_only`, `NotPlain` for a link or anything but a plain file)."""
    if plain_only:
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotPlain("a symbolic link: not followed") from None
            raise
        with os.fdopen(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise NotPlain("not a plain file")
            raw = file.read(most + 1)
    else:
        with open(path, "rb") as file:
            raw = file.read(most + 1)
    if len(raw) > most:
        raise TooLarge(most)
    return raw
