"""Independent, reproducible random streams: one per (seed, worker, flow, ...).

One scenario seed must reproduce a whole run, yet flows run concurrently in many
greenlets and Locust workers, so they cannot share one generator (the interleaving
would change every draw). Each gets its own stream derived from the seed and its
names. The derivation is sha256, never `hash()`, which Python salts per process:
two workers, or two runs, must derive the same stream from the same names.
"""

from __future__ import annotations

import hashlib
import random

_DOMAIN = b"mrtr-harness/leads/stream/v1"
"""Prefix of every digest, so these streams never collide with another use of sha256(seed)."""


def derive_seed(seed: int, *parts: str | int) -> int:
    """A 256-bit integer seed for (seed, *parts); handy to pass to a worker process."""
    digest = hashlib.sha256(_DOMAIN)
    for part in (seed, *parts):
        digest.update(_encode(part))
    return int.from_bytes(digest.digest(), "big")


def stream(seed: int, *parts: str | int) -> random.Random:
    """A `random.Random` for (seed, *parts), e.g. `stream(7, "worker", 2, "flow", 1041)`.

    Same arguments, same stream, in any process; different arguments, independent streams.
    """
    return random.Random(derive_seed(seed, *parts))


def _encode(part: str | int) -> bytes:
    """Type-tagged and length-prefixed, so ("1",) and (1,), or ("ab","c") and ("a","bc") differ."""
    if isinstance(part, bool) or not isinstance(part, int | str):
        raise TypeError(f"stream parts must be str or int, got {type(part).__name__}: {part!r}")
    tag, body = (b"i", str(part).encode()) if isinstance(part, int) else (b"s", part.encode("utf-8"))
    return tag + str(len(body)).encode() + b":" + body
