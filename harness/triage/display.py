"""What triage shows: the live table, the end-of-read summary, and JSON for scripts.

Everything is rendered from one `Snapshot`, so the table, the summary, the JSON and the
exit code never disagree. Only counts, reasons, replica labels and trace ids are printed: the SDK's
rejection line carries no token and no key, and neither does anything here. A reason whose lines carried
trace ids shows its latest few (`trace:`), to paste into Tempo, Jaeger or Honeycomb.

The live table redraws in place with two ANSI sequences when the output is a terminal
(no extra dependency); elsewhere (a file, a pipe) each snapshot is printed below the last.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from datetime import UTC, datetime
from typing import Any, TextIO

from harness import foreign_text
from harness.config.durations import format_duration
from harness.mrtr.reasons import OTHER_REASON
from harness.triage.advice import advice_for, means_tampering_or_client_bug, subset_hint
from harness.triage.counts import UNKNOWN_REPLICA, Snapshot
from harness.triage.on_call_catalogue import rerun_commands, rerun_line

REASON_WIDTH = 26
MAX_REPLICA_COLUMNS = 8
FLAG = "!"
"""Marks a reason that means tampering or a client bug (it makes the exit code 1)."""

TABLE_LIMIT = 200_000
"""The most characters a table shows (hundreds of reasons and replicas: far beyond any real one)."""

_HOME_AND_CLEAR = "\x1b[H\x1b[J"


def _width() -> int:
    return max(60, min(shutil.get_terminal_size((100, 24)).columns, 160))


def _known_replicas(snapshot: Snapshot) -> list[str]:
    return [replica for replica in snapshot.replicas if replica != UNKNOWN_REPLICA]


def render_live(snapshot: Snapshot, *, sources: list[str], width: int | None = None) -> str:
    """The live table: per reason, the last window against the whole run; per replica; what to do."""
    width = width or _width()
    window = format_duration(snapshot.window)
    lines = [f"mrtr-harness triage  {len(snapshot.replicas)} replica(s)  {snapshot.lines:,} lines read  "
             f"running {format_duration(int(snapshot.elapsed))}  Ctrl-C to stop",
             _clip("reading " + ", ".join(sources), width), ""]
    if not snapshot.rejections:
        lines.append("no requestState rejection logged yet: every -32602 would show here by its reason")
        return _shown(lines)
    recent, total = snapshot.by_reason(recent=True), snapshot.by_reason()
    lines.append(f"{'-32602 by logged reason':<{REASON_WIDTH}} {'last ' + window:>10} {'/s':>7} "
                 f"{'total':>9} {'/s':>7}")
    for reason in snapshot.seen():
        lines.append(f"{_reason_cell(reason)} {recent[reason]:>10,} {snapshot.rate(recent[reason], recent=True):>7.2f} "
                     f"{total[reason]:>9,} {snapshot.rate(total[reason]):>7.2f}")
    lines += ["", *_replica_matrix(snapshot, f"by replica (last {window} / total)", recent=True), ""]
    lines += _advice(snapshot, width)
    return _shown(lines)


def render_summary(snapshot: Snapshot, *, sources: list[str], width: int | None = None) -> str:
    """The summary after reading every source to its end (`--once`), or when a live session stops."""
    width = width or _width()
    lines = [f"mrtr-harness triage: {snapshot.lines:,} lines read in {format_duration(round(snapshot.elapsed, 2))} "
             f"from {', '.join(sources)}"]
    if not snapshot.rejections:
        lines.append("no requestState rejection logged" + (" between --since and --until" if snapshot.bounded else ""))
        lines += [*_unasked(snapshot), *_left_out(snapshot)]
        return _shown(lines)
    total = snapshot.by_reason()
    lines += ["", f"{'-32602 by logged reason':<{REASON_WIDTH}} {'count':>9} {'share':>7}  "
                  f"{'first seen (UTC)':<19}  {'last seen (UTC)':<19}"]
    for reason in snapshot.seen():
        lines.append(f"{_reason_cell(reason)} {total[reason]:>9,} {total[reason] / snapshot.rejections:>7.1%}  "
                     f"{_stamp(snapshot.first_seen.get(reason)):<19}  {_stamp(snapshot.last_seen.get(reason)):<19}")
    lines.append(f"{'all':<{REASON_WIDTH}} {snapshot.rejections:>9,}")
    lines += [*_unasked(snapshot), *_left_out(snapshot)]
    lines += ["", *_replica_matrix(snapshot, "by replica", recent=False), ""]
    lines += _advice(snapshot, width)
    return _shown(lines)


def _shown(lines: list[str]) -> str:
    """The table as the terminal gets it: file names, replicas and trace ids come from the logs read, so every line
    passes `harness.foreign_text` (an escape sequence in them shows as text and cannot redraw the table)."""
    return foreign_text.block("\n".join(lines), TABLE_LIMIT) + "\n"


def _stamp(seconds: float | None) -> str:
    """A line's own time, to the second in UTC; `-` when no line of the reason carried one."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def _unasked(snapshot: Snapshot) -> list[str]:
    """The -32021 refusals the replicas logged (a reason adapter's [unasked] line), apart from the -32602s."""
    if not snapshot.unasked:
        return []
    by_replica = ", ".join(f"{replica} {count:,}" for replica, count in snapshot.unasked.items())
    return [f"-32021 (the client cannot answer input requests) logged {sum(snapshot.unasked.values()):,} time(s): "
            f"{by_replica}"]


def _left_out(snapshot: Snapshot) -> list[str]:
    """What was read and not counted, so a short count is never mistaken for a quiet system."""
    lines = []
    if snapshot.outside:
        lines.append(f"{snapshot.outside:,} rejection(s) written outside --since/--until were left out")
    if snapshot.undated:
        where = ("left out (--since/--until place a rejection by its line's own time)" if snapshot.bounded
                 else "counted, but in no last window (read once, it is placed by the lines' own time)")
        lines.append(f"{snapshot.undated:,} rejection(s) whose line carries no time were {where}")
    if snapshot.bad_lines or snapshot.cut_lines:
        lines.append(f"{snapshot.bad_lines:,} line(s) could not be read and were skipped, {snapshot.cut_lines:,} "
                     "cut at 64 KiB (per source: --json `sources`)")
    return lines


def _reason_cell(reason: str) -> str:
    flag = FLAG if means_tampering_or_client_bug(reason) else " "
    return f"{flag} {reason:<{REASON_WIDTH - 2}}"


def _replica_matrix(snapshot: Snapshot, title: str, *, recent: bool) -> list[str]:
    replicas = sorted(snapshot.replicas, key=lambda r: -sum(snapshot.total.get(reason, {}).get(r, 0)
                                                              for reason in snapshot.total))
    shown = sorted(replicas[:MAX_REPLICA_COLUMNS])
    cells: dict[str, dict[str, str]] = {}
    for reason in snapshot.seen():
        row = {}
        for replica in shown:
            count = snapshot.total.get(reason, {}).get(replica, 0)
            row[replica] = (f"{snapshot.recent.get(reason, {}).get(replica, 0):,}/{count:,}" if recent
                            else f"{count:,}")
        cells[reason] = row
    widths = {replica: max(len(replica), *(len(row[replica]) for row in cells.values())) for replica in shown}
    lines = [f"{title:<{REASON_WIDTH}} " + " ".join(f"{replica:>{widths[replica]}}" for replica in shown)]
    for reason, row in cells.items():
        lines.append(f"{_reason_cell(reason)} " + " ".join(f"{row[r]:>{widths[r]}}" for r in shown))
    if len(replicas) > len(shown):
        lines.append(f"({len(replicas) - len(shown)} more replicas with fewer rejections not shown; --json has all)")
    return lines


def _advice(snapshot: Snapshot, width: int) -> list[str]:
    known = _known_replicas(snapshot)
    lines = ["what it likely means, and what to do next:"]
    wrap = textwrap.TextWrapper(width=width, initial_indent="    ", subsequent_indent=" " * 11)
    for reason in snapshot.seen():
        advice = advice_for(reason)
        heading = f"{FLAG if means_tampering_or_client_bug(reason) else '-'} {reason}"
        if means_tampering_or_client_bug(reason):
            heading += " (tampering or a client bug)"
        lines.append(heading)
        hint = subset_hint(reason, snapshot.replicas_with(reason), known)
        if hint:
            lines += wrap.wrap(f"where: {hint}")
        if reason == OTHER_REASON and snapshot.other_texts:
            lines += wrap.wrap("logged: " + "; ".join(f"{text!r} ({count:,})"
                                                      for text, count in _busiest(snapshot.other_texts)))
        if snapshot.trace_ids.get(reason):
            lines += wrap.wrap(f"trace: {', '.join(snapshot.trace_ids[reason])} (the latest, newest first)")
        lines += wrap.wrap(f"cause: {advice.cause}")
        lines += wrap.wrap(f"next:  {advice.next_step}")
        rerun = rerun_line(reason)
        if rerun:
            lines += wrap.wrap(f"rerun: {rerun} (the on-call catalogue's scenario for it, on the embedded shop)")
    return lines


def _busiest(texts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(texts.items(), key=lambda item: (-item[1], item[0]))


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def as_json(snapshot: Snapshot, *, exit_code: int) -> dict[str, Any]:
    """The counts by reason and replica, for scripts and CI; every reason present, zeros included."""
    known = _known_replicas(snapshot)
    return {
        "lines": snapshot.lines,
        "seconds": round(snapshot.elapsed, 3),
        "rejections": snapshot.rejections,
        "by_reason": snapshot.by_reason(),
        "by_reason_and_replica": {reason: dict(sorted(replicas.items()))
                                  for reason, replicas in snapshot.total.items()},
        "replicas": list(snapshot.replicas),
        "first_seen": {reason: _iso(snapshot.first_seen.get(reason)) for reason in snapshot.seen()},
        "last_seen": {reason: _iso(snapshot.last_seen.get(reason)) for reason in snapshot.seen()},
        "other_logged": dict(_busiest(snapshot.other_texts)),
        "trace_ids": {reason: snapshot.trace_ids[reason] for reason in snapshot.seen()
                      if snapshot.trace_ids.get(reason)},
        "undated": snapshot.undated,
        "outside_since_until": snapshot.outside,
        "bad_lines": snapshot.bad_lines,
        "cut_lines": snapshot.cut_lines,
        "sources": {name: dict(read) for name, read in sorted(snapshot.sources.items())},
        "last_window": {
            "seconds": snapshot.window,
            "ends": _iso(snapshot.window_end) if snapshot.window_end is not None else "now",
            "by": "the lines' own time" if snapshot.window_end is not None else "reading time",
            "by_reason": snapshot.by_reason(recent=True),
            "by_reason_and_replica": {reason: dict(sorted(replicas.items()))
                                      for reason, replicas in snapshot.recent.items()},
        },
        "unasked_by_replica": dict(snapshot.unasked),
        "tampering_or_client_bug": snapshot.tampering_or_client_bug(),
        "advice": {reason: {"cause": advice_for(reason).cause, "next_step": advice_for(reason).next_step,
                            "where": subset_hint(reason, snapshot.replicas_with(reason), known),
                            "reproduced_by": rerun_commands(reason)}
                   for reason in snapshot.seen()},
        "exit_code": exit_code,
    }


def render_json(snapshot: Snapshot, *, exit_code: int) -> str:
    return json.dumps(as_json(snapshot, exit_code=exit_code), indent=2) + "\n"


class Screen:
    """Where the live table goes: redrawn in place on a terminal, appended elsewhere."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.terminal = self.stream.isatty()

    def show(self, text: str) -> None:
        if self.terminal:
            self.stream.write(_HOME_AND_CLEAR + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
