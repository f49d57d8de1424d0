"""The search: draw a schedule, run it as a trial, judge it; until one fails, or the trials or the time run out.

A hunt's results folder, `<results>/<utc>-hunt-<scenario>/`, holds `hunt.jsonl` (its own
journal, written as it goes: a `start` record, one `trial` record per trial, an `end` record
with the shrink's outcome), `trials/`, each trial's own results folder (a run's,
`scenario.toml` first), and what the hunt hands over: `minimal.toml` (the shrunk schedule as a
scenario, when a trial failed) and `hunt.html`, written whatever stopped the hunt. Every trial
record has its index, seed, purpose, schedule as plain data, failures, reasons, exit code,
folder and seconds: `mrtr-harness run trials/<folder>/scenario.toml` reruns that trial exactly
as drawn, and `hunt --seed S` draws the same schedules again.

What stops the search, and the hunt's exit code: a trial that fails the property (1: found),
the trials or the budget spent (0: nothing broke), Ctrl-C or SIGTERM (130: the trial under way
is interrupted by the run's own machinery, its chaos rolled back, its results written; the
journal ends with what was found so far), a trial that is the harness's own failure (4) or
whose target could not start (3): neither is the target's failure under chaos.

Import this module only after Locust's gevent patching (the command imports `locust` first).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

from harness import foreign_text
from harness.atomic_files import PlantedLink, open_append
from harness.config.hunt import HuntSettings
from harness.config.scenario import Scenario, parse_scenario
from harness.errors import ExitCode
from harness.hunt.draw import Space, coverage_cells, coverage_keys, draw_schedule, trial_seed
from harness.hunt.minimal import MinimalScenarioError, failing_seeds, minimal_scenario, reproduced_by, write_minimal
from harness.hunt.model import Failure, HuntResult, Schedule, Trial, TrialPurpose, describe, step_table
from harness.hunt.page import coverage_line, write_page
from harness.hunt.shrink import Budget, KOfN, Votes, fails_the_same, found_rate, reproduce, shrink
from harness.hunt.trial import Base, TrialDamaged, judge, run_trial, trial_scenario
from harness.run.results_folder import results_folder
from harness.secrets import scrub

EXIT_CODES: dict[str, ExitCode] = {"found": ExitCode.FAILED, "trials": ExitCode.PASSED, "time": ExitCode.PASSED,
                                   "interrupted": ExitCode.INTERRUPTED, "harness error": ExitCode.HARNESS,
                                   "target error": ExitCode.TARGET}
"""The hunt's exit code by what stopped it (`HuntResult.stopped_by`)."""


class HuntJournal:
    """hunt.jsonl: one JSON object a line, flushed as each is written, so a hunt killed at any point leaves it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_append(path)

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps({**record, "t": round(time.time(), 3)}, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def schedule_data(schedule: Schedule) -> dict[str, Any]:
    """A schedule as plain data: its steps as `[[chaos]]` tables, its duration and rate."""
    return {"steps": [step_table(step) for step in schedule.steps], "duration": schedule.duration,
            "arrival_rate": schedule.arrival_rate}


class Hunt:
    """One hunt of one scenario: its results folder, its journal, its trials."""

    def __init__(self, base: Base, *, results_root: Path = Path("results"), stream: IO[str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self.settings = base.scenario.hunt or HuntSettings()
        self.seed = self.settings.seed if self.settings.seed is not None else base.scenario.seed
        self.space = Space.of(base.scenario)
        self.labels = [f"r{n}" for n in range(1, self.space.replica_count + 1)]
        self.results_root = results_root
        self.stream = stream
        self.clock = clock
        self.result = HuntResult(scenario=base.scenario.name, seed=self.seed)
        self.folder: Path | None = None
        self.journal: HuntJournal | None = None
        self.index = 0
        self.error: str | None = None
        """What stopped the hunt as an error (a harness error, a target that did not start)."""
        self.minimal_file: Path | None = None
        self.page_file: Path | None = None

    def first_scenario(self) -> Scenario:
        """Trial 1's scenario, drawn and validated before anything starts: what `say_remote` is asked about."""
        return trial_scenario(self.base, draw_schedule(self.space, self.seed, 1), trial_seed(self.seed, 1),
                              self.trial_name(1))[0]

    def trial_name(self, index: int) -> str:
        return f"{self.base.scenario.name}-t{index:03d}"

    def run(self) -> HuntResult:
        """The search; then the shrink of what it found. Returns what the hunt found (`stopped_by` set)."""
        self.folder = results_folder(self.results_root, f"hunt-{self.base.scenario.name}")
        (self.folder / "trials").mkdir()
        self.journal = HuntJournal(self.folder / "hunt.jsonl")
        self.started = self.clock()
        self.journal.write({"type": "start", "scenario": self.base.scenario.name, "source": self.base.source,
                            "seed": self.seed, "bounds": self.settings.model_dump(mode="json"),
                            "actions": list(self.space.actions), "replicas": list(self.space.replicas)})
        self.say(f"hunt of {self.base.scenario.name} (seed {self.seed}): up to {self.settings.trials} trials of "
                 f"{self.settings.trial_duration:g}s within {self.settings.budget:g}s; results in {self.folder}")
        try:
            with _sigterm_interrupts():
                self.result.stopped_by = self._search()
                if self.result.found is not None and self._replayed():
                    self._shrink()
        except KeyboardInterrupt:
            self.result.stopped_by = "interrupted"
        except _Stopped as stopped:
            self.result.stopped_by = str(stopped)
        finally:
            self._hand_over()
            self._end()
        return self.result

    def _search(self) -> str:
        for index in range(1, self.settings.trials + 1):
            if self.clock() - self.started >= self.settings.budget:
                return "time"
            trial = self.run_schedule(draw_schedule(self.space, self.seed, index), "search")
            for key in coverage_keys(trial.schedule, self.labels) if trial.unjudged is None else ():
                self.result.coverage[key] = self.result.coverage.get(key, 0) + 1  # what was judged, only
            if self.error is not None:
                return self.error
            if trial.exit_code == ExitCode.INTERRUPTED:
                return "interrupted"
            if trial.failures:
                self.result.found = trial
                self.result.failure = trial.failures[0]
                return "found"
        return "trials"

    def _replayed(self) -> bool:
        """Replay the found schedule `reruns` times before shrinking it (each run a fresh seed, derived from the hunt's
        seed and the trial's index as every trial's is): the shrink starts only when `must_fail` of them fail the
        same way, the test each smaller candidate must pass too. Fewer: the find is a fluke at that rate, which the
        shrink would spend its budget on and hand over as "minimal"; the found schedule is handed over as it was
        found, marked "flaky: reproduced k of n" (`shrink_stopped_by` "flaky", `replay` the counts)."""
        found, failure = self.result.found, self.result.failure
        assert found is not None and failure is not None
        runs, wanted = self.settings.reruns, self.settings.must_fail
        self.result.minimal = found.schedule
        self.say(f"replaying trial {found.index}'s schedule before the shrink ({failure}): {runs} runs with fresh "
                 f"seeds, {wanted} must fail the same way")
        try:
            self.result.replay = reproduce(found.schedule, fails_the_same(failure, self._runs("replay")), runs=runs)
        except (KeyboardInterrupt, _Stopped) as cut:
            self.result.shrink_stopped_by = "interrupted" if isinstance(cut, KeyboardInterrupt) else str(cut)
            raise
        failed, ran = self.result.replay
        if failed >= wanted:
            return True
        self.result.shrink_stopped_by = "flaky"
        self.say(f"flaky: reproduced {failed} of {ran} (under {wanted}); not shrunk: the found schedule is handed over "
                 "as found")
        return False

    def _shrink(self) -> None:
        """Shrink the found trial's schedule (its candidates' runs journaled as "shrink" trials), then rerun the
        minimal one `reproduce` times for its rate. Cut short (Ctrl-C, a harness error), the smallest schedule that
        failed so far is the minimal one known, marked so by `shrink_stopped_by`."""
        found, failure = self.result.found, self.result.failure
        assert found is not None and failure is not None
        self.result.minimal = found.schedule
        rate = found_rate(self.result.replay)
        still_fails = _Watched(fails_the_same(failure, self._runs("shrink")), k=self.settings.must_fail,
                               n=self.settings.reruns, rate=rate)
        self.say(f"shrinking trial {found.index}'s schedule ({failure}; {self.settings.must_fail} of "
                 f"{self.settings.reruns} runs must fail the same way"
                 + (f", about as often as its replays did ({rate:.0%}, a sequential test)" if rate is not None else "")
                 + f"; within {self.settings.shrink_runs} runs and {self.settings.shrink_budget:g}s)")
        try:
            shrunk = shrink(found.schedule, failure, still_fails,
                            Budget(self.settings.shrink_budget, self.settings.shrink_runs), fits=self.fits,
                            clock=self.clock)
        except (KeyboardInterrupt, _Stopped) as cut:
            self.result.minimal = still_fails.failing[-1] if still_fails.failing else found.schedule
            self.result.shrink_stopped_by = "interrupted" if isinstance(cut, KeyboardInterrupt) else str(cut)
            raise
        self.result.shrink_path, self.result.shrink_stopped_by = shrunk.path, shrunk.stopped_by
        self.result.irrelevant = shrunk.irrelevant
        self.result.minimal = shrunk.schedule
        if self.settings.reproduce > 0:
            self._reproduce(shrunk.schedule, [step.schedule for step in shrunk.path if step.accepted][:-1])

    def _reproduce(self, minimal: Schedule, larger: list[Schedule]) -> None:
        """Run the minimal scenario exactly as it is handed over (its text, carrying a seed its schedule failed with,
        judged as `run --reproduce` judges it) `reproduce` times for its rate. Below `reproduce_at_least`, try it with
        another seed its schedule failed with, then back off along the shrink path (the schedules it accepted before
        the last, newest first, then the one found), to the first file that reproduces at least that often, trying at
        most `BACK_OFF` more; none does: the best rate seen is kept.

        The shortest run that still fails k of n is, by construction, the flakiest one: a minimal scenario that
        reproduces 3 times in 10 is a poor bug report, and one step larger usually reproduces every time."""
        assert self.result.failure is not None and self.result.found is not None
        runs, wanted = self.settings.reproduce, self.settings.reproduce_at_least
        best: tuple[Schedule, int, tuple[int, int]] | None = None
        for tried, (schedule, seed) in enumerate(self._handed_over(minimal, larger)):
            self.result.minimal, self.result.minimal_seed = schedule, seed
            try:
                text = minimal_scenario(self.base.text, self.result)
            except MinimalScenarioError as exc:
                self.say(f"harness error: {scrub(str(exc))}")
                self.error = "harness error"
                raise _Stopped(self.error) from None
            self.say(f"reproducing {'the minimal scenario' if not tried else 'another candidate'} "
                     f"({describe(schedule) or 'no chaos'}, {schedule.duration:g}s, seed {seed}): {runs} runs of the "
                     "file as handed over")
            rate = reproduce(schedule, partial(self._run_file, text, seed=seed), runs=runs)
            if best is None or rate[0] > best[2][0]:
                best = (schedule, seed, rate)
            if rate[0] >= wanted * rate[1]:
                break
            self.say(f"reproduced {rate[0]} of {rate[1]}: under {wanted:g}, backing off")
        assert best is not None
        self.result.minimal, self.result.minimal_seed, self.result.reproduction = best
        if best[0] != minimal:
            self.result.irrelevant = ()  # said of the minimal schedule's keys, not of a larger one's

    def _handed_over(self, minimal: Schedule, larger: list[Schedule]) -> list[tuple[Schedule, int]]:
        """The files the reproduction tries, in order: each schedule (the minimal one, then back along the shrink
        path, then the one found) with each of at most `SEEDS` seeds it failed with; `BACK_OFF` + 1 at most."""
        assert self.result.found is not None
        schedules = [minimal, *reversed(larger), self.result.found.schedule]
        tried = [(schedule, seed) for index, schedule in enumerate(schedules) if schedule not in schedules[:index]
                 for seed in failing_seeds(self.result, schedule)[:SEEDS]]
        return tried[:BACK_OFF + 1] or [(minimal, self.result.found.seed)]

    def _run_file(self, text: str, schedule: Schedule, *, seed: int) -> bool:
        """One run of the minimal scenario's text as `run --reproduce` runs the file (plain `run`, when it has no
        [reproduces]), journaled as a "reproduce" trial: True when it reproduced, by the file's own judgement. A run
        that cannot be judged (a lost log, chaos that did not act) did not reproduce; an interrupted one raises
        KeyboardInterrupt, a harness or target error `_Stopped`."""
        assert self.folder is not None and self.journal is not None and self.result.failure is not None
        scenario = parse_scenario(text, "minimal.toml")
        judged, reproduced_when = reproduced_by(scenario)
        self.index += 1
        started = self.clock()
        with open_append(self.folder / "trials.log") as log:
            log.write(f"--- trial {self.index} (reproduce): minimal.toml as handed over, seed {seed}\n")
            log.flush()
            code, folder, interrupted = run_trial(scenario, text, self.folder / "trials", log, judged)
        if interrupted:
            raise KeyboardInterrupt
        try:
            unjudged = judge(folder, len(schedule.steps)).unjudged
        except TrialDamaged as exc:
            self.say(f"harness error: {scrub(str(exc))}")
            unjudged, self.error = None, "harness error"
        if code == ExitCode.HARNESS or (code == ExitCode.TARGET and unjudged is None):
            self.error = self.error or ("harness error" if code == ExitCode.HARNESS else "target error")
        reproduced = self.error is None and unjudged is None and code == reproduced_when
        trial = Trial(index=self.index, seed=seed, schedule=schedule, purpose="reproduce",
                      failures=(self.result.failure,) if reproduced else (), exit_code=code,
                      folder=str(folder.relative_to(self.folder)), seconds=round(self.clock() - started, 3),
                      unjudged=unjudged)
        self.result.trials.append(trial)
        said = "reproduced" if reproduced else unjudged or "not reproduced"
        self.journal.write({"type": "trial", "index": trial.index, "seed": seed, "purpose": "reproduce",
                            "schedule": schedule_data(schedule), "outcome": said, "judged": judged.value,
                            "failures": [asdict(failure) for failure in trial.failures], "exit_code": code,
                            "folder": trial.folder, "seconds": trial.seconds})
        self.say(f"[{trial.index}] reproduce minimal.toml (seed {seed}): {said} (exit {code}, {trial.seconds:.0f}s)")
        if self.error is not None:
            raise _Stopped(self.error)
        return reproduced

    def _runs(self, purpose: TrialPurpose) -> Callable[[Schedule], tuple[Failure, ...]]:
        """A runner for the shrinker: each call one trial of that purpose, its failures returned; an interrupted
        trial raises KeyboardInterrupt and a harness or target error `_Stopped`, which end the hunt."""

        def run(schedule: Schedule) -> tuple[Failure, ...]:
            trial = self.run_schedule(schedule, purpose)
            if trial.exit_code == ExitCode.INTERRUPTED:
                raise KeyboardInterrupt
            if self.error is not None:
                raise _Stopped(self.error)
            return trial.failures

        return run

    def fits(self, schedule: Schedule) -> bool:
        """Whether the scenario can run this schedule (its steps validate in it): the shrinker's candidates that do
        not are skipped without a run."""
        try:
            trial_scenario(self.base, schedule, trial_seed(self.seed, 0), self.trial_name(0))
        except ValueError:
            return False
        return True

    def run_schedule(self, schedule: Schedule, purpose: TrialPurpose) -> Trial:
        """Run one schedule as the next trial (journaled, said on the terminal) and judge it. A harness error or a
        target that did not start sets `error`: the caller stops."""
        assert self.folder is not None and self.journal is not None
        self.index += 1
        index, seed = self.index, trial_seed(self.seed, self.index)
        started = self.clock()
        trial = Trial(index=index, seed=seed, schedule=schedule, purpose=purpose)
        header = (f"Trial {index} ({purpose}) of the hunt of {self.base.scenario.name} (hunt seed {self.seed}): "
                  f"{describe(schedule)}.\nRerun it exactly as drawn: mrtr-harness run scenario.toml")
        scenario, text = trial_scenario(self.base, schedule, seed, self.trial_name(index), header)
        with open_append(self.folder / "trials.log") as log:
            log.write(f"--- trial {index} ({purpose}): {describe(schedule)}\n")
            log.flush()
            code, folder, interrupted = run_trial(scenario, text, self.folder / "trials", log)
        trial.exit_code = ExitCode.INTERRUPTED if interrupted else code
        trial.folder = str(folder.relative_to(self.folder))
        problems: tuple[str, ...] = ()
        status = ""
        try:
            judged = judge(folder, len(schedule.steps))
            trial.failures, trial.reasons, problems, status = judged.failures, judged.reasons, judged.problems, \
                judged.status
            trial.unjudged = judged.unjudged
        except TrialDamaged as exc:
            self.error, problems = "harness error", (str(exc),)
        if trial.exit_code == ExitCode.HARNESS:
            self.error = "harness error"
        elif trial.exit_code == ExitCode.TARGET and trial.unjudged is None:  # a lost log: not judged, the hunt goes on
            self.error = "target error"
        trial.seconds = round(self.clock() - started, 3)
        self.result.trials.append(trial)
        self.journal.write({"type": "trial", "index": index, "seed": seed, "purpose": purpose,
                            "schedule": schedule_data(schedule), "outcome": outcome(trial, status),
                            "failures": [asdict(failure) for failure in trial.failures], "reasons": trial.reasons,
                            "exit_code": trial.exit_code, "status": status,
                            "problems": [scrub(line) for line in problems], "folder": trial.folder,
                            "seconds": trial.seconds})
        self._progress(trial, status, problems)
        return trial

    def _progress(self, trial: Trial, status: str, problems: tuple[str, ...]) -> None:
        said = outcome(trial, status)
        if trial.failures:
            said += ": " + ", ".join(str(failure) for failure in trial.failures)
        elif problems and said != "held":
            said += ": " + scrub(problems[0])
        counted = f"{trial.index}/{self.settings.trials}" if trial.purpose == "search" else str(trial.index)
        self.say(f"[{counted}] {trial.purpose} {describe(trial.schedule) or 'no chaos'}: {said} "
                 f"({trial.seconds:.0f}s)")

    def _end(self) -> None:
        assert self.journal is not None
        result = self.result
        self.journal.write({"type": "end", "stopped_by": result.stopped_by, "trials": len(result.trials),
                            "found": result.found.index if result.found is not None else None,
                            "failure": asdict(result.failure) if result.failure is not None else None,
                            "coverage": [{"action": action, "target": whom, "timing": when, "trials": count}
                                         for (action, whom, when), count in sorted(result.coverage.items())],
                            "shrink": self._shrink_record(), "minimal_file": _named(self.minimal_file, self.folder),
                            "page": _named(self.page_file, self.folder),
                            "seconds": round(self.clock() - self.started, 3)})
        self.journal.close()

    def _hand_over(self) -> None:
        """The minimal failing scenario (when a trial failed) and hunt.html, written into the hunt's folder whatever
        stopped it; a minimal scenario that would not validate, or a link planted in the hunt's folder where either
        goes (not written through), is the harness's error (exit 4)."""
        assert self.folder is not None
        if self.result.found is not None and self.result.minimal is not None:
            try:
                self.minimal_file = write_minimal(self.folder / "minimal.toml", self.base.text, self.result)
            except (MinimalScenarioError, PlantedLink) as exc:
                self.say(f"harness error: {scrub(str(exc))}")
                self.result.stopped_by = "harness error"
        try:
            self.page_file = write_page(self.folder / "hunt.html", self.result,
                                        coverage_cells(self.space, self.labels))
        except PlantedLink as exc:
            self.say(f"harness error: {exc}")
            self.result.stopped_by = "harness error"

    def _shrink_record(self) -> dict[str, Any] | None:
        """The shrink's outcome for the journal's end record: why it stopped, its cost, its path, the minimal schedule
        and its reproduction; None when nothing was shrunk."""
        result = self.result
        if result.found is None or result.minimal is None:
            return None
        runs = [trial for trial in result.trials if trial.purpose == "shrink"]
        return {"stopped_by": result.shrink_stopped_by, "runs": len(runs),
                "replay": ({"failed": result.replay[0], "runs": result.replay[1]}
                           if result.replay is not None else None),
                "seconds": round(sum(trial.seconds for trial in runs), 3),
                "minimal": schedule_data(result.minimal), "irrelevant": list(result.irrelevant),
                "path": [{"what": step.what, "runs": step.runs, "failed": step.failed, "accepted": step.accepted}
                         for step in result.shrink_path],
                "reproduction": ({"failed": result.reproduction[0], "runs": result.reproduction[1]}
                                 if result.reproduction is not None else None)}

    def coverage_line(self) -> str:
        """What the search tried, in one line, out of what its bounds allow (the page says the same)."""
        return "coverage: " + coverage_line(self.result, coverage_cells(self.space, self.labels))

    def say(self, line: str) -> None:
        self.stream.write(foreign_text.block(line) + "\n")  # a trial's problems quote the target: shown as text
        self.stream.flush()


BACK_OFF = 3
"""More files (another seed, or a larger schedule along the shrink path) the reproduction tries when the minimal
scenario reproduces too rarely."""
SEEDS = 2
"""Seeds a schedule failed with that the reproduction tries it with, at most."""


class _Stopped(Exception):
    """A shrink or reproduction run that was the harness's failure or whose target did not start: the hunt stops
    (its text is `HuntResult.stopped_by`)."""


@dataclass(frozen=True)
class _Watched(KOfN):
    """k of n that keeps each candidate that failed, so a shrink cut short still knows the smallest failing
    schedule so far (the shrinker keeps every failing candidate as its best)."""

    failing: list[Schedule] = field(default_factory=list)

    def votes(self, schedule: Schedule) -> Votes:
        counted = super().votes(schedule)
        if counted.fails:
            self.failing.append(schedule)
        return counted


def _named(path: Path | None, folder: Path | None) -> str | None:
    return str(path.relative_to(folder)) if path is not None and folder is not None else None


def outcome(trial: Trial, status: str) -> str:
    """A trial's outcome in a word: failed (the property broke), held, interrupted, error, or not judged (the run
    failed otherwise, e.g. a chaos action that did not happen: the schedule was not tried as drawn; or its logs lost a
    replica)."""
    if trial.failures:
        return "failed"
    if trial.exit_code == ExitCode.INTERRUPTED:
        return "interrupted"
    if trial.unjudged:
        return "not judged"
    if trial.exit_code in (ExitCode.HARNESS, ExitCode.TARGET) or status in ("", "errored"):
        return "error"
    return "held" if trial.exit_code == ExitCode.PASSED else "not judged"


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM between trials stops the hunt as Ctrl-C does (a trial under way has the run's own handlers)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
