"""The closing table printed in the terminal, k6-style: each check with ✓/✗, what was seen, and the status.

It is the first thing a person reads after a run, so it names each failed check and
its observed value on one line. Plain text by default, since CI logs and pipes show
ANSI codes as noise; `color=True` for a terminal. Whatever a journal or a server said
(names, errors, log lines, ledger rows) passes `harness.foreign_text.line` first: a tool
error's escape sequence shows as text and cannot erase or forge a line.
"""

from __future__ import annotations

from typing import Any

from harness import foreign_text
from harness.folding.fuzz import COLUMNS, ENVELOPE_COLUMNS, FuzzTable
from harness.folding.invariants import MUTANT_INVARIANT, RACE_INVARIANTS
from harness.folding.top_errors import ErrorGroup
from harness.load.envelope import EnvelopeAnswer
from harness.load.mutations import FINDINGS
from harness.report.verdict import (
    RunStatus,
    RunVerdict,
    condition_text,
    describe_detail,
    judged_text,
    observed_text,
    probe_title,
)
from harness.report.wording import describe_fault_rounds

_GREEN, _RED, _YELLOW, _BOLD, _RESET = "\033[32m", "\033[31m", "\033[33m", "\033[1m", "\033[0m"
_DETAIL_LIMIT = 100
_said = foreign_text.line
"""Foreign text (a run's journal, a server's words) as one terminal line."""


def render_thresholds(verdict: RunVerdict, *, color: bool = False) -> str:
    """The whole closing table: thresholds, invariants, reconciliation, hypothesis, chaos, fuzz, top errors, the
    status."""
    paint = _Paint(color)
    if not verdict.reached:  # nothing was measured: the status line's one cause, not a table of empty checks
        return "\n".join([*_heading("NOT JUDGED", paint), "    - the target failed before any load was sent: no "
                                                             "threshold, invariant or reconciliation was judged",
                          *_status(verdict, paint)]) + "\n"
    lines = [*_thresholds(verdict, paint), *_invariants(verdict, paint), *_reconciliation(verdict, paint),
             *_hypothesis(verdict, paint), *_chaos(verdict, paint), *_fuzz(verdict, paint),
             *_output_contracts(verdict, paint),
             *_top_errors(verdict, paint), *_expected_answers(verdict, paint), *_hosts(verdict, paint),
             *_cold_start(verdict, paint),
             *_status(verdict, paint)]
    return "\n".join(lines) + "\n"


class _Paint:
    """Marks and colours; no codes at all unless asked, so plain output stays greppable."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def mark(self, passed: bool | None) -> str:
        if passed is None:
            return self._wrap("-", _YELLOW)
        return self._wrap("✓", _GREEN) if passed else self._wrap("✗", _RED)

    def bold(self, text: str) -> str:
        return self._wrap(text, _BOLD)

    def _wrap(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text


def _heading(title: str, paint: _Paint) -> list[str]:
    return ["", f"  █ {paint.bold(title)}", ""]


def _thresholds(verdict: RunVerdict, paint: _Paint) -> list[str]:
    if not verdict.thresholds:
        return [*_heading("THRESHOLDS", paint), "    (none)"]
    lines = _heading("THRESHOLDS", paint)
    key = None
    for item in verdict.thresholds:
        if item.threshold.key != key:
            if key is not None:
                lines.append("")
            key = item.threshold.key
            lines.append(f"    {_said(key)}")
        lines.append(f"    {paint.mark(item.passed)} '{condition_text(item)}' {observed_text(item)}")
    return lines


def _invariants(verdict: RunVerdict, paint: _Paint) -> list[str]:
    if not verdict.invariants:
        return [*_heading("INVARIANTS", paint), "    (none checked)"]
    lines = _heading("INVARIANTS", paint)
    idle = {name for name, result in verdict.invariants.items() if not result.checked and result.passed}
    unchecked = [name for name in idle if name not in RACE_INVARIANTS]  # races that never ran do not apply
    for name, result in sorted(verdict.invariants.items()):
        if name in idle or (name == MUTANT_INVARIANT and result.passed and not verdict.fuzz):
            continue  # what does not apply here: a ledger the target lacks, mutants no flow sent, races none ran
        line = (f"    {paint.mark(result.passed)} {_said(name)}: {result.violations} "
                f"violation{'s' * (result.violations != 1)}")
        if not result.passed and result.examples:
            line += f" — {_said(describe_detail(result.examples, _DETAIL_LIMIT))}"
        lines.append(line)
    if unchecked:
        lines.append(f"    {paint.mark(None)} {len(unchecked)} ledger invariant{'s' * (len(unchecked) != 1)} (the "
                     "shop's refunds) not checked: the target declares no ledger")
    return lines


def _reconciliation(verdict: RunVerdict, paint: _Paint) -> list[str]:
    lines = _heading("RECONCILIATION", paint)
    result = verdict.reconciliation
    if result is None:
        return [*lines, f"    {paint.mark(None)} unexplained rejections == 0: not reconciled (no record)"]
    logged = "" if result.logged is None else f", {result.logged} logged"
    lines.append(f"    {paint.mark(result.passed)} unexplained rejections == 0: {result.unexplained} unexplained "
                 f"of {result.client_rejections} client rejections{logged}")
    if result.no_adapter:
        lines.append(f"      {result.no_adapter} of them unexplained (no adapter for this server): their replicas' "
                     "logs gave no line the run's reason adapter reads; set [target] log_adapter "
                     "(docs/your-deployment.md)")
    if result.unexplained:
        lines += [f"        {_said(example)}" for example in result.examples.get("unexplained", [])]
    if result.from_redispatched_rounds:
        lines.append(f"      {result.from_redispatched_rounds} of the client rejections came from re-dispatched rounds "
                     "(their replica was down, so the state reached another replica: journal `redispatched_from`)")
    if result.settled_early:
        lines.append(f"      {result.settled_early} unmatched rejection(s) and line(s) were counted before a partner "
                     "could come (the matching held its bound, docs/figures.md): unexplained is an upper bound")
    if result.unmatched_logged is not None:
        lines.append(f"    {paint.mark(None) if result.unmatched_logged else paint.mark(True)} unmatched logged "
                     f"rejections: {result.unmatched_logged} (logged lines no client rejection of this run explains)")
    return [*lines, *_unasked(result.unasked, paint)]


def _unasked(part: dict[str, Any] | None, paint: _Paint) -> list[str]:
    """-32021, explained the same way: informational (counted by host), so never a ✗."""
    if not part:
        return []
    line = (f"    {paint.mark(None if part['unexplained'] else True)} -32021 (the client cannot answer input "
            f"requests): {part['matched']} of {part['client']} explained by a replica's line, {part['logged']} logged")
    if part["unexplained"]:
        line += ("; the rest unexplained: the run's reason adapter reads no -32021 line (the Python and TypeScript "
                 "SDKs log none; a user's adapter's [unasked] reads a server's own)")
    return [line]


def _hypothesis(verdict: RunVerdict, paint: _Paint) -> list[str]:
    if not verdict.hypothesis:
        return []
    lines = _heading("HYPOTHESIS", paint)
    for probe in verdict.hypothesis:
        shown = probe.detail and probe.mark is not True
        detail = f" — {_said(describe_detail(probe.detail, _DETAIL_LIMIT))}" if shown else ""
        lines.append(f"    {paint.mark(probe.mark)} {probe_title(probe, verdict.started)}{detail}")
    return lines


def _chaos(verdict: RunVerdict, paint: _Paint) -> list[str]:
    """Each chaos action and how it went: one that failed, was cut short or never ran is never silent."""
    if not verdict.chaos:
        return []
    lines = _heading("CHAOS", paint)
    for action in verdict.chaos:
        where = f" {_said(action.target)}" if action.target else ""
        when = "" if action.start is None else f" at {action.start:.1f}s"
        took = f", {action.end - action.start:.1f}s" if action.start is not None and action.end is not None else ""
        error = f" — {_said(describe_detail(action.error, _DETAIL_LIMIT))}" if action.error else ""
        rounds = f" — {_said(describe_fault_rounds(action.rounds))}" if action.rounds is not None else ""
        lines.append(f"    {paint.mark(action.ok)} {_said(action.action)}{where}{when}{took}{error}{rounds}")
    return lines


def _fuzz(verdict: RunVerdict, paint: _Paint) -> list[str]:
    """The mutants by class: a ✗ on any class with an accepted, 5xx or hung mutant; the reasons logged."""
    table = verdict.fuzz
    if not table:
        return []
    header = ("mutation", *COLUMNS, "reasons logged")
    rows = [(_said(row.mutation), *(str(row.counts[column]) for column in COLUMNS),
             _said(", ".join(f"{reason} {count}" for reason, count in sorted(row.reasons.items())) or "-"))
            for row in table.rows]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    marks = [paint.mark(not any(row.counts[answer] for answer in FINDINGS)) for row in table.rows]

    def line(mark: str, row: tuple[str, ...]) -> str:
        cells = [cell.ljust(width) if i == 0 else cell.rjust(width)
                 for i, (cell, width) in enumerate(zip(row, widths, strict=False))]
        return f"    {mark} " + "  ".join([*cells, row[-1]])

    lines = [*_heading("FUZZ", paint), line(" ", header), *(line(mark, row) for mark, row in zip(marks, rows,
                                                                                                  strict=True))]
    lines += [f"    {paint.mark(None)} {_said(mutation)}: not sent, {_said(why)}"
              for mutation, why in sorted(table.skipped.items())]
    return (lines if table.rows or table.skipped else []) + _envelope(table, paint)


def _output_contracts(verdict: RunVerdict, paint: _Paint) -> list[str]:
    """The tools whose results broke their declared outputSchema, each with how many and the first way."""
    if not verdict.output_contracts:
        return []
    return [*_heading("OUTPUT CONTRACTS", paint),
            *(f"    {paint.mark(False)} {_said(tool)}: {row['mismatches']} result(s) not shown to conform to its "
              f"outputSchema, first {_said(str(row['example']))}" for tool, row in verdict.output_contracts.items())]


def _envelope(table: FuzzTable, paint: _Paint) -> list[str]:
    """The envelope mutants by class: a ✗ on a class any of whose mutants was answered otherwise or not at all."""
    if not table.envelope:
        return []
    lines = [*_heading("FUZZ (ENVELOPE)", paint)]
    width = max(len(row.mutation) for row in table.envelope)
    for row in table.envelope:
        counts = "  ".join(f"{column} {row.counts[column]}" for column in ENVELOPE_COLUMNS)
        instead = ", ".join(f"{got} {count}" for got, count in sorted(row.got.items()))
        known = f" (the SDK's known deviation: {row.sdk_deviation})" if row.sdk_deviation else ""
        wrong = row.counts[EnvelopeAnswer.OTHERWISE] + row.counts[EnvelopeAnswer.NO_ANSWER]
        lines.append(f"    {paint.mark(not wrong)} {_said(row.mutation).ljust(width)}  {counts}"
                     + (f" — required {row.required}; got {_said(instead)}{known}" if instead else ""))
    return lines


def _top_errors(verdict: RunVerdict, paint: _Paint) -> list[str]:
    """What the servers said most often when rounds failed, one aligned row per error (none: no section)."""
    return _error_rows("TOP ERRORS", verdict.top_errors, paint)


def _expected_answers(verdict: RunVerdict, paint: _Paint) -> list[str]:
    """Tool errors that answered a person's decline or cancel: how the flow was meant to end, not errors."""
    rows = _error_rows("EXPECTED ANSWERS (a decline or cancel the tool refused as it should; not errors)",
                       verdict.expected_answers, paint)
    return rows


def _error_rows(title: str, groups: list[ErrorGroup], paint: _Paint) -> list[str]:
    """One aligned row per error group; with a trace column (each group's newest trace id, to paste into a tracing
    backend) when any of its rounds was traced."""
    if not groups:
        return []
    traced = any(group.trace_ids for group in groups)
    header = ("count", "flow", "tool", "round", "first", "last", *(("trace (latest)",) if traced else ()), "message")
    rows = [(str(group.count), _said(group.flow, 60), _said(group.tool, 60), str(group.round), _at(group.first),
             _at(group.last), *((_said(group.trace_ids[0], 32) if group.trace_ids else "-",) if traced else ()),
             _said(group.message)) for group in groups]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    numeric = {0, 3, 4, 5}

    def line(row: tuple[str, ...]) -> str:
        cells = [cell.rjust(width) if i in numeric else cell.ljust(width)
                 for i, (cell, width) in enumerate(zip(row, widths, strict=False))]
        return "    " + "  ".join([*cells, row[-1]])

    return [*_heading(title, paint), line(header), *(line(row) for row in rows)]


def _hosts(verdict: RunVerdict, paint: _Paint) -> list[str]:
    """Outcomes and error codes by host, when the run had more than the one default host."""
    hosts = verdict.hosts
    if not hosts or list(hosts) == ["default"]:
        return []
    header = ("host", "flows", "outcomes", "errors by code")
    rows = [(_said(host, 60), str(row["flows"]),
             _said(", ".join(f"{outcome} {n}" for outcome, n in sorted(row["outcomes"].items()))),
             _said(", ".join(f"{code} {n}" for code, n in sorted(row["errors"].items())) or "none"))
            for host, row in hosts.items()]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]

    def line(row: tuple[str, ...]) -> str:
        return "    " + "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])

    return [*_heading("HOSTS", paint), line(header), *(line(row) for row in rows)]


def _cold_start(verdict: RunVerdict, paint: _Paint) -> list[str]:
    """Each replica label's cold starts (spawn to first answer), when the target's processes had any (stdio)."""
    if not verdict.cold_start:
        return []
    return [*_heading("COLD START (spawn to first answer)", paint),
            *(f"    {_said(replica, 60)}: {row['count']} process(es), p50 {_seconds(row['p50'])}, "
              f"p95 {_seconds(row['p95'])}, max {_seconds(row['max'])}" for replica, row in verdict.cold_start.items())]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _at(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def _status(verdict: RunVerdict, paint: _Paint) -> list[str]:
    passed = verdict.status is RunStatus.COMPLETED
    lines = ["", f"  {paint.mark(passed)} {paint.bold(f'status {verdict.status.value}')}, "
                 f"exit code {int(verdict.exit_code)} ({judged_text(verdict)})"]
    lines += [f"    - {_said(problem, 2000)}" for problem in verdict.problems]
    return lines
