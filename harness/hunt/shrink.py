"""Shrinking a failing schedule to the smallest that still fails the same way: delta debugging, as Hypothesis does.

Pure and runner-agnostic: the caller hands a failing `Schedule`, the `Failure` to keep and a
predicate that runs real trials; the shrinker only proposes smaller candidates and keeps those
that still fail. Passes (`PASSES`), repeated until none makes progress (or the budget is spent):

1. fewer steps: ddmin over the step list (halves, then smaller chunks, down to single
   removals), so the result is 1-minimal: removing any one step makes it pass;
2. milder literals (`MILDER`): a kill as a restart, a rotation's mistake as the correct order, a
   network fault as each milder kind, mildest first, until one fails the same way;
3. a shorter run (`Schedule.duration`);
4. simpler steps, read off each action's model in the chaos registry (`CHAOS_ACTIONS`) by what
   each key is (`harness.config.fields`, as the draw reads it): `at` earlier; every duration
   (`duration`, `phase_gap`, `interval`, a clock `offset`, a latency's `delay` and `jitter`)
   shorter, except the keys where shorter is harsher (`ttl`, `lifetime`) and a count that also
   takes a duration (a network fault's `after`); a share in 0-1 (`toxicity`, `share`) towards
   1, the fault on every exchange; a replica towards 1, and a step on every replica onto replica 1 alone
   (fewer replicas); a step on a subset of replicas (`replicas = [1, 3]`) onto fewer of them, each single
   replica first, then each smaller subset (the replicas it dropped did not matter);
5. a lower arrival rate.

A key of the result that its simplest or mildest value failed the same way with did not matter,
as far as the shrink tried: `ShrinkResult.irrelevant` says which.

A number is shrunk by trying its simplest value, then bisecting between that and the value
that fails, to within 10 % (and a tenth of a second, a hundredth of a share): each try is a
candidate of real runs, so a coarse answer soon is worth more than an exact one late. A
candidate step is made as a step is drawn: its table (the keys it was given, one changed)
validated into its action's model (`harness.hunt.model.chaos_step`); one that does not validate
(a key its network fault does not take), or whose step starts after the run's end, is skipped
without a run.

"Still failing" means the same failure: the same `Failure` kind and name (the same invariant
violated, unexplained rejections again, the same `[expect]` key failed) and a signature that
agrees (`Failure.same_as`: unexplained rejections on a replica the found ones were seen on, an
invariant broken in a shape the found one was, on a replica it was observed on, a rejection key
counting a reason the found one did), among the failures of the candidate's run; any other failure
alone counts as passing (`fails_the_same`).
The target is not deterministic, so a candidate counts as failing when it fails in at least k
of n runs (`KOfN`, by default 2 of 3), stopping early once k failures are seen or k can no
longer be reached; given the found schedule's rate (its replays), also by a sequential test
against that rate, so a candidate much flakier than the found schedule is not kept. Each
distinct candidate is run once per shrink (the answer is cached). Every candidate run is a
`ShrinkStep` of the path, accepted or not.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import ValidationError

from harness.config.chaos import CHAOS_ACTIONS, FAULT_KEYS, ChaosStep
from harness.config.durations import format_duration
from harness.config.fields import FieldFacts, model_facts
from harness.hunt.model import Failure, Schedule, ShrinkStep, chaos_step, step_table

DEFAULT_K = 2
DEFAULT_N = 3
"""A candidate fails when 2 of 3 runs fail the same way: one flaky run neither keeps nor loses a shrink, and a
candidate that fails its first two runs costs two, not three."""

_RELATIVE = 0.1
"""A bisection stops once the gap between the failing and the passing value is this share of the failing one."""
_SECONDS = 0.1
_SHARE = 0.01
_RATE = 0.1
_MAX_ROUNDS = 8
"""Rounds of all the passes at most: each round that changed nothing ends the shrink sooner."""

StoppedBy = Literal["done", "runs", "time", "rounds"]
"""done: a round changed nothing (1-minimal); runs, time: the budget ran out; rounds: `_MAX_ROUNDS` rounds all changed
it, so it may not be minimal."""


# --- what "still failing" means -----------------------------------------------------------------


def same_failure(failure: Failure, failures: Iterable[Failure]) -> bool:
    """Whether a run's failures include `failure`: the same kind and name, and a signature that agrees with it
    (`Failure.same_as`: where it showed, the reasons behind it, the shape of its breaks)."""
    return any(failure.same_as(other) for other in failures)


def fails_the_same(failure: Failure, run: Callable[[Schedule], Iterable[Failure]]) -> Callable[[Schedule], bool]:
    """A single-run predicate from a runner that returns a run's failures: True when the run fails as `failure`."""
    return lambda schedule: same_failure(failure, run(schedule))


@dataclass(frozen=True)
class Votes:
    """One candidate's runs: how many failed the same way, out of how many, and the verdict."""

    failed: int
    runs: int
    fails: bool


@dataclass(frozen=True)
class KOfN:
    """A flaky single-run predicate made into "fails in at least k of n runs", stopping as soon as it is decided.

    With `rate` (the found schedule's rate, from its replays: `found_rate`), a candidate must also fail about as
    often as the found schedule did: a sequential probability ratio test (Wald's) of "it fails at that rate" against
    "at half that rate or less", run by run within the n; accepted when the test accepts, or at the n-th run when
    the runs favour the found schedule's rate; rejected as soon as the test rejects. A fixed 2 of 3 takes a candidate
    failing 7 times in 10 as often as not (78 %), and the shrink drifts towards the flakiest schedule that still
    fails at all; against a found rate of 3 of 3, one run that passes is enough to tell it apart."""

    run_once: Callable[[Schedule], bool]
    k: int = DEFAULT_K
    n: int = DEFAULT_N
    rate: float | None = None
    """The found schedule's rate, within `RATE_BOUNDS`; None: k of n alone."""

    def __post_init__(self) -> None:
        if not 1 <= self.k <= self.n:
            raise ValueError(f"k of n needs 1 <= k <= n, not {self.k} of {self.n}")
        if self.rate is not None and not RATE_BOUNDS[0] <= self.rate <= RATE_BOUNDS[1]:
            raise ValueError(f"a found rate within {RATE_BOUNDS}, not {self.rate}")

    def votes(self, schedule: Schedule) -> Votes:
        failed = runs = 0
        ratio = 0.0
        while runs < self.n and failed + (self.n - runs) >= self.k:
            if self.rate is not None and ratio <= _REJECT:
                break
            if failed >= self.k and (self.rate is None or ratio >= _ACCEPT):
                break
            runs += 1
            fails = bool(self.run_once(schedule))
            failed += fails
            if self.rate is not None:
                ratio += _evidence(self.rate, fails)
        return Votes(failed, runs, failed >= self.k and (self.rate is None or ratio > 0))

    def __call__(self, schedule: Schedule) -> bool:
        return self.votes(schedule).fails


RATE_BOUNDS = (0.1, 0.95)
"""The found rate the sequential test uses, clipped: 1 would make one passing run infinitely telling, and a rate
under 0.1 is one the replay would not have let through."""
_FALSE_ACCEPT = 0.2
"""The test's chance of keeping a candidate that fails at half the found rate (or less)."""
_FALSE_REJECT = 0.25
"""Its chance of dropping one that fails at the found rate."""
_ACCEPT = math.log((1 - _FALSE_REJECT) / _FALSE_ACCEPT)
_REJECT = math.log(_FALSE_REJECT / (1 - _FALSE_ACCEPT))


def _evidence(rate: float, failed: bool) -> float:
    """One run's log likelihood ratio: failing at `rate` against at half of it."""
    half = rate / 2
    return math.log(rate / half) if failed else math.log((1 - rate) / (1 - half))


def found_rate(replay: tuple[int, int] | None) -> float | None:
    """The found schedule's rate for the sequential test, from its replays (failed, runs): the share, clipped to
    `RATE_BOUNDS`; None without replays. The found trial itself is not counted: it was picked because it failed."""
    if replay is None or replay[1] == 0:
        return None
    return min(RATE_BOUNDS[1], max(RATE_BOUNDS[0], replay[0] / replay[1]))


Predicate = Callable[[Schedule], bool] | KOfN
"""A plain predicate is one run per candidate; a `KOfN` up to n."""


def _votes(predicate: Predicate, schedule: Schedule) -> Votes:
    if isinstance(predicate, KOfN):
        return predicate.votes(schedule)
    fails = bool(predicate(schedule))
    return Votes(int(fails), 1, fails)


def _most_runs(predicate: Predicate) -> int:
    return predicate.n if isinstance(predicate, KOfN) else 1


def reproduce(schedule: Schedule, run_once: Callable[[Schedule], bool], runs: int = 10) -> tuple[int, int]:
    """The reproduction rate of a schedule: (runs that failed the same way, runs), every run made."""
    return sum(bool(run_once(schedule)) for _ in range(runs)), runs


# --- the budget and the result ------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """When the shrink stops and returns the smallest schedule so far: wall time, and single runs in all.

    A candidate is started only while both remain (the runs: at least as many as it may take), so the runs are
    never exceeded and the time by one candidate at most."""

    seconds: float = 900.0
    runs: int = 60


@dataclass
class ShrinkResult:
    """The smallest schedule that still failed the same way, and how the shrink got there."""

    schedule: Schedule
    failure: Failure
    """The failure it kept failing with."""
    path: list[ShrinkStep] = field(default_factory=list)
    runs: int = 0
    seconds: float = 0.0
    stopped_by: StoppedBy = "done"
    irrelevant: tuple[str, ...] = ()
    """The parameters that did not matter, as far as the shrink tried: each a key of a step of the result that its
    simplest or mildest value failed the same way with ("rotate-keys order: correct fails as retire-early did")."""


@dataclass(frozen=True)
class _Simplest:
    """A key of a step set to its simplest or mildest value, and the schedule still failed the same way."""

    action: str
    key: str
    value: Any
    was: Any

    def holds_in(self, schedule: Schedule) -> bool:
        if self.key == "replicas":
            return any(step.action == self.action and _subset(step) == self.value for step in schedule.steps)
        return any(step.action == self.action and getattr(step, self.key, None) == self.value
                   for step in schedule.steps)

    def __str__(self) -> str:
        if self.key == "action":
            return f"{self.was}: a {self.value} fails as the {self.was} did"
        if self.key == "replicas":
            dropped = [replica for replica in self.was if replica not in self.value]
            return (f"{self.action} replicas: {_replicas(dropped)} did not matter ({_replicas(self.value)}"
                    f"{' alone' * (len(self.value) == 1)} fails as {_replicas(self.was)} did)")
        return f"{self.action} {self.key}: {_said(self.value)} fails as {_said(self.was)} did"


def _subset(step: ChaosStep) -> tuple[int, ...]:
    """The replicas a step names, as a tuple (one, several, or none)."""
    named = step.named()
    return named if isinstance(named, tuple) else (named,) if named is not None else ()


def _replicas(replicas: Iterable[int]) -> str:
    """Replicas as the hunt labels them: `r1+r3`."""
    return "+".join(f"r{replica}" for replica in replicas)


def _said(value: Any) -> str:
    return "every replica" if value is None else format_duration(value) if isinstance(value, float) else str(value)


class _OutOfBudget(Exception):
    def __init__(self, why: StoppedBy) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class _Shrinker:
    predicate: Predicate
    budget: Budget
    clock: Callable[[], float]
    fits: Callable[[Schedule], bool] | None
    best: Schedule
    started: float = 0.0
    runs: int = 0
    path: list[ShrinkStep] = field(default_factory=list)
    tried: dict[str, bool] = field(default_factory=dict)
    simplest: list[_Simplest] = field(default_factory=list)

    def attempt(self, candidate: Schedule | None, what: str) -> bool:
        """Run a candidate (unless invalid, None: a step that did not validate, or already tried); a failing one
        becomes the best so far."""
        if candidate is None or not _valid(candidate) or (self.fits is not None and not self.fits(candidate)):
            return False
        key = _key(candidate)
        if key in self.tried:
            return self.tried[key]
        if self.clock() - self.started >= self.budget.seconds:
            raise _OutOfBudget("time")
        if self.runs + _most_runs(self.predicate) > self.budget.runs:
            raise _OutOfBudget("runs")
        votes = _votes(self.predicate, candidate)
        self.runs += votes.runs
        self.tried[key] = votes.fails
        self.path.append(ShrinkStep(candidate, what, votes.runs, votes.failed, votes.fails))
        if votes.fails:
            self.best = candidate
        return votes.fails


def shrink(schedule: Schedule, failure: Failure, still_fails: Predicate, budget: Budget | None = None, *,
           fits: Callable[[Schedule], bool] | None = None,
           clock: Callable[[], float] = time.monotonic) -> ShrinkResult:
    """Shrink `schedule`, which failed as `failure`, to the smallest schedule `still_fails` keeps failing.

    `still_fails` runs real trials and says whether the candidate failed the same way (build it with
    `fails_the_same`, wrapped in `KOfN` for a flaky target); `fits` refuses candidates the scenario could not
    run (`harness.hunt.search.Hunt.fits`, which builds the trial's scenario as a run would read it). `failure` is
    what the result is about; the predicate judges it, not the shrinker.
    """
    shrinker = _Shrinker(still_fails, budget or Budget(), clock, fits, schedule, started=clock())
    stopped_by: StoppedBy = "done"
    try:
        for _ in range(_MAX_ROUNDS):
            before = shrinker.best
            for shrink_pass in PASSES:
                shrink_pass(shrinker)
            if shrinker.best == before:
                break
        else:
            stopped_by = "rounds"  # the last round still changed it: a next one might have too
    except _OutOfBudget as out:
        stopped_by = out.why
    irrelevant = tuple(dict.fromkeys(str(simplest) for simplest in shrinker.simplest
                                     if simplest.holds_in(shrinker.best)))
    return ShrinkResult(shrinker.best, failure, shrinker.path, shrinker.runs, clock() - shrinker.started, stopped_by,
                        irrelevant)


# --- the passes ---------------------------------------------------------------------------------


def _fewer_steps(shrinker: _Shrinker) -> None:
    """ddmin by complements: drop halves, then smaller chunks, down to each single step, until none can go."""
    chunks = min(2, len(shrinker.best.steps))
    while shrinker.best.steps:
        steps = shrinker.best.steps
        for indices in _split(len(steps), chunks):
            kept = tuple(step for index, step in enumerate(steps) if index not in indices)
            if shrinker.attempt(replace(shrinker.best, steps=kept), _dropped(steps, indices)):
                chunks = max(min(chunks - 1, len(kept)), min(2, len(kept)))
                break
        else:
            if chunks >= len(steps):
                return
            chunks = min(len(steps), chunks * 2)


def _split(length: int, chunks: int) -> Iterator[frozenset[int]]:
    """`range(length)` in `chunks` runs of near-equal size."""
    bounds = [round(length * part / chunks) for part in range(chunks + 1)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        if end > start:
            yield frozenset(range(start, end))


def _dropped(steps: Sequence[ChaosStep], indices: frozenset[int]) -> str:
    names = ", ".join(f"{index + 1} ({steps[index].action})" for index in sorted(indices))
    return f"dropped step{'s' * (len(indices) > 1)} {names}"


MILDER: Mapping[tuple[str, str], tuple[Any, ...]] = {
    ("kill", "action"): ("restart",),
    ("rotate-keys", "order"): ("correct",),
    ("network", "fault"): ("latency", "bandwidth", "reset", "truncate", "cut-slow", "blackhole", "down"),
}
"""Per action and key, the values a literal is simplified towards, mildest first: a kill becomes a restart, a
rotation's mistake the correct order, a network fault a milder kind. A step tries each value milder than its own,
mildest first, until one fails the same way: then that part of the step was not the bug (`ShrinkResult.irrelevant`)."""


def _simpler_literals(shrinker: _Shrinker) -> None:
    for index in range(len(shrinker.best.steps)):
        step = shrinker.best.steps[index]
        for key in ("action", *type(step).model_fields):
            ladder = MILDER.get((step.action, key), ())
            current = getattr(step, key, None)
            milder = ladder[:ladder.index(current)] if current in ladder else ladder
            if key != "action" and key not in step_table(step):
                continue  # at its default, which the scenario chose
            for value in milder:
                if shrinker.attempt(_with_literal(shrinker.best, index, key, value),
                                    f"step {index + 1} ({step.action}): {key} {current} -> {value}"):
                    shrinker.simplest.append(_Simplest(value if key == "action" else step.action, key, value,
                                                       current))
                    break


def _with_literal(schedule: Schedule, index: int, key: str, value: Any) -> Schedule | None:
    """The schedule with one step's literal changed (a network fault's own keys dropped with its kind, which the next
    kind may not take); None when the step does not validate so."""
    step = schedule.steps[index]
    table = step_table(step)
    if key == "fault":
        table = {name: item for name, item in table.items() if name not in FAULT_KEYS[str(table["fault"])]}
    try:
        changed = chaos_step({**table, key: value})
    except ValidationError:
        return None
    return replace(schedule, steps=(*schedule.steps[:index], changed, *schedule.steps[index + 1:]))


def _shorter_run(shrinker: _Shrinker) -> None:
    current = shrinker.best.duration
    floor = max([_SECONDS, *(step.at for step in shrinker.best.steps)])

    def candidate(value: float) -> tuple[Schedule, str]:
        return (replace(shrinker.best, duration=value),
                f"run {format_duration(shrinker.best.duration)} -> {format_duration(value)}")

    _bisect(shrinker, current, floor, _SECONDS, candidate)


def _lower_rate(shrinker: _Shrinker) -> None:
    current = shrinker.best.arrival_rate
    if current is None:
        return

    def candidate(value: float) -> tuple[Schedule, str]:
        return replace(shrinker.best, arrival_rate=value), f"rate {shrinker.best.arrival_rate:g} -> {value:g}/s"

    _bisect(shrinker, current, _RATE, _RATE, candidate)


def _simpler_steps(shrinker: _Shrinker) -> None:
    for index in range(len(shrinker.best.steps)):
        for facts in model_facts(type(shrinker.best.steps[index])).values():
            if index < len(shrinker.best.steps):
                _simpler_key(shrinker, index, facts)


def _simpler_key(shrinker: _Shrinker, index: int, facts: FieldFacts) -> None:
    """Shrink one key of one step towards its simplest value, if the key is one that has a simpler value (what it is
    comes from `harness.config.fields`, as the draw reads it)."""
    name = facts.name
    step = shrinker.best.steps[index]
    action = step.action
    current_value = getattr(step, name, facts.default)

    def candidate_with(value: Any, shown: str) -> tuple[Schedule | None, str]:
        steps = list(shrinker.best.steps)
        what = f"step {index + 1} ({action}): {name} {_shown(facts, getattr(steps[index], name, None))} -> {shown}"
        try:
            steps[index] = chaos_step({**step_table(steps[index]), name: value})
        except ValidationError:
            return None, what
        return replace(shrinker.best, steps=tuple(steps)), what

    simplest: Any = None
    if facts.kind == "replicas":
        _fewer_replicas(shrinker, index)
        return
    if facts.kind == "replica":
        every = CHAOS_ACTIONS[action].acts_on == "replicas"
        simplest = 1 if _simpler_replica(shrinker, current_value, candidate_with, every=every) else None
    elif facts.kind == "duration" and not facts.harsher_when_shorter and current_value is not None:
        current = float(current_value)
        floor = _SECONDS if facts.lower_strict else 0.0
        if _bisect(shrinker, current, floor, _SECONDS,
                   lambda value: candidate_with(duration_text(value), format_duration(value))):
            simplest = floor
    elif facts.kind == "share" and isinstance(current_value, int | float) and _bisect(
            shrinker, float(current_value), 1.0, _SHARE, lambda value: candidate_with(value, f"{value:g}")):
        simplest = 1.0
    if simplest is not None:
        shrinker.simplest.append(_Simplest(action, name, simplest, current_value))


def _simpler_replica(shrinker: _Shrinker, current: Any,
                     candidate_with: Callable[[Any, str], tuple[Schedule | None, str]],
                     every: bool) -> bool:
    """A higher replica down to a lower one; a step on every replica (none named) onto replica 1 alone (a step on
    one replica that names none already acts on the first). True: replica 1 failed the same way."""
    if current is None and every:
        return shrinker.attempt(*candidate_with(1, "1"))
    if isinstance(current, int) and current > 1:
        for lower in range(1, current):
            if shrinker.attempt(*candidate_with(lower, str(lower))):
                return lower == 1
    return False


def _fewer_replicas(shrinker: _Shrinker, index: int) -> None:
    """A step on a subset of replicas onto fewer of them: each single replica (as `replica`), then each smaller
    subset, smallest first; the first that fails the same way is kept, and the replicas it dropped did not matter."""
    step = shrinker.best.steps[index]
    was = getattr(step, "replicas", None)
    if not was or len(was) < 2:
        return
    table = {name: value for name, value in step_table(step).items() if name not in ("replica", "replicas")}
    for size in range(1, len(was)):
        for kept in itertools.combinations(was, size):
            try:
                changed = chaos_step({**table, **({"replica": kept[0]} if size == 1 else {"replicas": list(kept)})})
            except ValidationError:
                continue
            candidate = replace(shrinker.best, steps=(*shrinker.best.steps[:index], changed,
                                                      *shrinker.best.steps[index + 1:]))
            if shrinker.attempt(candidate, f"step {index + 1} ({step.action}): replicas {_replicas(was)} -> "
                                           f"{_replicas(kept)}"):
                shrinker.simplest.append(_Simplest(step.action, "replicas", kept, tuple(was)))
                return


def _bisect(shrinker: _Shrinker, current: float, simplest: float, resolution: float,
            candidate: Callable[[float], tuple[Schedule | None, str]]) -> bool:
    """From a failing `current` towards `simplest`: try it, then halve the gap while the failing end moves. True: the
    simplest value failed the same way."""
    if abs(current - simplest) < resolution / 2:
        return False
    failing, passing = current, simplest
    if shrinker.attempt(*candidate(simplest)):
        return True
    for _ in range(64):
        gap = abs(failing - passing)
        if gap <= max(resolution, _RELATIVE * abs(failing)):
            return False
        middle = _rounded((failing + passing) / 2, resolution)
        if middle in (failing, passing):
            return False
        if shrinker.attempt(*candidate(middle)):
            failing = middle
        else:
            passing = middle
    return False


PASSES: tuple[Callable[[_Shrinker], None], ...] = (_fewer_steps, _simpler_literals, _shorter_run, _simpler_steps,
                                                   _lower_rate)
"""The shrink's passes, in the order each round runs them: a pass proposes candidates (`_Shrinker.attempt`, which
runs each and keeps a failing one as the best) and returns when it has none left. A new way to make a schedule
smaller is one more function here."""


# --- keys, read off the models ------------------------------------------------------------------


def duration_text(seconds: float) -> str:
    """Seconds as a scenario file writes a duration, exact to the millisecond and read back as written ("2.5s",
    "2592000s"; never an exponent, which a duration does not take)."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def _shown(facts: FieldFacts, value: Any) -> str:
    """A key's value before the change, as the change says it (a duration as `format_duration` writes one)."""
    if value is None:
        return "every replica" if facts.kind == "replica" else "none"
    if facts.kind == "duration":
        return format_duration(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _rounded(value: float, resolution: float) -> float:
    steps = round(value / resolution)
    return round(steps * resolution, max(0, -math.floor(math.log10(resolution))))


def _valid(schedule: Schedule) -> bool:
    """Every step starts within the run (each is a model: it validated when it was made), which lasts, at a rate
    above 0."""
    if any(step.at > schedule.duration for step in schedule.steps):
        return False
    return schedule.duration > 0 and (schedule.arrival_rate is None or schedule.arrival_rate > 0)


def _key(schedule: Schedule) -> str:
    return json.dumps([[step_table(step) for step in schedule.steps], schedule.duration, schedule.arrival_rate],
                      sort_keys=True, default=str)
