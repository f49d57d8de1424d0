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
from typing import TypeVar

T = TypeVar("T")

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


_MASK64 = (1 << 64) - 1
_Random = random.Random
"""Spelled apart: inside `FlowStream`'s body, `random` is its own method."""


class FlowStream:
    """A flow's own random stream in one 64-bit integer (SplitMix64), not a Mersenne Twister.

    A `random.Random` holds 2.5 KiB of state; 100,000 flows waiting on their leads cannot
    each keep one. SplitMix64 passes BigCrush, is seeded by any integer and needs no
    warm-up; a simulated person's choices need nothing stronger. The distributions are
    `random.Random`'s own methods, drawing from this stream's `random` and `getrandbits`,
    so they behave exactly as documented there.
    """

    __slots__ = ("_state", "gauss_next")

    def __init__(self, seed: int) -> None:
        self._state = seed & _MASK64
        self.gauss_next: float | None = None
        """Used by `gauss`, which draws its normals in pairs (as `random.Random` does)."""

    def _next64(self) -> int:
        self._state = state = (self._state + 0x9E3779B97F4A7C15) & _MASK64
        z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def random(self) -> float:
        """A float in [0, 1) with 53 random bits, like `random.Random.random`."""
        return (self._next64() >> 11) * (1.0 / (1 << 53))

    def getrandbits(self, k: int, /) -> int:
        """An integer of `k` random bits (a long one, for the fuzzer's oversize states, from a seeded generator)."""
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        if k > 4096:
            return _Random(self._next64()).getrandbits(k)
        bits, have = 0, 0
        while have < k:
            bits = (bits << 64) | self._next64()
            have += 64
        return bits >> (have - k)

    _randbelow = _Random._randbelow_with_getrandbits  # type: ignore[attr-defined]  # private in typeshed, public in random.py
    choice = _Random.choice
    choices = _Random.choices
    randrange = _Random.randrange
    randint = _Random.randint
    uniform = _Random.uniform
    expovariate = _Random.expovariate
    normalvariate = _Random.normalvariate
    lognormvariate = _Random.lognormvariate
    gauss = _Random.gauss
    randbytes = _Random.randbytes
    shuffle = _Random.shuffle
    sample = _Random.sample


class FlowStreams:
    """Small streams, one per flow: `FlowStream(derive_seed(seed, *prefix, last))` for many values of `last`, with
    the prefix hashed once. Same arguments, same draws, in any process.

    A load process derives one stream per flow, all under the same prefix; sha256 is fed
    part by part, so a copy of the prefix's state fed `last` is the same digest.
    """

    def __init__(self, seed: int, *prefix: str | int) -> None:
        self._prefix = hashlib.sha256(_DOMAIN)
        for part in (seed, *prefix):
            self._prefix.update(_encode(part))

    def stream(self, last: str | int) -> FlowStream:
        digest = self._prefix.copy()
        digest.update(_encode(last))
        return FlowStream(int.from_bytes(digest.digest(), "big"))


def _encode(part: str | int) -> bytes:
    """Type-tagged and length-prefixed, so ("1",) and (1,), or ("ab","c") and ("a","bc") differ."""
    if isinstance(part, bool) or not isinstance(part, int | str):
        raise TypeError(f"stream parts must be str or int, got {type(part).__name__}: {part!r}")
    tag, body = (b"i", str(part).encode()) if isinstance(part, int) else (b"s", part.encode("utf-8"))
    return tag + str(len(body)).encode() + b":" + body
