"""hunt.html: what a hunt found (or that nothing broke) first, then the failing trial, the shrink and the coverage.

One self-contained offline file in the report's style (its page, tables and CSS; no scripts,
nothing fetched): the verdict in one line, the failing trial (its schedule as a table, its
failures and the reasons its replicas logged), the minimal schedule with its reproduction rate,
the shrink path (each accepted shrink with the steps and seconds it left, the rejected
candidates counted by what they tried), the search's coverage (actions by replica by timing, as
a heat grid) and every trial. Everything shown is escaped: schedules, reasons and names come
from scenario files and runs, which are untrusted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.atomic_files import write_atomically
from harness.compare.page import header
from harness.config.durations import format_duration
from harness.foreign_text import html as escape  # foreign text: escaped, controls shown, capped
from harness.hunt import coverage
from harness.hunt.minimal import failure_in_words, schedule_in_words
from harness.hunt.model import HuntResult, Schedule, ShrinkStep, Trial, step_table, unshrunk_reason
from harness.report.html import META_CSS, PAGE_CSS, TABLE_CSS, cell, page, table

_CSS = (PAGE_CSS + META_CSS + TABLE_CSS
        + ".found{color:#cf222e;font-weight:600}.nothing{color:#1a7f37;font-weight:600}\n"
        + "td.heat{text-align:right;font-variant-numeric:tabular-nums;min-width:2.5em}\n")
_HEAT = (0, 114, 178)
"""The heat grid's colour (the report's first series colour), its alpha the share of the busiest cell."""
_SHRINK_ENDS = {"done": "it ended when no smaller candidate failed the same way (1-minimal)",
                "runs": "its budget of runs ran out first: the smallest schedule so far, maybe not minimal",
                "time": "its time ran out first: the smallest schedule so far, maybe not minimal",
                "rounds": "its rounds ran out while each still made it smaller: maybe not minimal",
                "flaky": "it never started: the found schedule failed again in too few of its replays (flaky), and "
                         "is handed over as found"}
_KIND = re.compile(r"^(step \d+ \([^)]*\): \S+|dropped steps?|run|rate)")
_STEP_COLUMNS = ("at", "action", "replica")
"""A step's keys with a column of their own; the rest are listed together."""


Cell = coverage.Cell
"""(variant, whom, timing), as `HuntResult.coverage` counts them (`harness.hunt.coverage`)."""


def write_page(path: Path, result: HuntResult, cells: Sequence[Cell] | None = None) -> Path:
    return write_atomically(path, render_page(result, cells))


def render_page(result: HuntResult, cells: Sequence[Cell] | None = None) -> str:
    """The page; `cells`, every combination the hunt's bounds allowed, lets its coverage say what was not tried."""
    body = [_header(result)]
    if result.control is not None:
        body += ["<h2>Fails without chaos</h2>", *_without_chaos(result.control)]
    if result.found is not None:
        body += ["<h2>The failing trial</h2>", _trial_facts(result.found), _schedule_table(result.found.schedule),
                 _failures(result.found), _reasons_table(result.found.reasons)]
    if flaky := flaky_lines(result):
        body += ["<h2>Set aside as flaky</h2>", *(f"<p>{escape(line)}</p>" for line in flaky)]
    if result.minimal is not None:
        body += ["<h2>The minimal schedule</h2>", f"<p>{escape(_reproduction_line(result))}</p>",
                 _schedule_table(result.minimal)]
    if result.shrink_path or result.found is not None:
        body += ["<h2>The shrink path</h2>", *_shrink_section(result)]
    body += ["<h2>Coverage</h2>", f'<p class="meta">{escape(coverage_line(result, cells))}</p>',
             *(f'<p class="meta">{escape(line)}</p>' for line in strength_lines(result)),
             *([f'<p class="meta">certificate: {escape(result.certificate)}</p>'] if result.certificate else []),
             _coverage_grid(result.coverage),
             "<h2>Every trial</h2>", _trials_table(result.trials)]
    return page(f"{result.scenario}: {verdict_line(result)}", _CSS, body)


def verdict_line(result: HuntResult) -> str:
    """The hunt's verdict in one line: what broke, or that nothing did within the budget."""
    if result.control is not None:
        failures = "; ".join(failure_in_words(failure) for failure in result.control.failures)
        return f"fails without chaos: {failures} (control trial {result.control.index}); nothing was searched"
    if result.found is None or result.failure is None:
        return f"nothing broke within the budget ({_trials(result)}, stopped by {result.stopped_by or 'unknown'})"
    shrunk = ""
    if result.minimal is not None:
        shrunk = (f"; shrunk to {schedule_in_words(result.minimal)}" if result.shrunk
                  else f"; not shrunk: {unshrunk_reason(result.shrink_stopped_by)}")
    return f"found: {failure_in_words(result.failure)} (trial {result.found.index}){shrunk}"


def coverage_line(result: HuntResult, cells: Sequence[Cell] | None = None) -> str:
    """What the search tried, in one line: out of `cells` (every cell the bounds allowed, `harness.hunt.coverage`)
    when given, by action; else the actions, replicas and timings tried, and their cells. Only steps that acted on a
    round in flight in a judged trial are counted."""
    if cells is not None:
        tried = coverage.tried(result.coverage, cells)
        by_action = Counter(name.split()[0] for name, _, _ in tried)
        total = Counter(name.split()[0] for name, _, _ in cells)
        each = ", ".join(f"{action} {by_action[action]}/{total[action]}" for action in total)
        return (f"{len(tried)} of {len(cells)} cells (action and its parameters, replica, early/middle/late) acted "
                f"on a round in flight in {_trials(result)} ({each})")
    keys = [key for key, count in result.coverage.items() if count > 0]
    if not keys:
        return f"{_trials(result)}; no chaos step was tried"
    actions, replicas, timings = ({key[part].split()[0] if part == 0 else key[part] for key in keys}
                                  for part in range(3))
    return (f"{_trials(result)}: {_count(len(actions), 'action')} ({', '.join(sorted(actions))}) on "
            f"{_count(len(replicas), 'replica')} at {_count(len(timings), 'timing')}, "
            f"{_count(len(keys), 'combination')} tried {_count(sum(result.coverage.values()), 'time')}")


def flaky_lines(result: HuntResult) -> list[str]:
    """Each find set aside as flaky, other than the one handed over, in one line: the page's and the terminal's."""
    return [f"set aside as flaky: trial {flaky.trial.index}, {failure_in_words(flaky.failure)}; it failed the same "
            f"way in {flaky.replay[0]} of {flaky.replay[1]} replays, and the search went on"
            for flaky in result.flaky if flaky.trial is not result.found]


def strength_lines(result: HuntResult) -> list[str]:
    """What the search's "nothing broke" is worth (the residual risk) and what weakens it (the health checks), one
    line each: the page's and the terminal's."""
    residual = coverage.residual_line(result)
    return [*([residual] if residual is not None else []), *coverage.health(result)]


def _header(result: HuntResult) -> str:
    css = "found" if result.found is not None or result.control is not None else "nothing"
    meta = [("seed", str(result.seed)), ("strategy", result.strategy), ("trials", str(len(result.trials))),
            ("stopped by", result.stopped_by or "unknown")]
    if result.found is not None:
        meta.append(("failing trial", str(result.found.index)))
    if result.replay is not None:
        meta.append(("replayed", f"failed {result.replay[0]} of {result.replay[1]}"))
    if result.reproduction is not None:
        meta.append(("reproduced", f"{result.reproduction[0]} of {result.reproduction[1]}"))
    verdict = f'<p class="{css}">{escape(verdict_line(result))}</p>'
    if result.property_line:
        verdict += f'<p class="meta">property: {escape(result.property_line)}</p>'
    return header(f"{result.scenario}: hunt", meta, verdict)


# --- the failing trial --------------------------------------------------------------------------


def _without_chaos(trial: Trial) -> list[str]:
    """The control trial that failed: no chaos, so the deployment fails under the scenario's load alone; the hunt
    searched nothing (every chaos schedule would have failed the same way, and proved nothing)."""
    rerun = f"{trial.folder}/scenario.toml" if trial.folder else "its scenario.toml"
    said = ("A trial with no chaos at all failed the property: the deployment fails under the scenario's load "
            f"alone, so no chaos schedule was searched or shrunk. Rerun it: mrtr-harness run {rerun}")
    return [f'<p class="meta">{escape(said)}</p>', _trial_facts(trial), _failures(trial),
            _reasons_table(trial.reasons)]


def _trial_facts(trial: Trial) -> str:
    facts = [("trial", str(trial.index)), ("seed", str(trial.seed)), ("exit code", str(trial.exit_code)),
             ("took", format_duration(trial.seconds)), ("folder", trial.folder or "none")]
    return '<p class="meta">' + "".join(f"<span>{escape(name)} <b>{escape(value)}</b></span>"
                                        for name, value in facts) + "</p>"


def _schedule_table(schedule: Schedule) -> str:
    rows = [[cell(index + 1, numeric=True), *(cell(_shown(step.get(key))) for key in _STEP_COLUMNS),
             cell(", ".join(f"{key} = {_shown(value)}" for key, value in step.items() if key not in _STEP_COLUMNS))]
            for index, step in enumerate(map(step_table, schedule.steps))]
    facts = f"{format_duration(schedule.duration)} of load" + (
        f" at {schedule.arrival_rate:g} flows/s" if schedule.arrival_rate is not None else " at the scenario's rate")
    return (f'<p class="meta">{escape(facts)}</p>'
            + table(["step", "at", "action", "replica", "its keys"], rows, "no chaos step"))


def _failures(trial: Trial) -> str:
    if not trial.failures:
        return '<p class="meta">no failure</p>'
    return '<ul class="found">' + "".join(f"<li>{escape(failure_in_words(failure))}</li>"
                                          for failure in trial.failures) + "</ul>"


def _reasons_table(reasons: Mapping[str, int]) -> str:
    rows = [[cell(reason), cell(count, numeric=True)]
            for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]
    return table(["reason logged", "rejections"], rows, "no rejection logged")


# --- the shrink ---------------------------------------------------------------------------------


def _reproduction_line(result: HuntResult) -> str:
    if result.reproduction is None:
        return "Reproduction rate: not measured."
    failed, runs = result.reproduction
    share = f" ({100 * failed / runs:.0f} %)" if runs else ""
    seed = f", seed {result.minimal_seed}" if result.minimal_seed is not None else ""
    return (f"Reproduction rate: the minimal scenario as handed over{seed} reproduced it in {failed} of {runs} "
            f"runs{share}.")


def _shrink_section(result: HuntResult) -> list[str]:
    path = result.shrink_path
    accepted = [step for step in path if step.accepted]
    rows = []
    if result.found is not None:
        rows.append(_shrink_row("found", "the failing trial", result.found.schedule, None))
    rows += [_shrink_row(str(number), step.what, step.schedule, step) for number, step in enumerate(path, 1)
             if step.accepted]
    runs = sum(step.runs for step in path)
    summary = (f"{len(path)} candidates tried in {runs} runs: {len(accepted)} kept failing the same way, "
               f"{len(path) - len(accepted)} did not")
    ended = _SHRINK_ENDS.get(result.shrink_stopped_by) or (
        f"it was cut short ({result.shrink_stopped_by}): the minimal schedule is the smallest that failed so far, "
        "maybe not minimal" if result.shrink_stopped_by else "")
    if ended:
        summary += f"; {ended}"
    if result.irrelevant:
        summary += f". What did not matter (each tried, and it failed the same way): {'; '.join(result.irrelevant)}"
    return [f'<p class="meta">{escape(summary)}</p>',
            table(["candidate", "what changed", "chaos steps", "run", "rate", "failed"], rows, "no shrink"),
            "<h3>Candidates that passed</h3>", _rejected_table(path)]


def _shrink_row(number: str, what: str, schedule: Schedule, step: ShrinkStep | None) -> list[str]:
    votes = f"{step.failed} of {step.runs}" if step is not None else ""
    rate = f"{schedule.arrival_rate:g}/s" if schedule.arrival_rate is not None else "the scenario's"
    return [cell(number), cell(what), cell(len(schedule.steps), numeric=True),
            cell(format_duration(schedule.duration), numeric=True), cell(rate, numeric=True),
            cell(votes, numeric=True)]


def _rejected_table(path: Sequence[ShrinkStep]) -> str:
    """The candidates that did not fail the same way, counted by what they tried (the change without its values)."""
    tried: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    for step in path:
        if not step.accepted:
            kind = _change_kind(step.what)
            tried[kind] += 1
            runs[kind] += step.runs
    rows = [[cell(kind), cell(count, numeric=True), cell(runs[kind], numeric=True)]
            for kind, count in tried.most_common()]
    return table(["change tried", "candidates", "runs"], rows, "none: every candidate kept failing")


def _change_kind(what: str) -> str:
    """"step 2 (pause): duration 10s -> 5s" as "step 2 (pause): duration", "dropped steps 1, 2 (...)" as "dropped
    steps", "run 30s -> 15s" as "run"."""
    match = _KIND.match(what)
    return match[0] if match else what


# --- coverage and trials ------------------------------------------------------------------------


def _coverage_grid(coverage: Mapping[tuple[str, str, str], int]) -> str:
    """Rows: action on replica; columns: timing; each cell the trials that tried it, shaded by how often."""
    cells = {key: count for key, count in coverage.items() if count > 0}
    if not cells:
        return '<p class="meta">nothing tried</p>'
    timings = sorted({timing for _, _, timing in cells})
    rows_keys = sorted({(action, replica) for action, replica, _ in cells})
    busiest = max(cells.values())
    rows = []
    for action, replica in rows_keys:
        row = [cell(action), cell(replica)]
        for timing in timings:
            count = cells.get((action, replica, timing), 0)
            alpha = 0.08 + 0.6 * count / busiest if count else 0.0
            style = f' style="background:rgba({_HEAT[0]},{_HEAT[1]},{_HEAT[2]},{alpha:.2f})"' if count else ""
            row.append(f'<td class="heat"{style}>{count or ""}</td>')
        rows.append(row)
    return table(["action", "replica", *timings], rows)


def _trials_table(trials: Sequence[Trial]) -> str:
    rows = [[cell(trial.index, numeric=True), cell(trial.purpose), cell(trial.seed, numeric=True),
             cell(len(trial.schedule.steps), numeric=True), cell(format_duration(trial.schedule.duration)),
             cell("; ".join(str(failure) for failure in trial.failures) or "held",
                  css="found" if trial.failures else None),
             cell(trial.exit_code, numeric=True), cell(format_duration(trial.seconds), numeric=True)]
            for trial in trials]
    return table(["trial", "purpose", "seed", "chaos steps", "run", "failures", "exit code", "took"], rows,
                 "no trial ran")


def _trials(result: HuntResult) -> str:
    return _count(len([trial for trial in result.trials if trial.purpose == "search"]), "trial")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return " ".join(str(item) for item in value)
    return str(value)
