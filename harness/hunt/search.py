"""The search: draw a schedule, run it as a trial, judge it; until one fails, or the trials or the time run out.

A hunt's results folder, `<results>/<utc>-hunt-<scenario>/`, holds `hunt.jsonl` (its own
journal, written as it goes: a `start` record, one `trial` record per trial, an `end` record
with the shrink's outcome), `trials/`, each trial's own results folder (a run's,
`scenario.toml` first), and what the hunt hands over: `minimal.toml` (the shrunk schedule as a
scenario, when a trial failed) and `hunt.html`, written whatever stopped the hunt. Every trial
record has its index, seed, purpose, schedule as plain data, failures, reasons, exit code,
folder and seconds: `mrtr-harness run trials/<folder>/scenario.toml` reruns that trial exactly
as drawn, and `hunt --seed S` draws the same schedules again (with the same strategy: `harness.hunt.strategy`,
which gives each search trial's schedule from the trials so far). With `--corpus`, the corpus's
entries are replayed first, each as a trial of purpose `corpus` with its own seed
(`harness.hunt.corpus`), and the minimal scenario is kept in it.

What stops the search, and the hunt's exit code: a trial that fails the property (1: found),
the trials or the budget spent (0: nothing broke), Ctrl-C or SIGTERM (130: the trial under way
is interrupted by the run's own machinery, its chaos rolled back, its results written; the
journal ends with what was found so far), a trial that is the harness's own failure (4) or
whose target could not start (3): neither is the target's failure under chaos.

Import this module only after Locust's gevent patching (the command imports `locust` first).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, cast

from harness import foreign_text
from harness.atomic_files import PlantedLink, open_append
from harness.config.chaos import CHAOS_ACTIONS
from harness.config.durations import format_duration
from harness.config.hunt import HuntSettings, action_problem
from harness.config.scenario import Scenario, parse_scenario
from harness.errors import ExitCode
from harness.hunt import corpus, coverage
from harness.hunt.draw import Space, trial_seed
from harness.hunt.from_triage import Steering
from harness.hunt.minimal import MinimalScenarioError, failing_seeds, minimal_scenario, reproduced_by, write_minimal
from harness.hunt.model import (
    Failure,
    FlakyFind,
    HuntResult,
    Schedule,
    Trial,
    TrialPurpose,
    describe,
    unshrunk_reason,
)
from harness.hunt.page import coverage_line, write_page
from harness.hunt.records import (
    HuntRecord,
    HuntRecordType,
    Outcome,
    TrialRecord,
    failure_data,
    runs_data,
    schedule_data,
)
from harness.hunt.shrink import Budget, KOfN, Votes, fails_the_same, found_rate, reproduce, shrink
from harness.hunt.signature import UNEXPLAINED
from harness.hunt.strategy import Exhausted, Tried, strategy_for
from harness.hunt.summary import write_summary
from harness.hunt.trial import (
    Base,
    Property,
    TrialDamaged,
    judge,
    reuse_said,
    run_trial,
    shared_shop_parts,
    trial_scenario,
)
from harness.processes.children import sigterm_as_ctrl_c
from harness.run.results_folder import results_folder
from harness.secrets import scrub

WITHOUT_CHAOS = "fails without chaos"
"""What stopped a hunt whose control trial (no chaos) failed: the deployment fails under load alone, so chaos
proves nothing about it; nothing is searched or shrunk."""
NOTHING_TO_DRAW = "nothing to draw"
"""What stops a `--from-triage` hunt whose reasons no drawable action provokes once its controls held: no search
could reproduce them (exit 2, as the same refusal before any trial)."""
EXIT_CODES: dict[str, ExitCode] = {"found": ExitCode.FAILED, WITHOUT_CHAOS: ExitCode.FAILED,
                                   NOTHING_TO_DRAW: ExitCode.USAGE,
                                   "trials": ExitCode.PASSED, "time": ExitCode.PASSED, "certified": ExitCode.PASSED,
                                   "interrupted": ExitCode.INTERRUPTED, "harness error": ExitCode.HARNESS,
                                   "target error": ExitCode.TARGET}
"""The hunt's exit code by what stopped it (`HuntResult.stopped_by`)."""


class HuntJournal:
    """hunt.jsonl: one JSON object a line, flushed as each is written, so a hunt killed at any point leaves it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_append(path)

    def write(self, record: HuntRecord) -> None:
        self._file.write(json.dumps({**record, "t": round(time.time(), 3)}, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()




class Hunt:
    """One hunt of one scenario: its results folder, its journal, its trials."""

    def __init__(self, base: Base, *, results_root: Path = Path("results"), stream: IO[str],
                 clock: Callable[[], float] = time.monotonic, corpus_folders: Sequence[Path] = ()) -> None:
        self.base = base
        self.settings = base.scenario.hunt or HuntSettings()
        self.seed = self.settings.seed if self.settings.seed is not None else base.scenario.seed
        self.space = Space.of(base.scenario)
        self.labels = [f"r{n}" for n in range(1, self.space.replica_count + 1)]
        self.strategy = strategy_for(self.settings.strategy, self.space, self.seed, self.labels)
        self.history: list[Tried] = []
        """Every trial run so far, as the strategy reads it."""
        self.results_root = results_root
        self.stream = stream
        self.clock = clock
        self.property = Property.of(base.scenario, self.settings.expect)
        self.result = HuntResult(scenario=base.scenario.name, seed=self.seed, property_line=self.property_line(),
                                 strategy=self.strategy.name, expect_counted=self.property.expect)
        self.folder: Path | None = None
        self.journal: HuntJournal | None = None
        self.index = 0
        self.error: str | None = None
        """What stopped the hunt as an error (a harness error, a target that did not start)."""
        self.minimal_file: Path | None = None
        self.page_file: Path | None = None
        self.searched = 0
        """Search trials run so far (the trial index also counts the controls)."""
        self.corpus_folders = tuple(corpus_folders)
        """`--corpus`: replayed first; the minimal scenario is saved into the first (`harness.hunt.corpus`)."""
        self.found_in_corpus: str | None = None
        """The corpus entry whose replay failed (the hunt's find); None: the search found it, or nothing."""
        self.corpus_entries: list[corpus.Entry] = []
        """The corpus's entries as read (the minimal scenario is not kept again when one of them replays it)."""
        self.corpus_saved: tuple[Path, bool] | None = None
        """Where the minimal scenario was kept in the corpus, and whether it was new there."""
        self.steering: Steering | None = None
        """`--from-triage`: where an incident's logged reasons steer the hunt (`harness.hunt.from_triage`)."""
        self.summary_file: Path | None = None
        """hunt.json, once written (`harness.hunt.summary`)."""
        self.certificate: str | None = None
        """What the strategy certified when it had no schedule left to try (`Exhausted`); None: it never ran out."""
        self.trial_range: tuple[int, int] | None = None
        """`--trial-range A:B`: only the search trials A to B (1-based, inclusive) of the whole search run here, each
        drawn and seeded as the whole hunt would (`harness.hunt.merge` joins the parts); None: every trial."""
        self._skipped: list[Tried] = []
        """The search trials before the range, drawn but never run: what the strategy is told came first."""

    def first_scenario(self) -> Scenario:
        """Trial 1's scenario, drawn and validated before anything starts: what `say_remote` is asked about."""
        return trial_scenario(self.base, self.strategy.next(()), trial_seed(self.seed, 1), self.trial_name(1))[0]

    def trial_name(self, index: int) -> str:
        return f"{self.base.scenario.name}-t{index:03d}"

    def run(self) -> HuntResult:
        """The search; then the shrink of what it found. Returns what the hunt found (`stopped_by` set)."""
        self.folder = results_folder(self.results_root, f"hunt-{self.base.scenario.name}")
        (self.folder / "trials").mkdir()
        self.journal = HuntJournal(self.folder / "hunt.jsonl")
        self.started = self.clock()
        left_out = self.left_out()
        self.journal.write({"type": HuntRecordType.START, "scenario": self.base.scenario.name,
                            "source": self.base.source, "seed": self.seed, "strategy": self.strategy.name,
                            "bounds": self.settings.model_dump(mode="json"),
                            "actions": list(self.space.actions), "replicas": list(self.space.replicas),
                            "property": self.result.property_line, "expect_counts": self.property.expect,
                            "left_out": left_out, "most_runs": self.most_runs(),
                            "trial_range": list(self.trial_range) if self.trial_range is not None else None})
        self.say(f"hunt of {self.base.scenario.name} (seed {self.seed}, strategy {self.strategy.name}): "
                 f"{self.bound_line()}; {reuse_said(self.base.scenario)}; results in "
                 f"{self.folder}")
        self.say(f"property: {self.result.property_line}")
        self._say_steering()
        for why, actions in _grouped(left_out).items():
            self.say(f"left out: {', '.join(actions)} ({why})")
        with shared_shop_parts(self.base.scenario, self.folder):
            try:
                with sigterm_as_ctrl_c():  # between trials; a trial under way has the run's own handlers
                    self.result.stopped_by = self._controls() or self._replay_corpus() or self._search()
                    if self.result.found is not None and self._replayed_or_searched_on():
                        self._shrink()
            except KeyboardInterrupt:
                self.result.stopped_by = "interrupted"
            except _Stopped as stopped:
                self.result.stopped_by = str(stopped)
            finally:
                self._hand_over()
                self._end()
        return self.result

    def bound_line(self) -> str:
        """The whole bound in one line: the controls and the search, and what a find adds (the shrink, the
        reproduction and its backing off), so a long hunt is never a surprise."""
        bounds = self.settings
        controls = (f"{_count(bounds.controls, 'control trial')} without chaos, then " if bounds.controls
                    else "no control trial, ")
        reproduce = (f"{bounds.reproduce} reproduction runs (up to {bounds.reproduce * (1 + BACK_OFF)} backing "
                     f"off)" if bounds.reproduce else "no reproduction runs")
        return (f"{controls}up to {_count(bounds.trials, 'trial')} of {format_duration(bounds.trial_duration)} "
                f"within {format_duration(bounds.budget)}; a find then takes up to {bounds.shrink_runs} shrink runs "
                f"within {format_duration(bounds.shrink_budget)} and {reproduce}: at most {self.most_runs()} runs")

    def most_runs(self) -> int:
        """The most trials the hunt can run: controls, search, shrink, and the reproduction with its backing off."""
        bounds = self.settings
        return bounds.controls + bounds.trials + bounds.shrink_runs + bounds.reproduce * (1 + BACK_OFF)

    def property_line(self) -> str:
        """What no trial may show, in one line: the must-nevers, the steady state (or that there is none), and
        whether the scenario's `[expect]` counts."""
        scenario = self.base.scenario
        parts = ["no invariant violated", f"no unexplained {UNEXPLAINED}"]
        if scenario.hypothesis:
            parts.append(f"the steady state ([hypothesis] {_thresholds(scenario.hypothesis)}) holds during and after "
                         "the chaos, and without chaos in the controls")
        else:
            parts.append("recovery not judged: the scenario has no [hypothesis] (the steady state to come back to)")
        said = "; ".join(parts)
        if not scenario.expect:
            return said
        if self.property.expect:
            return f"{said}; and the scenario's [expect] ({_thresholds(scenario.expect)})"
        return (f"{said}; the scenario's [expect] ({_thresholds(scenario.expect)}) is not part of it: it is the "
                "healthy outcome `run` judges, which chaos may cost a healthy deployment ([hunt] expect = true or "
                "--expect counts it)")

    def _say_steering(self) -> None:
        """`--from-triage`: the reasons triage counted, the actions they steer to, what the property gains, what no
        drawable action provokes; before the first trial."""
        for line in self.steering.lines() if self.steering is not None else ():
            self.say(line)

    def left_out(self) -> dict[str, str]:
        """Each chaos action the hunt will not draw, and why (in the user's words), said before the first trial."""
        why = {}
        for name in CHAOS_ACTIONS:
            if name in self.space.actions:
                continue
            problem = action_problem(name, self.base.scenario)
            steered = self.steering.left_out(name) if self.steering is not None else None
            why[name] = problem or steered or "not in [hunt] actions"
        replicas = [label for number, label in enumerate(self.labels, 1) if number not in self.space.replicas]
        if replicas:
            why["replicas " + ", ".join(replicas)] = "not in [hunt] replicas: no step names them"
        return why

    def _controls(self) -> str | None:
        """The control trials: the scenario with no chaos, journaled with a `control` record after them. One that
        fails the property ends the hunt as "fails without chaos" (nothing searched, nothing shrunk); None: the
        search may start."""
        assert self.journal is not None
        if not self.settings.controls:
            return None
        ran: list[Trial] = []
        for _ in range(self.settings.controls):
            trial = self.run_schedule(Schedule((), self.space.duration), "control")
            ran.append(trial)
            if self.error is not None or trial.exit_code == ExitCode.INTERRUPTED:
                return self.error or "interrupted"
            if trial.failures:
                self.result.control = trial
                break
        failed = self.result.control
        self.journal.write({"type": HuntRecordType.CONTROL, "trials": [trial.index for trial in ran],
                            "held": sum(1 for trial in ran if not trial.failures and trial.unjudged is None),
                            "not_judged": sum(1 for trial in ran if trial.unjudged is not None),
                            "failed": failed.index if failed is not None else None,
                            "failures": [failure_data(failure) for failure in failed.failures] if failed else []})
        if failed is not None:
            self.say(f"fails without chaos: control trial {failed.index} failed "
                     f"({', '.join(map(str, failed.failures))}); nothing is searched or shrunk")
            return WITHOUT_CHAOS
        unjudged = sum(1 for trial in ran if trial.unjudged is not None)
        if unjudged:
            self.say(f"controls: {len(ran) - unjudged} of {len(ran)} held, {unjudged} not judged: a find may still "
                     "break without chaos (its shrink would say so)")
        return None

    def controls_held(self) -> int:
        """The control trials so far that were judged and held."""
        return sum(trial.purpose == "control" and not trial.failures and trial.unjudged is None
                   for trial in self.result.trials)

    def _search(self, after: int = 0) -> str:
        """Search trials from the first of the range (or from the one after `after`, a search going on past a find set
        aside as flaky) until one fails or the bounds end; what stopped it."""
        if self.steering is not None and self.steering.controls_only:
            self.say(self.steering.nothing_to_draw(self.controls_held()))
            return NOTHING_TO_DRAW
        first, last = self.trial_range or (1, self.settings.trials)
        if after:
            first = after + 1
        else:
            self._skip_to(first)
        for index in range(first, last + 1):
            if self.clock() - self.started >= self.settings.budget:
                return "time"
            schedule = self._next_schedule()
            if schedule is None:
                return "certified"
            self.searched = index
            trial = self.run_schedule(schedule, "search")
            self._count_coverage(trial)
            if self.error is not None:
                return self.error
            if trial.exit_code == ExitCode.INTERRUPTED:
                return "interrupted"
            if trial.failures:
                self.result.found = trial
                self.result.failure = trial.failures[0]
                return "found"
        return "trials"

    def _skip_to(self, first: int) -> None:
        """Before a trial range that starts at `first`: draw the search trials before it without running them, so the
        strategy (one whose schedules do not depend on trials' outcomes: `--trial-range` refuses the others) draws
        trial `first` as the whole hunt would; and number the trials as the whole hunt does (its controls, then the
        search), so each gets the seed it would have there."""
        for _ in range(1, first):
            schedule = self.strategy.next(tuple(self._skipped))
            self._skipped.append(Tried(Trial(index=0, seed=0, schedule=schedule, purpose="search"),
                                       cast(TrialRecord, {}), Path()))
        if self.trial_range is not None:
            self.index = self.settings.controls + first - 1

    def _next_schedule(self) -> Schedule | None:
        """The strategy's next schedule; None when it has none left to try, its certificate kept and said."""
        try:
            return self.strategy.next((*self._skipped, *self.history))
        except Exhausted as exhausted:
            self.certificate = self.result.certificate = str(exhausted)
            self.say(f"certificate: {self.certificate}")
            return None

    def _replay_corpus(self) -> str | None:
        """Replay the corpus before searching, as Hypothesis replays its database (`harness.hunt.corpus`): the first
        entry that fails is the hunt's find (shrunk as a search's would be); None when none did, and the search goes
        on. What was replayed and skipped, and why, is journaled (a `corpus` record) and said in one line."""
        if not self.corpus_folders:
            return None
        assert self.journal is not None
        entries, unread = corpus.read_corpus(self.corpus_folders, self.base.scenario.load.arrival_rate)
        self.corpus_entries = entries
        kept, unfit = corpus.replayable(entries, self.space, self.fits)
        skipped = [*unread, *unfit]
        self.journal.write({"type": HuntRecordType.CORPUS, "folders": [str(folder) for folder in self.corpus_folders],
                            "replayed": [entry.name for entry in kept],
                            "skipped": [asdict(entry) for entry in skipped]})
        said = "; ".join(f"{entry.name}: {entry.why}" for entry in skipped[:3]) + ("; ..." * (len(skipped) > 3))
        self.say(f"corpus: replaying {len(kept)} of {len(entries) + len(unread)} entries first"
                 + (f" ({len(skipped)} skipped, hunt.jsonl says why: {said})" if skipped else ""))
        for entry in kept:
            if self.clock() - self.started >= self.settings.budget:
                return "time"
            trial = self.run_schedule(entry.schedule, "corpus", seed=entry.seed)
            if self.error is not None:
                return self.error
            if trial.exit_code == ExitCode.INTERRUPTED:
                return "interrupted"
            if trial.failures:
                self.result.found, self.result.failure, self.found_in_corpus = trial, trial.failures[0], entry.name
                return "found"
        return None

    def _save_to_corpus(self) -> None:
        """Keep the minimal scenario in the first corpus folder named, so later hunts replay it first. A link planted at
        its name, or a folder that cannot be written, is said in one line: the hunt's verdict stands."""
        assert self.minimal_file is not None and self.journal is not None
        failure, minimal = self.result.failure, self.result.minimal
        assert failure is not None and minimal is not None
        if not minimal.steps:
            self.say("corpus: the minimal schedule has no chaos step, so it is not kept (the deployment fails under "
                     "its load alone; a replay carries chaos schedules)")
            return
        try:
            self.corpus_saved = corpus.save(self.corpus_folders[0], self.minimal_file.read_text(encoding="utf-8"),
                                            self.base.scenario.name, failure, minimal, self.corpus_entries)
        except (PlantedLink, OSError) as exc:
            self.say(f"corpus: the minimal scenario was not kept: {scrub(str(exc))}")
            return
        path, new = self.corpus_saved
        self.journal.write({"type": HuntRecordType.CORPUS_SAVED, "path": str(path), "new": new})

    def _count_coverage(self, trial: Trial) -> None:
        """A search trial's steps that acted on rounds in flight, if it was judged, into the coverage
        (`harness.hunt.coverage`, which reads the trial's summary.json)."""
        assert self.folder is not None
        coverage.count(self.result.coverage, trial, self.folder / trial.folder, self.labels)

    def _replayed_or_searched_on(self) -> bool:
        """Replay the find (`_replayed`); a flaky one is set aside (journaled, said) and the search goes on within its
        bounds, since one fluke says little about what else breaks and on-call wants the failure that reproduces. True:
        a find replayed and is the one to shrink. False: none did, and the first flaky find is handed over as found."""
        while not self._replayed():
            result = self.result
            assert result.found is not None and result.failure is not None and result.replay is not None
            result.flaky.append(FlakyFind(result.found, result.failure, result.replay))
            assert self.journal is not None
            self.journal.write({"type": HuntRecordType.FLAKY, "trial": result.found.index,
                                "failure": failure_data(result.failure),
                                "replay": runs_data(result.replay)})
            result.found = result.failure = result.replay = result.minimal = None
            result.shrink_stopped_by, self.found_in_corpus = "", None
            self.say(f"set aside as flaky; the search goes on from trial {self.searched + 1} within its bounds")
            try:
                stopped = self._search(after=self.searched)
            finally:  # cut short (Ctrl-C, SIGTERM, an error) or ended with nothing: the first flaky find is the find
                if result.found is None:
                    self._first_flaky_as_found()
            if result.flaky and result.found is result.flaky[0].trial:
                result.stopped_by = "found" if stopped in ("trials", "time", "certified", NOTHING_TO_DRAW) else stopped
                self.say(f"nothing else broke ({stopped}): the first flaky find, trial {result.found.index}, is "
                         "handed over as found, not shrunk")
                return False
            result.stopped_by = stopped
        return True

    def _first_flaky_as_found(self) -> None:
        """The first find set aside as flaky, back as the hunt's find: handed over as found, not shrunk."""
        result, first = self.result, self.result.flaky[0]
        result.found, result.failure, result.replay = first.trial, first.failure, first.replay
        result.minimal, result.shrink_stopped_by = first.trial.schedule, "flaky"

    def _replayed(self) -> bool:
        """Replay the found schedule `reruns` times before shrinking it (each run a fresh seed, derived from the hunt's
        seed and the trial's index as every trial's is): the shrink starts only when `must_fail` of them fail the
        same way, the test each smaller candidate must pass too. Fewer: the find is a fluke at that rate, which the
        shrink would spend its budget on and hand over as "minimal": said as "flaky: reproduced k of n", with
        `replay` the counts (`_replayed_or_searched_on` sets it aside)."""
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
        self.say(f"flaky: reproduced {failed} of {ran} (under {wanted}); not shrunk")
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
        if not self.result.shrunk:
            self.say(f"not shrunk: {unshrunk_reason(shrunk.stopped_by)} ({len(shrunk.path)} candidates tried); the "
                     "schedule found is handed over as it is")
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
        candidates = self._handed_over(minimal, larger)
        for tried, (schedule, seed) in enumerate(candidates):
            self.result.minimal, self.result.minimal_seed = schedule, seed
            try:
                text = minimal_scenario(self.base.text, self.result)
            except MinimalScenarioError as exc:
                self.say(f"harness error: {scrub(str(exc))}")
                self.error = "harness error"
                raise _Stopped(self.error) from None
            what = ("another candidate" if tried else "the minimal scenario" if self.result.shrunk
                    else "the schedule found (not shrunk)")
            self.say(f"reproducing {what} "
                     f"({describe(schedule) or 'no chaos'}, {schedule.duration:g}s, seed {seed}): {runs} runs of the "
                     "file as handed over")
            rate = reproduce(schedule, partial(self._run_file, text, seed=seed), runs=runs)
            if best is None or rate[0] > best[2][0]:
                best = (schedule, seed, rate)
            if rate[0] >= wanted * rate[1]:
                break
            following = candidates[tried + 1][0] if tried + 1 < len(candidates) else None
            then = ("and no larger schedule is left to back off to" if following is None
                    else "trying another seed it failed with" if following == schedule
                    else "backing off to a larger schedule")
            self.say(f"reproduced {rate[0]} of {rate[1]}: under {wanted:g}, {then}")
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
        self.journal.write({"type": HuntRecordType.TRIAL, "index": trial.index, "seed": seed, "purpose": "reproduce",
                            "schedule": schedule_data(schedule), "outcome": said, "judged": judged.value,
                            "failures": [failure_data(failure) for failure in trial.failures], "exit_code": code,
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

    def run_schedule(self, schedule: Schedule, purpose: TrialPurpose, seed: int | None = None) -> Trial:
        """Run one schedule as the next trial (journaled, said on the terminal) and judge it; `seed`: the trial's (a
        corpus entry's own), else drawn from the hunt's. A harness error or a target that did not start sets `error`:
        the caller stops."""
        assert self.folder is not None and self.journal is not None
        self.index += 1
        index, seed = self.index, trial_seed(self.seed, self.index) if seed is None else seed
        started = self.clock()
        trial = Trial(index=index, seed=seed, schedule=schedule, purpose=purpose)
        header = (f"Trial {index} ({purpose}) of the hunt of {self.base.scenario.name} (hunt seed {self.seed}): "
                  f"{describe(schedule)}.\nRerun it exactly as drawn: mrtr-harness run scenario.toml")
        if purpose == "control":
            header = (f"Control trial {index} of the hunt of {self.base.scenario.name} (hunt seed {self.seed}): no "
                      "chaos; its [expect] also holds the [hypothesis], judged over the whole run.\nRerun it "
                      "exactly: mrtr-harness run scenario.toml")
        scenario, text = trial_scenario(self.base, schedule, seed, self.trial_name(index), header,
                                        control=purpose == "control")
        with open_append(self.folder / "trials.log") as log:
            log.write(f"--- trial {index} ({purpose}): {describe(schedule)}\n")
            log.flush()
            code, folder, interrupted = run_trial(scenario, text, self.folder / "trials", log)
        trial.exit_code = ExitCode.INTERRUPTED if interrupted else code
        trial.folder = str(folder.relative_to(self.folder))
        problems: tuple[str, ...] = ()
        status, uncounted = "", tuple[str, ...]()
        try:
            judged = judge(folder, len(schedule.steps), self.property)
            trial.failures, trial.reasons, problems, status = judged.failures, judged.reasons, judged.problems, \
                judged.status
            trial.unjudged, uncounted = judged.unjudged, judged.uncounted
        except TrialDamaged as exc:
            self.error, problems = "harness error", (str(exc),)
        if trial.exit_code == ExitCode.HARNESS:
            self.error = "harness error"
        elif trial.exit_code == ExitCode.TARGET and trial.unjudged is None:  # a lost log: not judged, the hunt goes on
            self.error = "target error"
        trial.seconds = round(self.clock() - started, 3)
        self.result.trials.append(trial)
        record: TrialRecord = {"type": HuntRecordType.TRIAL, "index": index, "seed": seed, "purpose": purpose,
                               "schedule": schedule_data(schedule), "outcome": outcome(trial, status),
                               "failures": [failure_data(failure) for failure in trial.failures],
                               "reasons": trial.reasons, "exit_code": trial.exit_code, "status": status,
                               "problems": [scrub(line) for line in problems], "folder": trial.folder,
                               "uncounted_expect": list(uncounted), "seconds": trial.seconds}
        self.journal.write(record)
        self.history.append(Tried(trial, record, folder))
        self._progress(trial, status, problems, uncounted)
        return trial

    def _progress(self, trial: Trial, status: str, problems: tuple[str, ...], uncounted: tuple[str, ...] = ()) -> None:
        said: str = outcome(trial, status)
        if trial.failures:
            said += ": " + ", ".join(str(failure) for failure in trial.failures)
        elif problems and said != "held":
            said += ": " + scrub(problems[0])
        elif uncounted:
            said += f" ([expect] {', '.join(uncounted)} failed: not part of the property)"
        counted = {"search": f"{self.searched}/{self.settings.trials}",
                   "control": f"{trial.index}/{self.settings.controls}"}.get(trial.purpose, str(trial.index))
        self.say(f"[{counted}] {trial.purpose} {describe(trial.schedule) or 'no chaos'}: {said} "
                 f"({trial.seconds:.0f}s)")

    def _end(self) -> None:
        assert self.journal is not None
        result = self.result
        self.journal.write({"type": HuntRecordType.END, "stopped_by": result.stopped_by, "trials": len(result.trials),
                            "without_chaos": ({"trial": result.control.index, "folder": result.control.folder,
                                               "failures": [failure_data(failure)
                                                            for failure in result.control.failures]}
                                              if result.control is not None else None),
                            "found": result.found.index if result.found is not None else None,
                            "failure": failure_data(result.failure) if result.failure is not None else None,
                            "coverage": coverage.coverage_rows(result.coverage),
                            **coverage.residual_record(result),
                            "shrink": self._shrink_record(), "minimal_file": _named(self.minimal_file, self.folder),
                            "page": _named(self.page_file, self.folder), "certificate": self.certificate,
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
            if self.minimal_file is not None and self.corpus_folders:
                self._save_to_corpus()
        try:
            self.page_file = write_page(self.folder / "hunt.html", self.result,
                                        coverage.cells(self.space, self.labels))
        except PlantedLink as exc:
            self.say(f"harness error: {exc}")
            self.result.stopped_by = "harness error"
        self._write_summary()

    def _write_summary(self) -> None:
        """hunt.json, the hunt's outcome in one object (`harness.hunt.summary`), written last of what it hands over; a
        link planted at its name (not written through) is the harness's error."""
        assert self.folder is not None
        try:
            self.summary_file = write_summary(self.folder / "hunt.json", self, self._shrink_record())
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
                "replay": (runs_data(result.replay)
                           if result.replay is not None else None),
                "seconds": round(sum(trial.seconds for trial in runs), 3),
                "minimal": schedule_data(result.minimal), "irrelevant": list(result.irrelevant),
                "path": [{"what": step.what, "runs": step.runs, "failed": step.failed, "accepted": step.accepted}
                         for step in result.shrink_path],
                "reproduction": (runs_data(result.reproduction)
                                 if result.reproduction is not None else None)}

    def coverage_line(self) -> str:
        """What the search tried, in one line, out of what its bounds allow (the page says the same)."""
        return "coverage: " + coverage_line(self.result, coverage.cells(self.space, self.labels))

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


def _grouped(why: dict[str, str]) -> dict[str, list[str]]:
    """What was left out, by the reason (several auth actions share one)."""
    grouped: dict[str, list[str]] = {}
    for name, reason in why.items():
        grouped.setdefault(reason, []).append(name)
    return grouped


def _distinct(schedules: list[Schedule]) -> list[Schedule]:
    """The schedules in order, each once (the shrink path may end where it began: nothing accepted)."""
    return [schedule for index, schedule in enumerate(schedules) if schedule not in schedules[:index]]


def _thresholds(table: dict[str, str | list[str]]) -> str:
    """A threshold table in a few words: `rejections == 0, completed_ratio >= 0.9`."""
    return ", ".join(f"{key} {'; '.join([value] if isinstance(value, str) else value)}"
                     for key, value in table.items())


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _named(path: Path | None, folder: Path | None) -> str | None:
    return str(path.relative_to(folder)) if path is not None and folder is not None else None


def outcome(trial: Trial, status: str) -> Outcome:
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
    return "held" if trial.exit_code in (ExitCode.PASSED, ExitCode.FAILED) else "not judged"


