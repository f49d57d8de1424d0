"""A flow's trace while it runs: its ids, a compact mark per round, and the sampling decision, without the SDK.

What the load's hot path touches when spans are exported: two random ids and a tuple per round, and
the `traceparent` bytes. Kept apart from `flow_spans` (which builds and sends the spans with the
OpenTelemetry SDK) so the round loop imports nothing of OpenTelemetry, on or off.
"""

from __future__ import annotations

import logging
import os
import random
import zlib
from collections.abc import Mapping
from typing import Final, NamedTuple

__all__ = ["DEFAULT_SHARE", "FlowTrace", "RoundMark", "error_type", "kept", "sampled_share", "span_hex", "trace_hex"]

logger = logging.getLogger(__name__)

SAMPLER_ARG: Final = "OTEL_TRACES_SAMPLER_ARG"
DEFAULT_SHARE: Final = 0.01
"""The share of flows without a failure whose spans are exported when `OTEL_TRACES_SAMPLER_ARG` is unset."""

_ids = random.Random()  # seeded from the OS: ids must differ between runs and processes, never repeat
_bits = _ids.getrandbits


def trace_hex(trace_id: int) -> str:
    """A trace id as the journal and `traceparent` write it: 32 lowercase hex digits."""
    return f"{trace_id:032x}"


def span_hex(span_id: int) -> str:
    """A span id as the journal and `traceparent` write it: 16 lowercase hex digits."""
    return f"{span_id:016x}"


def sampled_share(environ: Mapping[str, str] | None = None) -> float:
    """`OTEL_TRACES_SAMPLER_ARG` as the share of flows without a failure to keep (0 to 1); the default when it is
    unset, and, with a warning, when it is not a number in that range (as the SDK's samplers treat it)."""
    text = (os.environ if environ is None else environ).get(SAMPLER_ARG, "").strip()
    if not text:
        return DEFAULT_SHARE
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        logger.warning("%s=%r is not a share between 0 and 1: %g used", SAMPLER_ARG, text, DEFAULT_SHARE)
        return DEFAULT_SHARE
    return share


def kept(seed: int, flow_id: str, share: float, failed: bool) -> bool:
    """Tail sampling: every failed flow; of the rest, `share` of them drawn from (seed, flow id), so a rerun with the
    same seed keeps the same flows, on any number of workers."""
    if failed or share >= 1.0:
        return True
    if share <= 0.0:
        return False
    return zlib.crc32(f"{seed}:{flow_id}".encode()) < share * 2.0**32  # a spread, not a secret: the cheapest hash


class RoundMark(NamedTuple):
    """What a round span needs, kept on its flow while the flow is in flight (one tuple a round)."""

    span_id: int
    tool: str
    round: int
    replica: str
    url: str
    request_id: int
    sent: float
    received: float
    outcome: str
    failure: str | None
    """The journal's `code`: a JSON-RPC code or a failure class; None when the round did not fail."""
    http_status: int | None
    error_code: int | None
    state_bytes: int | None


_HTTP_CLASSES: Final = frozenset({"http_error", "unauthorized", "forbidden"})


def error_type(mark: RoundMark) -> str:
    """The conventions' `error.type`: the JSON-RPC code, `tool_error`, the HTTP status, or the transport failure."""
    if mark.error_code is not None:
        return str(mark.error_code)
    if mark.failure in _HTTP_CLASSES and mark.http_status is not None:
        return str(mark.http_status)
    return mark.failure or "_OTHER"


class FlowTrace:
    """One flow's ids and round marks while it runs: a trace id, its own span id, one span id per round."""

    __slots__ = ("trace_id", "span_id", "marks", "failed", "_prefix")

    def __init__(self) -> None:
        self.trace_id = _bits(128) or 1
        self.span_id = _bits(64) or 1
        self.marks: list[tuple[object, ...]] = []
        """Each round's `RoundMark` fields as a plain tuple (made into a `RoundMark` only for a flow kept)."""
        self.failed = False
        self._prefix = b"00-%032x-" % self.trace_id

    @staticmethod
    def new_span() -> int:
        return _bits(64) or 1

    def traceparent(self, span_id: int) -> bytes:
        """The W3C `traceparent` of a round span: version 00, sampled (01), so a parent-based server records it."""
        return self._prefix + b"%016x-01" % span_id

    def mark(self, mark: tuple[object, ...], failed: bool) -> None:
        """A round's fields in `RoundMark`'s order: a plain tuple, the cheapest thing to keep per round."""
        self.marks.append(mark)
        if failed:
            self.failed = True

    def round_marks(self) -> list[RoundMark]:
        """The rounds' marks, named: what the spans of a kept flow are built from."""
        return [RoundMark._make(mark) for mark in self.marks]
