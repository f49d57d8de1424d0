"""How a shop replica seals `requestState`: its key ring, TTL, audience and clock.

The SDK's `RequestStateSecurity(codec=...)` is its supported seam for key handling, so
everything a chaos action needs to change under a running replica lives in one codec
around the SDK's own `AESGCMRequestStateCodec`:

- a key ring read from a file (one key per line, the first seals, every key opens) and
  re-read when the file changes, so a rotation needs no restart and can be done in the
  wrong order on purpose; or from an environment variable; or `ephemeral`, a key that
  lives and dies with the process;
- a clock offset, applied to the claims the SDK stamps and checks, so one replica can
  run "ahead" and reproduce `minted in the future` without touching the machine's clock.

Keys never leave this module and `harness.mrtr.keys` (which names, makes and writes them, the
same way for the harness and the shop): logs and reports show a key's fingerprint only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp.server.request_state import (
    AESGCMRequestStateCodec,
    InvalidRequestState,
    RequestStateSecurity,
    authenticated_principal,
)

from harness.mrtr.keys import KeyRingError, fingerprint, new_key, parse_ring
from harness.shop.planted import PlantedGuard

__all__ = ["KeyRingError", "ReloadingCodec", "build_security", "fingerprint", "new_key", "parse_ring"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RingSnapshot:
    """The ring in force: the codec for it and the fingerprints, sealing key first."""

    codec: AESGCMRequestStateCodec
    fingerprints: tuple[str, ...]


def _snapshot(keys: Sequence[str]) -> RingSnapshot:
    return RingSnapshot(AESGCMRequestStateCodec(list(keys)), tuple(fingerprint(key) for key in keys))


class KeyRingSource:
    """Where a replica's ring comes from: `file:PATH`, `env:VARIABLE` or `ephemeral`."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        kind, _, rest = spec.partition(":")
        if spec == "ephemeral":
            self._keys: list[str] | None = [new_key()]
            self.path: Path | None = None
        elif kind == "file" and rest:
            self.path, self._keys = Path(rest), None
        elif kind == "env" and rest:
            value = os.environ.get(rest)
            if value is None:
                raise KeyRingError(f"environment variable {rest} is not set")
            self.path, self._keys = None, parse_ring(value, f"env:{rest}")
        else:
            raise KeyRingError(f"unknown key ring {spec!r}: use file:PATH, env:VARIABLE or ephemeral")

    def read(self) -> list[str]:
        if self._keys is not None:
            return self._keys
        assert self.path is not None
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise KeyRingError(f"cannot read key ring file {self.path}: {exc.strerror}") from None
        return parse_ring(text, str(self.path))

    def stamp(self) -> tuple[int, int, int] | None:
        """What changes when the ring file is replaced or edited; None for fixed rings."""
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except OSError:
            return (0, 0, 0)
        return (st.st_ino, st.st_mtime_ns, st.st_size)


class ReloadingCodec:
    """The SDK's AES-GCM codec over a ring that follows its file, with an optional clock offset.

    The ring file is checked on every seal and unseal (one `stat`, far below the cost of a
    request) so a rotation takes effect on the next token, with no restart and no signal.
    A ring file that becomes unreadable or invalid keeps the last good ring and logs once:
    a bad edit must not take a replica down mid-rotation.
    """

    def __init__(self, source: KeyRingSource, *, clock_offset: float = 0.0, guard: PlantedGuard | None = None) -> None:
        self._source = source
        self._clock_offset = clock_offset
        self._guard = guard
        self._lock = threading.Lock()
        self._stamp = source.stamp()
        self._ring = _snapshot(source.read())
        self._last_error: str | None = None

    @property
    def fingerprints(self) -> tuple[str, ...]:
        return self._current().fingerprints

    def seal(self, payload: bytes) -> str:
        if self._clock_offset:
            payload = _shift_claims(payload, self._clock_offset)
        token = self._current().codec.seal(payload)
        if self._guard is not None:
            self._guard.sealed(token)
        return token

    def unseal(self, token: str) -> bytes:
        if self._guard is not None and self._guard.refuses(token):
            raise InvalidRequestState("unknown key")  # a planted fault (harness.shop.planted): keys forgotten
        payload = self._current().codec.unseal(token)
        if self._clock_offset:
            payload = _shift_claims(payload, -self._clock_offset)
        return payload

    def _current(self) -> RingSnapshot:
        stamp = self._source.stamp()
        if stamp == self._stamp:
            return self._ring
        with self._lock:
            if stamp != self._stamp:
                self._reload(stamp)
        return self._ring

    def _reload(self, stamp: tuple[int, int, int] | None) -> None:
        try:
            ring = _snapshot(self._source.read())
        except (KeyRingError, ValueError) as exc:
            if str(exc) != self._last_error:
                logger.error("key ring not reloaded, keeping the ring in force: %s", exc)
                self._last_error = str(exc)
            return
        self._ring, self._stamp, self._last_error = ring, stamp, None
        logger.info("key ring reloaded: sealing with %s, opening %s", ring.fingerprints[0],
                    ",".join(ring.fingerprints))


def _shift_claims(payload: bytes, offset: float) -> bytes:
    """Move the envelope's `iat` and `exp` by `offset` seconds.

    Sealing with +offset is what a replica whose clock runs ahead would mint; opening
    with -offset makes the SDK's checks against the real clock equal checks against a
    clock `offset` ahead. Anything that is not the SDK's envelope is left to fail the
    SDK's own checks unchanged.
    """
    try:
        claims = json.loads(payload)
        claims["iat"] += offset
        claims["exp"] += offset
    except (ValueError, KeyError, TypeError):
        raise InvalidRequestState("malformed") from None
    return json.dumps(claims, separators=(",", ":")).encode()


def build_security(keyring: str, *, ttl: float, audience: str | None, clock_offset: float = 0.0,
                   bind_principal=authenticated_principal,
                   guard: PlantedGuard | None = None) -> tuple[RequestStateSecurity, ReloadingCodec]:
    """The replica's sealing policy; returns the codec too, so the replica can report fingerprints. `guard`: the
    replica's planted faults (`harness.shop.planted`), none by default."""
    codec = ReloadingCodec(KeyRingSource(keyring), clock_offset=clock_offset, guard=guard)
    security = RequestStateSecurity(codec=codec, ttl=ttl, audience=audience, bind_principal=bind_principal)
    return security, codec
