"""Which log lines are the SDK's `requestState` rejections, in every shape a replica prints them.

The SDK logs one WARNING on `mcp.server.request_state`: `requestState rejected on
<method>: <reason>`. It reaches the run's collector and triage in three shapes:

- **plain**: one line per record whatever the format around the message (the shop's
  `2026-11-30T05:12:57.934Z WARNING replica=r1 mcp.server.request_state: requestState
  rejected on tools/call: seal`, Python's default `WARNING:mcp.server...`, ...);
- **rich**: the SDK's own `configure_logging()` installs rich's `RichHandler` when rich is
  present. It pads the level and message into columns, appends `request_state.py:263`,
  blanks a repeated timestamp, and wraps (or, in narrow columns, folds mid-word) a long
  message onto indented continuation lines. So one rejection may span several lines and
  is reassembled here, per stream, by the message column;
- **JSON**: one object per line whose message field (`message`, `msg`, `log`, `MESSAGE`,
  ...) holds the SDK's message or a whole plain line, with a replica, pod or host field
  when the shipper adds one.

A line may also carry the trace id of the request it refused (the shop's replicas write `trace_id=<32 hex>`
after `replica=`; other servers a `trace_id`, `traceId`, `trace.id`, `otelTraceID` or `traceparent` field,
before or after the message, or in their JSON record): it is kept with the rejection, so a person can paste it
into their tracing backend, and never taken for part of the reason.

Most lines of a busy server are something else, so `feed` first does one cheap
substring test and returns; only lines that pass it are looked at further (and only
those have their timestamp read: `logged_at`, see `harness.logs.stamps`). The reason is
read by `harness.mrtr.reasons`, the one parser of the SDK's message.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from harness.logs.adapters import DETECT_LINES, PYTHON_SDK, Adapter, adapters, detected
from harness.logs.stamps import line_time, record_time
from harness.mrtr import outcome
from harness.mrtr.reasons import (
    BIND_PRINCIPAL_RETURNED,
    OTHER_REASON,
    REASONS,
    normalise_reason,
    rejection_parts,
)
from harness.secrets import fold_case

INVALID_PARAMS: Final = str(outcome.INVALID_PARAMS)
MISSING_CAPABILITY: Final = str(outcome.MISSING_REQUIRED_CLIENT_CAPABILITY)
"""The codes of the refusals a line may log, as the journal's round records spell them."""

MARK: Final = "requestState"
LEVEL: Final = "WARNING"
"""The cheap test: a rejection's first line holds `requestState`, or at least its level (rich, in
columns so narrow that it folds the word). A line with neither word is skipped at once."""

LINE_CAP: Final = 64 * 1024
"""Characters of one line that are parsed; the rest is cut (and counted): a line is outside text, of any length."""

REPLICA_LABEL_MAX = 64
"""Replica labels come from logs and become metric labels: bounded, printable."""

MESSAGE_KEYS: Final = ("message", "msg", "log", "MESSAGE", "@message", "event", "text")
REPLICA_KEYS: Final = ("replica", "replica_id", "pod", "pod_name", "kubernetes.pod_name", "kubernetes",
                       "container_name", "container", "hostname", "host", "_HOSTNAME", "instance")
"""JSON fields that name the process that logged, most specific first (nested objects: their `pod_name`)."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_KUBECTL_PREFIX = re.compile(r"\[pod/(?P<name>[^/\]\s]+)/[^\]\s]*\] ")
"""`kubectl logs --prefix`: `[pod/shop-7d9f-abcde/shop] ...`."""
_COMPOSE_PREFIX = re.compile(r"(?P<name>[\w.-]+-\d+)\s+\| ?")
"""`docker compose logs`: `shop-r1-1  | ...`."""
_REPLICA_FIELD = re.compile(r"\breplica=(?P<replica>[^\s,;]+)")
_RICH_HEAD = re.compile(r"(?P<lead>.{0,60}?\bWARNING\s+)(?P<message>\S.*)$")
_RICH_PATH = re.compile(r"[\w.\-]+\.py:\S*")
"""rich's right-hand column (`request_state.py:263`, or `request_state.py:2…` when squeezed): the last word of the
line, after blanks (`_without_rich_path`)."""

_TRACE_ID = re.compile(r"(?i)trace[_.]?id\"?\s*[=:]\s*\"?(?P<id>[0-9a-f]{32})(?![0-9a-z])"
                       r"|traceparent\"?\s*[=:]\s*\"?[0-9a-f]{2}-(?P<parent>[0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
"""A trace id in a line: a `trace_id`-like field (32 hex), or a W3C `traceparent` (its second part)."""
_TRACE_FIELD = re.compile(r"(?:trace[_.]?id|span[_.]?id|traceparent)\"?\s*[=:]\s*\"?[0-9a-f][0-9a-f-]{15,54}\"?")
_TRACE_PREFIX_BACKWARDS = re.compile(r"[\w.]*\"?[\s,;]*")
"""A trace field's name's prefix, an opening quote and the separators before it, read backwards."""
"""Trace fields taken out of a line before its reason is read: one after the message is not part of the reason.
Each is found by its name, then widened to the left over its name's prefix (`otel.trace_id`), an opening quote and
the separators before it (`_without_trace_fields`): no pattern that starts with an unbounded run, so the time is
linear in the line's length."""
TRACE_JSON_KEYS: Final = ("trace_id", "traceId", "trace.id", "otelTraceID", "traceparent")
"""JSON fields that hold the trace id of the request a record was logged in (`trace: {id}` as well, ECS's)."""
_NO_TRACE = "0" * 32

_COMPACT_HEAD = "requestStaterejectedon"
_COMPACT_REASONS: Final = frozenset(reason.replace(" ", "") for reason in REASONS)
_COMPACT_BIND = BIND_PRINCIPAL_RETURNED.replace(" ", "")
_COMPACT_BIND_END = "orNone"


def _compact(text: str) -> str:
    return "".join(text.split())


def _is_unfinished(compact_reason: str) -> bool:
    """True when more of the reason may follow on the next line (`principal` may become `principal drift`)."""
    if compact_reason in _COMPACT_REASONS:
        return any(other != compact_reason and other.startswith(compact_reason) for other in _COMPACT_REASONS)
    if compact_reason.startswith(_COMPACT_BIND):
        return not compact_reason.endswith(_COMPACT_BIND_END)
    return True  # a reason not known yet: wait for the record's end


@dataclass(frozen=True, slots=True)
class Rejection:
    """One refused `requestState`, as one replica logged it. No token, no key: the line carries none."""

    replica: str | None
    reason: str
    method: str
    logged_at: float | None = None
    """When the line says it was written (its own timestamp, else the one its source gave), if known."""
    logged: str = ""
    """The reason as the line gave it, kept for `OTHER_REASON` only (a reason this harness does not know yet);
    a rich record folds it, so there its spaces may be gone."""
    trace_id: str | None = None
    """The trace id (32 lowercase hex) of the request it refused, when the line carries one."""
    code: str = INVALID_PARAMS
    """The JSON-RPC code of the refusal the line logs: -32602 (a `requestState`), or -32021 (`UNASKED`: the client
    did not declare a capability the call needs; `reason` is then `UNASKED`, `logged` the capability named)."""

    @property
    def unasked(self) -> bool:
        """Whether the line logs a -32021, not a refused `requestState`."""
        return self.code == MISSING_CAPABILITY


OnRejection = Callable[[Rejection], None]


@dataclass(slots=True)
class _Pending:
    """A rich record whose message may continue on the next lines."""

    replica: str | None
    column: int
    compact: str
    since: float
    logged_at: float | None
    trace_id: str | None = None


def clean_label(value: Any) -> str | None:
    """A replica label fit for output and metrics, or None."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = "".join(ch for ch in str(value).strip() if ch.isprintable() and not ch.isspace())
    return text[:REPLICA_LABEL_MAX] or None


class LineParser:
    """Turns one stream's lines into rejections; one parser per stream (a rich record spans lines).

    `feed` may be called from the stream's reader thread while `flush` is called from
    another (the display's tick, to finish a record the stream went quiet after): the
    common path takes no lock, and everything that touches the unfinished records does.

    Each line is parsed inside its own guard: a line that makes the parser raise (an
    impossible stamp, JSON nested past the recursion limit, anything) is counted in `bad`
    and skipped, and the stream reads on. A line longer than `LINE_CAP` is cut to it and
    counted in `cut`. Rejections are handed to `on_rejection` outside the guard and the lock.
    """

    bad: int
    """Lines the parser could not read (skipped)."""
    cut: int
    """Lines longer than `LINE_CAP`, parsed cut to it."""

    def __init__(self, on_rejection: OnRejection, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] | None = None, adapter: Adapter | None = None,
                 detect: Callable[[str], None] | None = None) -> None:
        """`wall`: the clock a line is read by as it is written (a run's collector), against which a stamp
        without a zone is read as local time or UTC (`harness.logs.stamps`); without it, local time.
        `adapter`: the server implementation whose rejection lines these are (`harness.logs.adapters`); the
        Python SDK's when not given. `detect` (without `adapter`): tell the implementation from the lines
        themselves (the first line any built-in adapter reads decides), and say how, once, in one line to it."""
        chosen = adapter or adapters()[PYTHON_SDK]
        self.adapter = chosen
        self._foreign = chosen if chosen.pattern is not None else None
        self._say = detect if adapter is None else None
        self._candidates = tuple(adapters().values()) if self._say is not None else ()
        self._decided = False
        self._seen = 0
        self._hits = 0
        self._emit = on_rejection
        self._clock = clock
        self._wall = wall
        self._pending: dict[str | None, _Pending] = {}
        self._lock = threading.Lock()
        self._found: list[Rejection] = []
        self.bad = 0
        self.cut = 0

    def feed(self, line: str, replica: str | None = None, t: float | None = None) -> None:
        """Look at one line (with or without its newline); `replica` is what the source knows, if anything,
        and `t` when the source says the line was written (the engine's timestamp of a container's line)."""
        if len(line) > LINE_CAP:
            line = line[:LINE_CAP]
            self.cut += 1
        if self._say is not None:
            self._detect(line)
        foreign = self._foreign
        if foreign is not None:
            if not foreign.marks(line):
                return
        elif not self._pending and MARK not in line and LEVEL not in line:
            return
        with self._lock:
            try:
                if foreign is not None:
                    self._parse_foreign(foreign, line, replica, t)
                else:
                    self._parse(line, replica, t)
            except Exception:  # noqa: BLE001 - one line, whatever it holds, never stops the stream: counted
                self.bad += 1
            found, self._found = self._found, []
        for rejection in found:
            self._emit(rejection)

    def _detect(self, line: str) -> None:
        """Count `line` toward the format's detection; the first line an adapter reads decides which one reads on."""
        self._seen += 1
        if not self._decided:
            for candidate in self._candidates:
                if candidate.detects(line):
                    self._decided = True
                    self.adapter = candidate
                    self._foreign = candidate if candidate.pattern is not None else None
                    break
        if not self._decided:
            return
        if self._seen <= DETECT_LINES and self.adapter.detects(line):
            self._hits += 1
        if self._seen >= DETECT_LINES:
            self._said(detected(self.adapter.name, max(self._hits, 1), self._seen))

    def _said(self, line: str) -> None:
        """Say `line` once; the default format (the Python SDK's, as every log was read before adapters) silently."""
        say, self._say = self._say, None
        if say is not None and self.adapter.name != PYTHON_SDK:
            say(line)

    def said_format(self) -> None:
        """Say how the lines were read if it was not said yet (a log shorter than the detection's lines)."""
        if self._say is not None and self._decided:
            self._said(detected(self.adapter.name, self._hits, min(self._seen, DETECT_LINES)))

    @property
    def waiting(self) -> bool:
        """Whether a rich record waits for its continuation lines (`flush` will finish it when they do not come)."""
        return bool(self._pending)

    def flush(self, older_than: float | None = None) -> None:
        """Finish unfinished rich records (all, or those waiting more than `older_than` seconds)."""
        if older_than is None:
            self.said_format()
        if not self._pending:
            return
        with self._lock:
            now = self._clock()
            for key, pending in list(self._pending.items()):
                if older_than is None or now - pending.since >= older_than:
                    del self._pending[key]
                    try:
                        self._finish(pending)
                    except Exception:  # noqa: BLE001 - as in `feed`: the record's lines are counted as one bad line
                        self.bad += 1
            found, self._found = self._found, []
        for rejection in found:
            self._emit(rejection)

    # --- the slow path: a line that may be a rejection, or continue one --------------------------

    def _parse(self, line: str, replica: str | None, t: float | None) -> None:
        line = line.rstrip("\r\n")
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        replica, line = self._strip_prefix(line, replica)
        pending = self._pending.get(replica)
        if pending is not None:
            if self._continues(pending, line):
                return
            del self._pending[replica]
            self._finish(pending)
        if MARK not in line and LEVEL not in line:
            return
        stripped = line.lstrip()
        if stripped.startswith("{") and self._parse_json(stripped, replica, t):
            return
        if LEVEL in line and self._parse_rich_head(line, replica, t):
            return
        self._parse_plain(line, replica, t)

    def _parse_foreign(self, adapter: Adapter, line: str, replica: str | None, t: float | None) -> None:
        """A line of another server implementation, read by its adapter (plain, or a JSON record's message)."""
        line = line.rstrip("\r\n")
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        replica, line = self._strip_prefix(line, replica)
        text, trace_id, given = line, None, t
        stripped = line.lstrip()
        if stripped.startswith("{"):
            try:
                record = json.loads(stripped)
            except ValueError:
                record = None
            if isinstance(record, dict):
                message = next((record[key] for key in MESSAGE_KEYS if isinstance(record.get(key), str)), None)
                if message is None:
                    return
                text, replica = message, replica or _json_replica(record)
                given, trace_id = _first(record_time(record, self._near(t)), t), _json_trace_id(record)
        if _may_trace(text):
            trace_id = trace_id or trace_id_in(text)
            text = _without_trace_fields(text)
        code = INVALID_PARAMS
        found = adapter.read(text, self._near(given))
        if found is None:
            found, code = adapter.read_unasked(text, self._near(given)), MISSING_CAPABILITY
        if found is None:
            return
        if replica is None:
            field = _REPLICA_FIELD.search(text)
            replica = clean_label(found.replica) or (clean_label(field["replica"]) if field else None)
        self._found.append(Rejection(replica, found.reason, found.method, _first(found.logged_at, given),
                                     found.logged, trace_id, code))

    @staticmethod
    def _strip_prefix(line: str, replica: str | None) -> tuple[str | None, str]:
        """A stream prefix names the replica (unless the source already does) and is not part of the record."""
        if line.startswith("[pod/"):
            match = _KUBECTL_PREFIX.match(line)
        elif "|" in line[:80]:
            match = _COMPOSE_PREFIX.match(line)
        else:
            return replica, line
        if match is None:
            return replica, line
        return replica or clean_label(match["name"]), line[match.end():]

    def _parse_plain(self, text: str, replica: str | None, t: float | None, trace_id: str | None = None) -> bool:
        if _may_trace(text):
            trace_id = trace_id or trace_id_in(text)
            text = _without_trace_fields(text)
        parts = rejection_parts(text)
        if parts is None:
            return False
        if replica is None:
            field = _REPLICA_FIELD.search(text)
            replica = clean_label(field["replica"]) if field else None
        self._found.append(_rejection(replica, parts[1], parts[0], _first(line_time(text, self._near(t)), t), trace_id))
        return True

    def _parse_json(self, text: str, replica: str | None, t: float | None) -> bool:
        try:
            record = json.loads(text)
        except ValueError:
            return False
        if not isinstance(record, dict):
            return False
        message = next((record[key] for key in MESSAGE_KEYS if isinstance(record.get(key), str)), None)
        if message is None or MARK not in message:
            return True  # a JSON record, and not a rejection
        return self._parse_plain(message, replica or _json_replica(record),
                                 _first(record_time(record, self._near(t)), t), _json_trace_id(record))

    def _parse_rich_head(self, line: str, replica: str | None, t: float | None) -> bool:
        match = _RICH_HEAD.match(line)
        if match is None:
            return False
        message = _without_rich_path(match["message"])
        compact = _compact(message)
        if not (compact.startswith(_COMPACT_HEAD) or _COMPACT_HEAD.startswith(compact)):
            return False  # another WARNING, or a plain line with the level before other fields
        logged_at = _first(line_time(line, self._near(t)), t)
        pending = _Pending(replica, match.end("lead"), compact, self._clock(), logged_at, trace_id_in(match["lead"]))
        if not self._complete(pending):
            self._pending[replica] = pending
        return True

    def _near(self, t: float | None) -> float | None:
        """When the line was received: its source's time for it, else now on the wall clock, if reading live."""
        if t is not None:
            return t
        return self._wall() if self._wall is not None else None

    def _continues(self, pending: _Pending, line: str) -> bool:
        """Append `line` to `pending` if it is its continuation (text in the message column, blanks before)."""
        column = pending.column
        if len(line) <= column or not line[column:column + 1].strip() or line[:column].strip():
            return False
        pending.compact += _compact(line[column:])
        if self._complete(pending):
            del self._pending[pending.replica]
        return True

    def _complete(self, pending: _Pending) -> bool:
        """Emit `pending` if its reason cannot grow any more; True if it did."""
        parsed = _split_compact(pending.compact)
        if parsed is None or _is_unfinished(parsed[1]):
            return False
        self._found.append(_rejection(pending.replica, parsed[1], parsed[0], pending.logged_at, pending.trace_id))
        return True

    def _finish(self, pending: _Pending) -> None:
        parsed = _split_compact(pending.compact)
        if parsed is not None and parsed[1]:
            self._found.append(_rejection(pending.replica, parsed[1], parsed[0], pending.logged_at, pending.trace_id))


def _rejection(replica: str | None, logged: str, method: str, logged_at: float | None,
               trace_id: str | None = None) -> Rejection:
    reason = normalise_reason(logged)
    return Rejection(replica, reason, method, logged_at, logged if reason == OTHER_REASON else "", trace_id)


def trace_id_in(text: str) -> str | None:
    """The trace id a line (or a field's value) carries, as 32 lowercase hex; None when it carries none."""
    if not _may_trace(text):
        return None
    for match in _TRACE_ID.finditer(text):
        found = (match["id"] or match["parent"]).lower()
        if found != _NO_TRACE:
            return found
    return None


def _without_rich_path(message: str) -> str:
    """`message` without rich's path column: its last word when that is `file.py:LINE`, with the blanks before it."""
    words = message.rsplit(None, 1)
    start = len(message.rstrip()) - len(words[-1]) if words else 0
    if start == 0 or _RICH_PATH.fullmatch(words[-1]) is None:
        return message
    return message[:start].rstrip()


def _without_trace_fields(text: str) -> str:
    """`text` without its trace fields (`trace_id=...`, `"traceparent": "..."`), each with its name's prefix and the
    separators before it."""
    kept: list[str] = []
    done = 0
    for match in _TRACE_FIELD.finditer(fold_case(text)):
        before = text[done:match.start()][::-1]  # read backwards: the prefix is a pattern's match from its start
        start = match.start() - _TRACE_PREFIX_BACKWARDS.match(before).end()  # type: ignore[union-attr]
        kept.append(text[done:start])
        done = match.end()
    return "".join(kept) + text[done:] if kept else text


def _may_trace(text: str) -> bool:
    """The cheap test before the trace patterns: `trace` (`traceparent`, `trace_id`, `otelTraceID`) in any case."""
    return "race" in text or "RACE" in text


def _json_trace_id(record: dict[str, Any]) -> str | None:
    """The trace id a JSON record holds in a field of its own (`trace_id`, `traceparent`, ECS's `trace.id`, ...)."""
    for key in TRACE_JSON_KEYS:
        value = record.get(key)
        if isinstance(value, str):
            found = trace_id_in(f"{'traceparent' if key == 'traceparent' else 'trace_id'}={value}")
            if found is not None:
                return found
    nested = record.get("trace")
    if isinstance(nested, dict) and isinstance(nested.get("id"), str):
        return trace_id_in(f"trace_id={nested['id']}")
    return None


def _split_compact(compact: str) -> tuple[str, str] | None:
    """(method, compact reason) from a whitespace-free rejection message, or None while incomplete."""
    if not compact.startswith(_COMPACT_HEAD):
        return None
    method, colon, reason = compact[len(_COMPACT_HEAD):].partition(":")
    if not colon or not method:
        return None
    return method, reason


def _first(own: float | None, given: float | None) -> float | None:
    """A line's own time wins over the one its source gave."""
    return own if own is not None else given


def _json_replica(record: dict[str, Any]) -> str | None:
    for key in REPLICA_KEYS:
        value = record.get(key)
        if isinstance(value, dict):
            value = value.get("pod_name") or value.get("pod") or value.get("name")
        label = clean_label(value)
        if label is not None:
            return label
    return None
