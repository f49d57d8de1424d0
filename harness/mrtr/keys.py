"""Sealing keys as the harness and the shop both handle them: new keys, fingerprints, ring files.

Stdlib and `harness.secrets` only (every key made or read is registered there), so the
harness can make and rotate keys for any target without importing the reference server,
and the shop's replicas (`harness.shop.sealing`) name a key by the same fingerprint the
harness journals. Keys never leave a ring file or a process's
memory: logs, journals and reports show fingerprints only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from harness.secrets import fingerprint, register

MIN_KEY_BYTES = 32
RING_MODE = 0o600
"""A ring file is readable by its owner only, from the moment it exists."""


class KeyRingError(ValueError):
    """A key ring that cannot be used: says which source and why, never the key itself."""


def new_key() -> str:
    """A fresh ring key: 64 hex characters, used (like every string key) as its UTF-8 bytes; registered as a
    secret of this process (`harness.secrets`), so no text it writes can show it."""
    key = secrets.token_hex(32)
    register(key, "key")
    return key


def parse_ring(text: str, source: str) -> list[str]:
    """Keys from ring text: one per line (commas also split), blank lines and # comments ignored."""
    keys: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        keys.extend(part.strip() for part in line.split(",") if part.strip())
    if not keys:
        raise KeyRingError(f"key ring {source} holds no key")
    for index, key in enumerate(keys):
        if len(key.encode()) < MIN_KEY_BYTES:
            raise KeyRingError(f"key {index + 1} of ring {source} is shorter than {MIN_KEY_BYTES} bytes "
                               f"(fingerprint {fingerprint(key)})")
    if len(set(keys)) != len(keys):
        raise KeyRingError(f"ring {source} lists the same key twice")
    for key in keys:
        register(key, "key")
    return keys


def read_ring(path: Path) -> list[str]:
    return parse_ring(path.read_text(), str(path))


def write_ring(path: Path, keys: Sequence[str]) -> None:
    """Replace a ring file atomically (a replica re-reading it never sees half a ring), mode 0600 from creation.

    The new ring is written to a temporary file created with mode 0600 (not chmod-ed
    afterwards: it would be readable at the umask in between), then renamed over the ring.
    A ring that is there already keeps its owner where this process may give it (root): a
    harness running as root (compose's, for the engine's socket) rotating the ring of replicas
    that run as another user must not leave them a ring only root can read.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # left by a process with our PID that died mid-write
    try:
        owner: os.stat_result | None = path.stat()
    except FileNotFoundError:
        owner = None
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, RING_MODE)
    with os.fdopen(descriptor, "w") as ring:
        if owner is not None and (owner.st_uid, owner.st_gid) != (os.geteuid(), os.getegid()):
            with contextlib.suppress(PermissionError):
                os.fchown(ring.fileno(), owner.st_uid, owner.st_gid)
        ring.write("".join(f"{key}\n" for key in keys))
    os.replace(tmp, path)


def rewrite_ring_in_place(path: Path, keys: Sequence[str]) -> None:
    """Overwrite a ring file without replacing it (when the file itself is bind-mounted, a rename would not
    reach the container); its mode is made 0600 before any key is written."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, RING_MODE)
    with os.fdopen(descriptor, "w") as ring:
        os.fchmod(ring.fileno(), RING_MODE)
        ring.truncate(0)
        ring.write("".join(f"{key}\n" for key in keys))


def remove_rings(paths: Sequence[Path]) -> None:
    """Delete ring files (and temporary files of an interrupted write beside them); gone already is fine."""
    for path in paths:
        for stale in path.parent.glob(f".{path.name}.*.tmp") if path.parent.is_dir() else []:
            with contextlib.suppress(OSError):
                stale.unlink()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
