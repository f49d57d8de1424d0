"""A flow's trace ids while it runs, and the sampling decision, without the SDK.

What the load's hot path touches when spans are exported: one random id per flow, one per round,
and the `traceparent` bytes. The spans themselves are built by the run's live fold from the
journal (`harness.telemetry.flow_spans`, `harness.folding.flow_traces`): the load only writes the
ids into the records. Kept apart so the round loop imports nothing of OpenTelemetry, on or off.
"""

from __future__ import annotations

import logging
import os
import random
import zlib
from collections.abc import Mapping
from functools import lru_cache
from typing import Final
from urllib.parse import urlsplit

__all__ = ["DEFAULT_SHARE", "KEPT_OUTCOMES", "FlowTrace", "Sampling", "error_type", "flow_span_id", "kept",
           "rpc_code", "sampled_share", "server_of", "trace_hex"]

logger = logging.getLogger(__name__)

SAMPLER_ARG: Final = "OTEL_TRACES_SAMPLER_ARG"
DEFAULT_SHARE: Final = 0.01
"""The share of flows without a failure whose spans are exported when `OTEL_TRACES_SAMPLER_ARG` is unset."""
KEPT_OUTCOMES: Final = frozenset({"rejected", "error", "rounds_exceeded"})
"""Flow outcomes whose spans are always exported (besides every flow with a failed round): what went wrong."""

_ids = random.Random()  # seeded from the OS: ids must differ between runs and processes, never repeat
_bits = _ids.getrandbits


def trace_hex(trace_id: int) -> str:
    """A trace id as the journal and `traceparent` write it: 32 lowercase hex digits."""
    return f"{trace_id:032x}"


def flow_span_id(trace_id: int) -> int:
    """The flow span's id, derived from its trace id (its low 64 bits; 1 if they are zero): one id fewer to draw and
    to journal per flow, and each flow is a trace of its own, so it is unique where it needs to be."""
    return (trace_id & 0xFFFF_FFFF_FFFF_FFFF) or 1


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
    same seed keeps the same flows, on any number of workers (`Sampling.kept` says how)."""
    return Sampling(seed, share).kept(flow_id, failed, "")


class Sampling:
    """The run's sampling: its seed and share, judged once per flow when it ends, by the load process that ran the
    flow (it marks a kept flow's `flow` record with its trace id, and the live fold exports what is marked)."""

    __slots__ = ("share", "seed", "_seed_crc")

    def __init__(self, seed: int, share: float | None = None) -> None:
        self.share = sampled_share() if share is None else share
        self.seed = seed
        self._seed_crc = zlib.crc32(f"{seed}:".encode())
        """The hash of the flow ids' common prefix, carried on into each flow's (the CRC of the whole key)."""

    def kept(self, flow_id: str, failed_round: bool, outcome: str) -> bool:
        """Every flow with a failed round or a failed outcome; of the rest, those whose CRC-32 of `{seed}:{flow_id}`
        falls in the share's part of its range (a spread, not a secret: the cheapest hash)."""
        share = self.share
        if failed_round or outcome in KEPT_OUTCOMES or share >= 1.0:
            return True
        if share <= 0.0:
            return False
        return zlib.crc32(flow_id.encode(), self._seed_crc) < share * 2.0**32


_HTTP_CLASSES: Final = frozenset({"http_error", "unauthorized", "forbidden"})


def error_type(code: str, http_status: int | None) -> str:
    """The conventions' `error.type` of a failed round from its journal `code` (a JSON-RPC code or a failure class):
    the JSON-RPC code, `tool_error`, the HTTP status, or the transport failure."""
    if code in _HTTP_CLASSES and http_status is not None:
        return str(http_status)
    return code or "_OTHER"


def rpc_code(code: str | None) -> str | None:
    """The JSON-RPC error code a journal `code` is (`-32602`), or None when it is a failure class."""
    return code if code is not None and code.lstrip("-").isdigit() else None


@lru_cache(maxsize=256)
def server_of(url: str) -> str:
    """`host:port` of a round's URL (the port its scheme implies when it names none; IPv6 in brackets): what its
    span's `server.address` and `server.port` say, and all the journal keeps of the URL (no path, no query, no
    credentials). A handful of URLs a run: each read once."""
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


_COUNTER_DIGITS: Final = 5
_COUNTER_MASK: Final = (1 << 4 * _COUNTER_DIGITS) - 1
_COUNTER_HEX: Final = tuple(f"{n:0{_COUNTER_DIGITS}x}" for n in range(256))
"""A flow's first span numbers as their id's last hex digits, written out once (a flow makes a handful)."""


class FlowTrace:
    """One flow's trace id while it runs (its flow span's id derived from it) and whether a round of it failed.

    Its round spans' ids are drawn once per flow, not per round: the trace id's first 11 hex digits, then the
    span's number within the flow in 5 (1, 2, ...). Unique within the trace (the flow span's id is the trace id's
    last 16 digits), never zero, and cheaper than a random draw and a hex format per round; ids need only be unique
    within their trace, which is the flow's own and random."""

    __slots__ = ("trace_id", "trace_text", "failed", "_prefix", "_span_base", "_spans")

    def __init__(self) -> None:
        self.trace_id = _bits(128) or 1
        self.trace_text = text = trace_hex(self.trace_id)
        """The trace id as the journal writes it (formatted once per flow)."""
        self.failed = False
        self._prefix = b"00-" + text.encode() + b"-"
        self._span_base = text[:16 - _COUNTER_DIGITS]
        self._spans = 0

    def new_span(self) -> str:
        """The flow's next round span's id, as the journal writes it (16 hex digits)."""
        self._spans = number = self._spans + 1
        return self._span_base + (_COUNTER_HEX[number] if number < 256 else
                                  f"{number & _COUNTER_MASK or 1:0{_COUNTER_DIGITS}x}")

    def traceparent(self, span: str) -> bytes:
        """The W3C `traceparent` of a round span: version 00, sampled (01), so a parent-based server records it."""
        return self._prefix + span.encode() + b"-01"
