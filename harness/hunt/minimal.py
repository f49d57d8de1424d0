"""The minimal failing scenario: the hunt's smallest schedule written back into the user's scenario, as a bug report.

The user's own file keeps its target, load, flows, leads, hosts and `[expect]` (only when the hunt counted it:
with `[hunt] expect` false a plain `run` after a fix would judge keys the hunt never did); its `[[chaos]]`,
`duration` and arrival rate become the minimal schedule's, its `seed` one the minimal schedule failed with in the
hunt (`failing_seeds`; the found trial's seed, with which a smaller schedule
never ran, proves nothing about it), so `run --reproduce` draws the flows a failing run drew; the
header names the strategy and the other seeds it failed with, and the rate it states is the file's own: the hunt
runs this very text as `run --reproduce` does (`reproduced_by`). The file is shaped like a catalogue
scenario (scenarios/on-call/): the `#:schema` line, a comment header that says what broke, how
often the minimal schedule reproduced it, where it came from (the hunt's seed and trial) and how
to rerun it and verify a fix, then `[reproduces]` (the failure's signs) apart from `[expect]` (the
healthy outcome: the user's, with the hunt's default property, no invariant violation and no
unexplained rejection). It is read back through the scenario parser before it is returned: a file
that would not pass `validate` is the harness's error, never written. It is written by the hunt's
one TOML writer (`harness.hunt.toml_file`, which writes each trial's scenario too); the comment
header passes the secrets scrubber, and no text read from a run can end a comment line.
"""

from __future__ import annotations

import re
import textwrap
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import foreign_text
from harness.atomic_files import write_atomically
from harness.config.durations import format_duration
from harness.config.scenario import Scenario, ScenarioError, parse_scenario
from harness.config.thresholds import Judged, ThresholdError, parse_threshold
from harness.errors import ExitCode, MrtrHarnessError
from harness.hunt.model import Failure, HuntResult, Schedule, describe, step_table, unshrunk_reason
from harness.hunt.shrink import duration_text
from harness.hunt.toml_file import document, pairs
from harness.secrets import scrub
from harness.vocabulary import INVARIANTS

SCHEMA_LINE = "#:schema ../../docs/scenario.schema.json"
"""As the catalogue's files have it: the file is shaped to be moved into scenarios/on-call/."""

HEALTHY = {"unexplained_rejections": "== 0", "invariant_violations": "== 0"}
"""The hunt's default property, part of every minimal scenario's `[expect]`."""

_WINDOWS = {"during": "during the chaos", "after": "after the chaos (it did not come back)",
            "no chaos": "without any chaos"}
"""A steady-state failure's window in words."""
_DROPPED = ("chaos", "reproduces", "hunt")
"""Keys of the user's file the minimal scenario replaces (chaos, reproduces) or has no use for (hunt)."""
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_OPERATOR = re.compile(r"<=|>=|==|!=|<|>")
_WIDTH = 100
_NOT_ZERO = re.compile(r"\s*(?:[a-z]+(?:\([0-9.\s]+\))?\s*)?!=\s*0(?:\.0*)?\s*")


class MinimalScenarioError(MrtrHarnessError):
    """The minimal scenario could not be written as a valid file: the harness's own failure (exit 4)."""


def write_minimal(path: Path, original_text: str, result: HuntResult) -> Path:
    """Write the minimal failing scenario to `path` (its name is the one the header's commands use)."""
    return write_atomically(path, minimal_scenario(original_text, result, file_name=path.name))


def minimal_scenario(original_text: str, result: HuntResult, *, file_name: str = "minimal.toml") -> str:
    """The minimal failing scenario's text, from the user's scenario file's text and what the hunt found."""
    if result.minimal is None or result.failure is None or result.found is None:
        raise MinimalScenarioError("no minimal scenario: the hunt found no failing schedule")
    try:
        data = tomllib.loads(original_text)
    except tomllib.TOMLDecodeError as exc:
        raise MinimalScenarioError(f"the scenario's text is no longer valid TOML: {exc}") from None
    actions = {step.action for step in result.minimal.steps}
    own = naming_only(_strings(data.get("expect")), actions)
    expect = own if result.expect_counted else {}
    scenario = _minimal_data(data, result.minimal, carried_seed(result), str(data.get("name", "scenario")))
    if isinstance(scenario.get("hypothesis"), dict):
        scenario["hypothesis"] = naming_only(scenario["hypothesis"], actions)
    reproduces = reproduces_table(result.failure, expect)
    body = [document(scenario).rstrip("\n")]
    if reproduces:
        body += ["", "[reproduces]   # the failure: judged by `run --reproduce`", *pairs(reproduces)]
    body += ["", "[expect]       # the healthy outcome, once the fix is in: judged by plain `run`",
             *pairs({**expect, **{key: value for key, value in HEALTHY.items() if key not in expect}})]
    header = _header(result, file_name, expect, bool(reproduces), [key for key in own if key not in expect])
    text = "\n".join([SCHEMA_LINE, *header, *body]) + "\n"
    try:
        parse_scenario(text, file_name)
    except ScenarioError as exc:
        raise MinimalScenarioError(f"the minimal scenario does not validate: {exc}") from None
    return text


def failing_seeds(result: HuntResult, schedule: Schedule) -> tuple[int, ...]:
    """The seeds of the hunt's runs of `schedule` that failed the same way as the failure it kept, oldest first:
    the seeds its minimal scenario can carry (a run that never failed with a seed proves nothing about it)."""
    if result.failure is None:
        return ()
    failure = result.failure
    seeds = [trial.seed for trial in result.trials if trial.schedule == schedule
             and any(failure.same_as(other) for other in trial.failures)]
    return tuple(dict.fromkeys(seeds))


def carried_seed(result: HuntResult) -> int:
    """The seed the minimal scenario carries: the one chosen (`minimal_seed`), else the first its schedule failed
    with, else the found trial's."""
    assert result.found is not None and result.minimal is not None
    if result.minimal_seed is not None:
        return result.minimal_seed
    return next(iter(failing_seeds(result, result.minimal)), result.found.seed)


def reproduced_by(scenario: Scenario) -> tuple[Judged, ExitCode]:
    """How the minimal scenario says its failure reproduced: `run --reproduce` exits 0 ([reproduces] holds), or, with
    no [reproduces] table, plain `run` exits 1 (its [expect] failed)."""
    if scenario.reproduces:
        return Judged.REPRODUCES, ExitCode.PASSED
    return Judged.EXPECT, ExitCode.FAILED


def reproduces_table(failure: Failure, expect: Mapping[str, str | list[str]]) -> dict[str, str]:
    """The failure's signs as `[reproduces]` thresholds; empty when they cannot be said in one (an `[expect]` key
    with several conditions fails when any one does, which thresholds, all of which must hold, cannot state).
    Unexplained rejections have no logged reason (that is what makes them unexplained): their sign is the count
    of them alone; a logged reason's count is an `[expect]` key's (`rejections{reason=...}`), which triage finds."""
    if failure.kind == "invariant":
        key = (f"invariant_violations{{invariant='{failure.name}'}}" if failure.name in INVARIANTS
               else "invariant_violations")
        return {key: "> 0"}
    if failure.kind == "unexplained":
        return {"unexplained_rejections": "> 0"}
    if failure.kind == "hypothesis":
        return {}  # a window around the chaos, which only the run's own probes judge
    negated = negation(failure.name, expect.get(failure.name))
    return {failure.name: negated} if negated is not None else {}


def negation(key: str, conditions: str | list[str] | None) -> str | None:
    """One threshold condition turned into its opposite (`p(95) < 2s` into `p(95) >= 2s`); None when it cannot be."""
    texts = [conditions] if isinstance(conditions, str) else list(conditions or [])
    if len(texts) != 1:
        return None
    match = _OPERATOR.search(texts[0])
    if match is None:
        return None
    negated = texts[0][:match.start()] + _NEGATED[match[0]] + texts[0][match.end():]
    if _NOT_ZERO.fullmatch(negated):  # every figure is 0 or more: "not 0" reads, and triage finds it, as "> 0"
        negated = negated.replace("!=", ">")
    try:
        parse_threshold(key, negated)
    except ThresholdError:
        return None
    return negated.strip()


def failure_in_words(failure: Failure, expect: Mapping[str, str | list[str]] | None = None) -> str:
    """What broke, said as a bug report says it."""
    where = f" (on {', '.join(failure.replicas)})" if failure.replicas else ""
    if failure.kind == "invariant":
        shapes = f" ({'; '.join(failure.detail)})" if failure.detail else ""
        return f"the ledger invariant {failure.name} was violated{shapes}"
    if failure.kind == "unexplained":
        return f"{failure.name} rejections the clients saw that no replica's log line explains{where}"
    if failure.kind == "hypothesis":
        window, _, condition = failure.name.partition(": ")
        return f"the steady state ([hypothesis] {condition}) did not hold {_WINDOWS.get(window, window)}"
    conditions = (expect or {}).get(failure.name)
    shown = "; ".join([conditions] if isinstance(conditions, str) else conditions or [])
    reasons = f", counting {', '.join(failure.reasons)}" if failure.reasons else ""
    return f"[expect] {failure.name}" + (f" = {shown!r}" if shown else "") + f" failed{reasons}{where}"


def schedule_in_words(schedule: Schedule) -> str:
    """The schedule in one line: its chaos steps (each action at its time), its run and its rate."""
    steps = describe(schedule)
    rate = f" at {schedule.arrival_rate:g} flows/s" if schedule.arrival_rate is not None else ""
    count = len(schedule.steps)
    chaos = f"{count} chaos step{'s' * (count != 1)} ({steps})" if count else "no chaos at all"
    return f"{chaos}, {format_duration(schedule.duration)} of load{rate}"


# --- the file's parts ---------------------------------------------------------------------------


def _minimal_data(data: dict[str, Any], schedule: Schedule, seed: int, name: str) -> dict[str, Any]:
    """The user's keys in their order (name and description first), the schedule's in place of theirs."""
    ours: dict[str, Any] = {"name": _name(name),
                            "description": f"the smallest schedule a hunt of {name} found that breaks it",
                            "seed": seed, "duration": duration_text(schedule.duration)}
    if schedule.arrival_rate is not None:
        ours["load"] = {**data.get("load", {}), "arrival_rate": schedule.arrival_rate}
    if schedule.steps:
        ours["chaos"] = [_step(step_table(step)) for step in schedule.steps]
    order = [key for key in data if key not in ("reproduces", "hunt", "expect")]
    if "chaos" not in order:
        tables = [index for index, key in enumerate(order) if key in ("flows", "leads", "hosts", "target", "load")]
        order.insert(max(tables, default=len(order) - 1) + 1, "chaos")
    scenario = {"name": ours["name"], "description": ours["description"]}
    for key in order:
        value = ours.get(key) if key in ours or key in _DROPPED else data.get(key)
        if value is not None and key not in scenario:
            scenario[key] = value
    for key, value in ours.items():
        scenario.setdefault(key, value)
    return scenario


def _name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "scenario"
    return f"{cleaned[:80]}-minimal"


def _step(step: Mapping[str, Any]) -> dict[str, Any]:
    """`at` and `action` first, as the catalogue writes a step; None (a default) left out."""
    first = {key: step[key] for key in ("at", "action") if key in step}
    return {**first, **{key: value for key, value in step.items() if key not in first and value is not None}}


def _strings(table: Any) -> dict[str, str | list[str]]:
    if not isinstance(table, dict):
        return {}
    return {str(key): value for key, value in table.items() if isinstance(value, str | list)}


def naming_only(table: Mapping[str, Any], actions: set[str]) -> dict[str, Any]:
    """The thresholds of `table` that select no chaos action the minimal schedule dropped (one that did would
    select nothing, and `validate` refuses it)."""
    kept = {}
    for key, conditions in table.items():
        try:
            selector = parse_threshold(key, conditions).selector
        except ThresholdError:
            selector = ()
        if all(label != "action" or value in actions for label, value in selector):
            kept[key] = conditions
    return kept


def _header(result: HuntResult, file_name: str, expect: Mapping[str, str | list[str]], reproduces: bool,
            left_out: list[str]) -> list[str]:
    assert result.failure is not None and result.found is not None and result.minimal is not None
    seed = carried_seed(result)
    command = "run --reproduce" if reproduces else "run"
    rate = (f"this file, as it is (seed {seed}), reproduced it in {result.reproduction[0]} of "
            f"{result.reproduction[1]} runs of `mrtr-harness {command}`" if result.reproduction
            else "this file's reproduction rate was not measured")
    others = [other for other in failing_seeds(result, result.minimal) if other != seed]
    seeds = (f"Its schedule failed in the hunt with seed {seed}" + (f" (the file's) and with seed"
                                                                   f"{'s' * (len(others) > 1)} "
                                                                   f"{', '.join(map(str, others))}" if others else "")
             + ": another seed draws other flows, and may not reproduce it.")
    found = (f"Found by `mrtr-harness hunt` of {result.scenario} (seed {result.seed}, trial {result.found.index}, "
             f"strategy {result.strategy}: `hunt --seed {result.seed} --strategy {result.strategy}` draws its "
             "schedules again)")
    if result.shrink_stopped_by == "flaky" and result.replay is not None:
        found += (f": {schedule_in_words(result.minimal)}; flaky, not shrunk: it failed the same way again in only "
                  f"{result.replay[0]} of {result.replay[1]} replays with fresh seeds")
    elif result.shrunk:
        found += f", shrunk to {schedule_in_words(result.minimal)}{_cut_short(result.shrink_stopped_by)}"
    else:
        found += f", not shrunk ({unshrunk_reason(result.shrink_stopped_by)}): {schedule_in_words(result.minimal)}"
    lines = [f"What broke: {failure_in_words(result.failure, expect)}.", f"{found}; {rate}.", seeds]
    if result.irrelevant:
        lines.append(f"What did not matter (each tried, and it failed the same way): {'; '.join(result.irrelevant)}.")
    if reproduces:
        lines.append(f"Reproduce: `mrtr-harness run --reproduce {file_name}` judges [reproduces] (exit 0: the "
                     "failure reproduced).")
    elif result.failure.kind == "hypothesis":
        lines.append(f"Reproduce: `mrtr-harness run {file_name}` (exit 1, status deviated: the failure reproduced; "
                     "the run probes its [hypothesis] around the chaos itself, which no [reproduces] table can state).")
    else:
        lines.append(f"Reproduce: `mrtr-harness run {file_name}` (exit 1: the failure reproduced; its [expect] "
                     "key has several conditions, whose failure no [reproduces] table can state).")
    lines.append(f"Verify a fix: make it, then run it plainly (`mrtr-harness run {file_name}` judges [expect]; "
                 "exit 0: the healthy outcome holds).")
    if left_out:
        lines.append(f"[expect] holds the hunt's property alone: the scenario's own {', '.join(left_out)} was not "
                     "part of it ([hunt] expect = false), so it is left out (a rejection the replicas' logs explain "
                     "is no failure of a fix).")
    return ["# " + wrapped for line in lines for wrapped in textwrap.wrap(_comment(line), width=_WIDTH,
                                                                          break_on_hyphens=False)]


def _cut_short(stopped_by: str) -> str:
    if stopped_by in ("runs", "time"):
        return f" (the shrink's budget of {stopped_by} ran out first: maybe not minimal)"
    if stopped_by == "rounds":
        return " (the shrink's rounds ran out while it still made progress: maybe not minimal)"
    if stopped_by not in ("", "done"):
        return f" (the shrink was cut short: {stopped_by}; the smallest failing schedule so far, maybe not minimal)"
    return ""


def _comment(text: str) -> str:
    """One comment line: scrubbed of secrets, and with nothing in it that could end the line."""
    return foreign_text.toml_comment(scrub(text), 2000)
