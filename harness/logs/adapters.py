"""Reason adapters: how each server implementation logs a refused `requestState`, declared once.

Every MRTR server answers a refused `requestState` with the same `-32602`; only its log says why, and each
implementation says it its own way. An adapter is one implementation's way, as data: the literal every one of
its rejection lines holds (`mark`, the cheap substring test a busy log's other lines fail at once), a pattern
that reads the method and the reason (and, when the line has them, the replica and the time), and the map from
the reasons it logs to the harness's vocabulary (`harness.vocabulary.REASONS`). A logged reason the map lacks is
read by `harness.mrtr.reasons.normalise_reason` (a reason spelled as ours is ours), else counted as `other`.

An adapter may also read the line a server logs when it refuses a call with -32021 (the client did not declare a
capability the call needs: it cannot answer input requests), its `unasked` pattern (a method, and the capability
when the line names it): such a line is no -32602 rejection, and reconciliation explains a client's -32021 with it.
Neither SDK logs one: the Python SDK (`mcp` 2.3.0) raises its -32021 as an `MCPError` (`mcp.server.mcpserver.resolve`
`_require_capability`), which the dispatcher answers without a log line, and the TypeScript SDK 2.4.0 sends a
handler's `MissingRequiredClientCapabilityError` to the wire without calling `onerror` (tried:
tests/servers/typescript_sdk/unasked.log). So the built-in adapters declare none (`unasked_note` says why), and a
server that logs one is read by a user's adapter's `[unasked]` table.

Built in: `python-sdk` (the `mcp.server.request_state` WARNING, read by `harness.logs.parse`'s own parser in every
shape a replica prints it: plain, rich's columns, JSON) and `typescript-sdk` (`@modelcontextprotocol/server` 2.x,
whose `requestState.verify` seam reports `requestState verification rejected <method>: <reason>` through the
server's `onerror`, its `createRequestStateCodec` giving `malformed`, `mac`, `expired` or `bind`). Each registers
itself (`register`), as the chaos actions do. Any other server: a user's adapter in TOML (`load_adapter`), which
is outside text like a log line: parsed as TOML only, and a pattern that could take more than linear time
(a nested quantifier, a backreference, a leading unbounded run) is refused with one line.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from harness._compat.sre import nonlinear_problem
from harness.capped_read import TooLarge, read_capped
from harness.errors import UsageError
from harness.logs.stamps import line_time
from harness.mrtr.reasons import OTHER_REASON, normalise_reason
from harness.vocabulary import REASONS, Outcome

PYTHON_SDK: Final = "python-sdk"
"""The default adapter: the Python SDK's line, read by `harness.logs.parse.LineParser`'s own parser."""

GROUPS: Final = ("method", "reason", "replica", "time")
"""The named groups an adapter's pattern may have: `reason` it must have; the rest when the line carries them."""
UNASKED_GROUPS: Final = ("method", "capability", "replica", "time")
"""The named groups an `[unasked]` pattern may have (the -32021 line): `method` it must have."""
UNASKED: Final = Outcome.MISSING_CAPABILITY.value
"""The reason a -32021 line is read as: the round outcome it explains."""

ADAPTER_FILE_MAX: Final = 64 * 1024
"""Bytes of a user's adapter file that are read: it holds a few patterns, never more."""


class AdapterError(UsageError):
    """A user's adapter that cannot be used: its one-line reason, naming the file and the key (exit 2)."""


@dataclass(frozen=True, slots=True)
class Found:
    """What an adapter read from one line: the method, the reason (in the vocabulary, or `other` with the logged
    text kept), and the replica and time when the line gave them."""

    method: str
    reason: str
    logged: str
    replica: str | None
    logged_at: float | None


@dataclass(frozen=True)
class Adapter:
    """One server implementation's rejection line."""

    name: str
    mark: str
    """A literal every rejection line holds: the cheap test, before any pattern runs."""
    pattern: re.Pattern[str] | None
    """Searched in a line that holds `mark`; None for `python-sdk`, whose lines `harness.logs.parse` reads."""
    reasons: Mapping[str, str] = field(default_factory=dict)
    """A logged reason (as logged) -> a reason of the vocabulary."""
    time_format: str | None = None
    """`strptime` format of the `time` group; None: the stamps `harness.logs.stamps` reads (ISO 8601, ...)."""
    summary: str = ""
    unasked_mark: str = ""
    """A literal every -32021 line holds (with `unasked`)."""
    unasked: re.Pattern[str] | None = None
    """The line the server logs when it refuses a call with -32021 (`UNASKED_GROUPS`); None: it logs none."""
    unasked_note: str = ""
    """Why there is no `unasked` pattern (what the implementation logs for -32021), said where a -32021 goes
    unexplained."""

    def read(self, line: str, near: float | None = None) -> Found | None:
        """The rejection `line` holds, or None. Never raises on any text (a property test holds it to that)."""
        if self.pattern is None or self.mark not in line:
            return None
        match = self.pattern.search(line)
        if match is None:
            return None
        groups = match.groupdict()
        logged = (groups.get("reason") or "").strip().strip('"')
        if not logged:
            return None
        reason = self.reason_of(logged)
        return Found(method=(groups.get("method") or "").strip() or "?", reason=reason,
                     logged=logged if reason == OTHER_REASON else "", replica=groups.get("replica") or None,
                     logged_at=self._time(groups.get("time"), line, near))

    def read_unasked(self, line: str, near: float | None = None) -> Found | None:
        """The -32021 refusal `line` logs (reason `UNASKED`, the capability it names kept in `logged`), or None."""
        if self.unasked is None or self.unasked_mark not in line:
            return None
        match = self.unasked.search(line)
        if match is None:
            return None
        groups = match.groupdict()
        return Found(method=(groups.get("method") or "").strip() or "?", reason=UNASKED,
                     logged=(groups.get("capability") or "").strip(), replica=groups.get("replica") or None,
                     logged_at=self._time(groups.get("time"), line, near))

    def marks(self, line: str) -> bool:
        """Whether `line` holds a mark of this adapter's lines: the cheap test before any pattern runs."""
        return self.mark in line or bool(self.unasked_mark and self.unasked_mark in line)

    def detects(self, line: str) -> bool:
        """Whether `line` is one of this implementation's rejections (how `triage` tells a log's format)."""
        if self.pattern is None:
            return PYTHON_SDK_HEAD in line
        return self.read(line) is not None

    def reason_of(self, logged: str) -> str:
        """The vocabulary's reason for a logged one: the adapter's map first, then the SDK's spelling, else other."""
        mapped = self.reasons.get(logged)
        return mapped if mapped is not None else normalise_reason(logged)

    def _time(self, text: str | None, line: str, near: float | None) -> float | None:
        if text is None:
            return line_time(line, near)
        text = text.strip()
        if self.time_format is None:
            return line_time(text, near)
        try:
            moment = datetime.strptime(text, self.time_format)
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()


_ADAPTERS: dict[str, Adapter] = {}


def register(adapter: Adapter) -> Adapter:
    """Add a built-in adapter under its name (each is declared once: a second one of a name is a bug)."""
    if adapter.name in _ADAPTERS:
        raise ValueError(f"two reason adapters named {adapter.name!r}")
    _ADAPTERS[adapter.name] = adapter
    return adapter


def adapters() -> dict[str, Adapter]:
    """The built-in adapters by name, in the order they were declared (`python-sdk` first)."""
    return dict(_ADAPTERS)


def adapter_named(name_or_path: str, *, base: Path | None = None) -> Adapter:
    """A built-in adapter by its name, or a user's adapter read from a `.toml` path (relative to `base`)."""
    if name_or_path in _ADAPTERS:
        return _ADAPTERS[name_or_path]
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        path = Path(name_or_path)
        return load_adapter(path if path.is_absolute() or base is None else base / path)
    known = ", ".join(_ADAPTERS)
    raise AdapterError(f"no reason adapter named {name_or_path!r}: use one of {known}, or the path of a .toml adapter")


# --- the built-in adapters ------------------------------------------------------------------------

PYTHON_SDK_HEAD: Final = "requestState rejected on "
"""The Python SDK's message head (`harness.mrtr.reasons`): how its lines are told apart from other servers'."""

register(Adapter(
    name=PYTHON_SDK, mark="requestState", pattern=None,
    summary="the Python SDK (`mcp`): `requestState rejected on <method>: <reason>` on mcp.server.request_state",
    unasked_note="the Python SDK logs no line when it refuses with -32021"))

TYPESCRIPT_HEAD: Final = "requestState verification rejected "
"""What `@modelcontextprotocol/server`'s seam reports through `onerror` (`Server._verifyRequestState`)."""

register(Adapter(
    name="typescript-sdk", mark=TYPESCRIPT_HEAD,
    pattern=re.compile(r"requestState verification rejected (?P<method>[\w/]{1,64}): (?P<reason>[^\r\n]{1,200})"),
    reasons={"mac": "seal", "malformed": "malformed", "expired": "expired", "bind": "principal"},
    summary="the TypeScript SDK (`@modelcontextprotocol/server` 2.x): `requestState verification rejected "
            "<method>: <reason>` through the server's onerror (createRequestStateCodec: malformed, mac, expired, "
            "bind)",
    unasked_note="the TypeScript SDK reports no -32021 through onerror"))


# --- a user's adapter, from TOML ------------------------------------------------------------------


def load_adapter(path: Path) -> Adapter:
    """A user's adapter from a TOML file: `name`, `mark`, `pattern`, optional `[reasons]` and `time_format`.

    Untrusted: read as TOML only, bounded in size, every pattern checked to run in linear time."""
    try:
        raw = read_capped(path, ADAPTER_FILE_MAX)
    except OSError as exc:
        raise AdapterError(f"{path}: cannot read the adapter ({exc.strerror or exc})") from None
    except TooLarge:
        raise AdapterError(f"{path}: an adapter file is at most {ADAPTER_FILE_MAX} bytes") from None
    try:
        table = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AdapterError(f"{path}: not TOML ({exc})") from None
    return adapter_from_table(table, str(path))


def adapter_from_table(table: Mapping[str, Any], where: str) -> Adapter:
    """An adapter from its TOML table; `where` names it in the error."""
    unknown = sorted(set(table) - {"name", "mark", "pattern", "reasons", "time_format", "summary", "unasked"})
    if unknown:
        raise AdapterError(f"{where}: unknown key {unknown[0]!r} (an adapter has name, mark, pattern, reasons, "
                           "time_format, summary, unasked)")
    name = _text(table, "name", where, required=True)
    mark = _text(table, "mark", where, required=True)
    pattern_text = _text(table, "pattern", where, required=True)
    assert name is not None and mark is not None and pattern_text is not None
    pattern = linear_pattern(pattern_text, f"{where}: pattern")
    if "reason" not in pattern.groupindex:
        raise AdapterError(f"{where}: pattern has no (?P<reason>...) group")
    extra = sorted(set(pattern.groupindex) - set(GROUPS))
    if extra:
        raise AdapterError(f"{where}: pattern group {extra[0]!r} is not one of {', '.join(GROUPS)}")
    reasons = table.get("reasons", {})
    if not isinstance(reasons, dict) or not all(isinstance(v, str) for v in reasons.values()):
        raise AdapterError(f"{where}: [reasons] maps a logged reason to a reason's name")
    known = (*REASONS, OTHER_REASON)
    for logged, reason in reasons.items():
        if reason not in known:
            raise AdapterError(f"{where}: reasons.{logged} = {reason!r} is not a reason (one of {', '.join(known)})")
    time_format = _text(table, "time_format", where, required=False)
    unasked_mark, unasked = _unasked(table.get("unasked"), where)
    return Adapter(name=name, mark=mark, pattern=pattern, reasons=dict(reasons), time_format=time_format,
                   summary=_text(table, "summary", where, required=False) or f"a user's adapter ({where})",
                   unasked_mark=unasked_mark, unasked=unasked,
                   unasked_note="" if unasked is not None else f"{name} has no [unasked] line for -32021")


def _unasked(table: Any, where: str) -> tuple[str, re.Pattern[str] | None]:
    """The `[unasked]` table (the -32021 line): its mark and its linear pattern, which must read the method."""
    if table is None:
        return "", None
    if not isinstance(table, dict):
        raise AdapterError(f"{where}: unasked must be a table with mark and pattern")
    unknown = sorted(set(table) - {"mark", "pattern"})
    if unknown:
        raise AdapterError(f"{where}: unknown key unasked.{unknown[0]} (it has mark and pattern)")
    mark = _text(table, "mark", f"{where}: unasked", required=True)
    text = _text(table, "pattern", f"{where}: unasked", required=True)
    assert mark is not None and text is not None
    pattern = linear_pattern(text, f"{where}: unasked.pattern")
    if "method" not in pattern.groupindex:
        raise AdapterError(f"{where}: unasked.pattern has no (?P<method>...) group")
    extra = sorted(set(pattern.groupindex) - set(UNASKED_GROUPS))
    if extra:
        raise AdapterError(f"{where}: unasked.pattern group {extra[0]!r} is not one of {', '.join(UNASKED_GROUPS)}")
    return mark, pattern


def _text(table: Mapping[str, Any], key: str, where: str, *, required: bool) -> str | None:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise AdapterError(f"{where}: {key} must be a non-empty string")
    return value


def linear_pattern(text: str, where: str) -> re.Pattern[str]:
    """`text` compiled, if it runs in time linear in a line's length by the project's rules; else AdapterError.

    Refused: a quantifier inside a quantified group (`(a+)+`, `(\\w*,)*`: backtracking that grows as a power of the
    line), a backreference (`(a)\\1`), and a pattern that starts with an unbounded run (`.*x`, `\\S+ x`: searched,
    every start position rescans it); the standard library's own parser reads it (`harness._compat.sre`)."""
    try:
        problem = nonlinear_problem(text)
        compiled = re.compile(text)
    except (re.error, RecursionError, OverflowError) as exc:
        raise AdapterError(f"{where}: not a pattern ({exc})") from None
    if problem is not None:
        raise AdapterError(f"{where}: not linear: {problem}")
    return compiled


DETECT_LINES: Final = 50
"""Lines `triage` reads before it says which adapter a log is read with (when none was named)."""


def detected(name: str, hits: int, seen: int) -> str:
    """The one line that says how a log is read when its format was detected."""
    return f"log format: {name} (detected from {hits} of the first {seen} lines)"

