"""Running a capacity sweep: each step is a real run of the scenario, judged over its steady window.

A step is `Run(scenario with overrides)` in this process: the arrival rate, the step's
duration and (on a target the harness starts) the replica count are overridden, and the
step's own results folder goes under the sweep's `steps/`. With workers (`plan.workers`
local, `plan.remote_workers` elsewhere) the step's run is their master, as `run --workers N`
is: its load is spread over them by the same driver, and each step starts (or waits for)
its own. On a deployment the harness did not start, the replica count is changed by the
scenario's `[target.commands] scale` command, once before each count's steps, and the sweep
waits for the target's URLs to accept connections again; the deployment is left at the last
count swept. The step's journal is then read again to judge it over the steady window only
(the warm-up discarded): the scenario's `[expect]` thresholds evaluated on the rounds and
flows that ended after the warm-up, plus the run's invariants and reconciliation. A step
holds when all of those pass.

The harness watches itself: a step whose load generator used more than `saturation_cpu`
cores (its CPU seconds over the load window, from the run's own accounting: the master's
alone when workers run the flows) or started more than `saturation_late` of its flows late
(it could not keep the arrival schedule) is flagged `generator_saturated`. Such a step is
neither a hold nor a break: it is never reported as the server's limit, and the climb stops
there.

Import this module only after Locust's gevent patching (the CLI imports `locust` first);
`analyse_step` and the result types need no gevent and can be used anywhere.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.atomic_files import open_append
from harness.capacity.estimate import estimate
from harness.capacity.expiry import NONE, ExpiryAssessment, ExpiryMeasurement, assess, measure
from harness.capacity.other_load import OtherLoad
from harness.capacity.search import Judgement, Limit, Tried, limit_of, search, step_through
from harness.capacity.sweep_plan import CapacityPlan
from harness.config.scenario import Scenario, parse_scenario
from harness.config.thresholds import parse_thresholds
from harness.errors import ExitCode, MrtrHarnessError, TargetDown
from harness.folding.figures import RunFigures
from harness.folding.thresholds import evaluate
from harness.journal.records import FlowOutcome, RecordType, RunEvent
from harness.journal.segments import part_exists
from harness.journal.writer import read_journal
from harness.report.series import percentile
from harness.run.results_folder import results_folder
from harness.targets.commands import accepts, fill, run_command

RISING, RISING_FLOOR = 2.0, 0.05
"""A steady window's second half may not have a p95 round latency above twice its first half's (and 50 ms)."""


class StepTargetDown(TargetDown):
    """A step's target could not be started or reached: the sweep stops (exit 3)."""


class SweepInterrupted(MrtrHarnessError):
    """Ctrl-C or SIGTERM during a step: the sweep stops with what it has."""


@dataclass
class StepResult:
    """One step: a replica count at an arrival rate, and what its steady window showed."""

    replicas: int
    rate: float
    folder: Path
    exit_code: int
    status: str
    judgement: Judgement | None
    reasons: list[str] = field(default_factory=list)
    window: float = 0.0
    offered: float | None = None
    throughput: float | None = None
    completion: float | None = None
    latency_p50: float | None = None
    latency_p95: float | None = None
    rounds_per_call: dict[str, float | None] = field(default_factory=dict)
    rejections: dict[str, int] = field(default_factory=dict)
    thresholds: list[dict[str, Any]] = field(default_factory=list)
    harness_cores: float | None = None
    late_share: float | None = None
    flows: int = 0
    flows_by_worker: dict[str, int] = field(default_factory=dict)  # flows started by each load process, `w0`, ...
    expiry: ExpiryMeasurement = NONE
    wall_seconds: float = 0.0
    expiry_predicted_with_latency: float | None = None
    other_cores: float | None = None  # the machine's CPU used by processes other than the harness and its target
    trend: tuple[float | None, float | None] = (None, None)  # p95 round latency, first and second half

    @property
    def still_rising(self) -> bool:
        """Latency still climbing at the end of the window: a queue building slower than the step is long."""
        first, second = self.trend
        return first is not None and second is not None and second > RISING * first and second > RISING_FLOOR

    @property
    def generator_saturated(self) -> bool:
        return self.judgement is Judgement.SATURATED

    def as_dict(self, root: Path | None = None) -> dict[str, Any]:
        folder = self.folder.relative_to(root) if root is not None and self.folder.is_relative_to(root) \
            else self.folder
        return {"replicas": self.replicas, "rate": self.rate, "folder": str(folder), "exit_code": self.exit_code,
                "status": self.status, "judgement": self.judgement.value if self.judgement else None,
                "generator_saturated": self.generator_saturated, "reasons": self.reasons,
                "window_seconds": _r(self.window), "offered_rate": _r(self.offered),
                "throughput": _r(self.throughput), "completion_share": _r(self.completion),
                "round_latency_p50": _r(self.latency_p50, 6), "round_latency_p95": _r(self.latency_p95, 6),
                "rounds_per_call": self.rounds_per_call, "rejections_by_reason": self.rejections,
                "thresholds": self.thresholds, "harness_cpu_cores": _r(self.harness_cores),
                "late_start_share": _r(self.late_share), "flows": self.flows,
                "flows_by_worker": self.flows_by_worker,
                "expiry": {**self.expiry.as_dict(),
                           "predicted_share_with_latency": _r(self.expiry_predicted_with_latency, 4)},
                "wall_seconds": _r(self.wall_seconds, 1), "other_load_cores": _r(self.other_cores),
                "latency_p95_by_half": [_r(value, 6) for value in self.trend], "still_rising": self.still_rising}


@dataclass
class SweepResult:
    """Every step of the sweep, the limit per replica count, and think time against TTL."""

    scenario: Scenario
    plan: CapacityPlan
    folder: Path
    started: float
    replicas: list[int]
    steps: list[StepResult] = field(default_factory=list)
    limits: dict[int, Limit] = field(default_factory=dict)
    status: str = "completed"  # completed | interrupted | target-error
    error: str | None = None
    expiry: ExpiryAssessment | None = None
    finished: float | None = None

    def step_at(self, replicas: int, rate: float | None) -> StepResult | None:
        return next((step for step in self.steps if step.replicas == replicas and step.rate == rate), None)


def analyse_step(folder: Path, scenario: Scenario, plan: CapacityPlan, replicas: int, rate: float,
                 exit_code: int) -> StepResult:
    """Judge one finished step from its results folder (summary.json and journal)."""
    summary = _read_summary(folder)
    parts = [Path(p) for p in (summary.get("journal") or {}).get("parts", [])] or [folder / "journal.jsonl"]
    records = [record for record in read_journal(*[p for p in parts if part_exists(p)]) if isinstance(record, dict)]
    step = StepResult(replicas, rate, folder, exit_code, str(summary.get("status") or "unknown"), None)
    step.expiry = measure(records)
    step.expiry_predicted_with_latency = step.expiry.predicted_with_latency(scenario.leads.think, scenario.target.ttl,
                                                                           scenario.time_scale)
    step.rejections = dict(sorted(Counter(r["reason"] for r in records
                                          if r.get("type") == RecordType.REJECTION and r.get("reason")).items()))
    starts = [r for r in records if r.get("type") == RecordType.START and r.get("t") is not None]
    step.flows = len(starts)
    step.flows_by_worker = dict(sorted(Counter(str(r.get("flow_id", "")).partition("-")[0] for r in starts).items()))
    run_events = {r.get("event"): r["t"] for r in records if r.get("type") == RecordType.RUN and r.get("t") is not None}
    if not starts:
        step.judgement = Judgement.BREAK
        step.reasons.append("no flow started")
        return step
    first = min(r["t"] for r in starts)
    stopped = run_events.get(RunEvent.LOAD_STOPPED) or max(r["t"] for r in records if r.get("t") is not None)
    warm = min(first + plan.warmup_for(scenario.load.ramp), stopped)
    step.window = max(stopped - warm, 1e-9)
    view = RunFigures.from_records_since(records, warm)
    view.duration = step.window
    _steady_figures(step, records, view, warm, stopped)
    _generator(step, summary, records, first, stopped, scenario, plan)
    verdicts = evaluate(parse_thresholds(scenario.expect), view)
    step.thresholds = [verdict.as_dict() for verdict in verdicts]
    step.reasons += [f"{v.threshold.key} {v.condition}: observed {_show(v.observed)}" for v in verdicts
                     if not v.passed]
    step.reasons += _check_failures(summary)
    if step.generator_saturated:
        return step
    step.judgement = Judgement.BREAK if step.reasons else Judgement.HOLD
    return step


def _steady_figures(step: StepResult, records: list[dict[str, Any]], view: RunFigures, warm: float,
                    stopped: float) -> None:
    """Offered rate, throughput, completion, latency and rounds per call over the steady window."""
    in_window = [r for r in records if r.get("t") is not None and warm <= r["t"] <= stopped]
    step.offered = sum(1 for r in in_window if r.get("type") == RecordType.START) / step.window
    step.throughput = sum(1 for r in in_window if r.get("type") == RecordType.FLOW
                          and r.get("outcome") == FlowOutcome.COMPLETED.value) / step.window
    step.completion = view.ratio("completed_ratio", {})
    latencies = view.distribution("round_duration", {})
    step.latency_p50, step.latency_p95 = latencies.percentile(50), latencies.percentile(95)
    middle = (warm + stopped) / 2
    rounds_in = [r for r in records if r.get("type") == RecordType.ROUND and r.get("latency") is not None
                 and r.get("t") is not None and r["t"] >= warm]
    halves = ([r["latency"] for r in rounds_in if r["t"] < middle],
              [r["latency"] for r in rounds_in if r["t"] >= middle])
    first, second = (percentile(sorted(half), 95) if half else None for half in halves)
    step.trend = (first, second)
    rounds = view.distribution("rounds_per_call", {})
    step.rounds_per_call = {"mean": round(rounds.total / rounds.count, 3) if rounds.count else None,
                            "p95": rounds.percentile(95), "max": rounds.maximum}


def _generator(step: StepResult, summary: dict[str, Any], records: list[dict[str, Any]], first: float,
               stopped: float, scenario: Scenario, plan: CapacityPlan) -> None:
    """The harness's CPU (cores) over the load window and its late starts; flag the step if either is too high.

    The run accounts its CPU from just before the load starts to when the flows in flight
    have ended (or the grace period ran out); the window here is the same span, from the
    first arrival to the last flow's end (or load stop + grace, when flows were cut off).
    """
    flows = [r for r in records if r.get("type") == RecordType.FLOW and r.get("t") is not None]
    cut_off = any(r.get("outcome") == FlowOutcome.INTERRUPTED.value for r in flows)
    end = stopped + scenario.grace if cut_off else max([stopped, *(r["t"] for r in flows)])
    cpu = (summary.get("extra") or {}).get("cpu") or {}
    seconds = cpu.get("harness_seconds")
    if seconds is not None and end > first:
        step.harness_cores = seconds / (end - first)
    starts = [r for r in records if r.get("type") == RecordType.START]
    step.late_share = sum(1 for r in starts if r.get("late")) / len(starts) if starts else 0.0
    if step.harness_cores is not None and step.harness_cores >= plan.saturation_cpu:
        step.reasons.append(f"generator saturated: the harness used {step.harness_cores:.2f} cores "
                            f"(limit {plan.saturation_cpu:g})")
        step.judgement = Judgement.SATURATED
    if step.late_share >= plan.saturation_late:
        step.reasons.append(f"generator saturated: {step.late_share:.1%} of flows started late "
                            f"(limit {plan.saturation_late:.0%})")
        step.judgement = Judgement.SATURATED


def _check_failures(summary: dict[str, Any]) -> list[str]:
    """The run's own correctness checks: a step that loses or doubles a refund does not hold, whatever its latency."""
    failures = [f"invariant {name}: {result.get('violations')} violations"
                for name, result in sorted((summary.get("invariants") or {}).items())
                if isinstance(result, dict) and result.get("passed") is False]
    reconciliation = summary.get("reconciliation") or {}
    if reconciliation.get("passed") is False:
        failures.append(f"{reconciliation.get('unexplained')} unexplained -32602 rejections")
    return failures


class Sweep:
    """Runs the plan's steps, replica count by replica count, into one capacity results folder."""

    def __init__(self, scenario: Scenario, scenario_text: str, plan: CapacityPlan, *, source: str = "<scenario>",
                 overrides: dict[str, Any] | None = None, results_root: Path = Path("results"),
                 master: dict[str, Any] | None = None, stream: IO[str] | None = None, quiet: bool = False) -> None:
        """`master`: the `RunOptions` of each step's Locust master (bind address, wait) when the plan has
        workers elsewhere; `stream` gets the estimate before the first step and, unless `quiet`, a line per step."""
        if scenario.load.model != "open" or scenario.load.arrival_rate is None:
            raise ValueError("a capacity sweep varies the arrival rate: the scenario must use the open model")
        self.scenario = scenario
        self.text = scenario_text
        self.source = source
        self.overrides = dict(overrides or {})
        self.plan = plan.with_default_search(scenario.load.arrival_rate)
        self.stream = stream if stream is not None else io.StringIO()
        self.quiet = quiet
        self.master = dict(master or {})
        embedded = scenario.target.kind == "embedded"
        self.scale = scenario.target.commands.get("scale")
        if self.plan.replicas is not None and not embedded and self.scale is None:
            raise ValueError("replica counts can be swept on a target the harness starts (kind = \"embedded\"), or "
                             "through a scale command ([target.commands] scale = [\"kubectl\", \"scale\", ...])")
        own = scenario.target.replicas if embedded else max(1, len(scenario.target.urls))
        self.replica_counts = self.plan.replicas or [own]
        self.embedded = embedded
        self.results_root = results_root
        self.folder: Path | None = None
        self.estimate = estimate(self.plan, len(self.replica_counts), scenario.grace, local_workers=self.plan.workers)

    def step_scenario(self, replicas: int, rate: float) -> Scenario:
        """One step's scenario; ScenarioError when an override does not fit (e.g. chaos on replica 3 of 2)."""
        overrides = {**self.overrides, "duration": self.plan.step, "load.arrival_rate": rate,
                     "name": f"{self.scenario.name}-r{replicas}-{rate:g}"}
        if self.embedded:
            overrides["target.replicas"] = replicas
        return parse_scenario(self.text, self.source, overrides)

    def check(self) -> None:
        """Validate every replica count's scenario before anything starts (ScenarioError on the first misfit)."""
        for replicas in self.replica_counts:
            first = self.plan.rates[0] if self.plan.rates else self.plan.search.start if self.plan.search else None
            assert first is not None, "a plan has rates or a search"
            self.step_scenario(replicas, first)

    def run(self, run_step: Callable[[Scenario, int, float], StepResult] | None = None) -> SweepResult:
        """Every replica count in turn; stops early (and says why) on Ctrl-C or a target that will not start."""
        run_step = run_step or self._run_step
        self.folder = capacity_folder(self.results_root, self.scenario.name)
        self.result = result = SweepResult(self.scenario, self.plan, self.folder, time.time(), self.replica_counts)
        self.stream.write(f"capacity sweep of {self.scenario.name}: results in {self.folder}\n"
                          f"{self.estimate.line()}{load_text(self.plan)}\n")
        self.stream.flush()
        previous: float | None = None
        try:
            for replicas in self.replica_counts:
                if self.scale is not None and self.plan.replicas is not None:
                    self._scale_to(replicas)

                def judge(rate: float, replicas: int = replicas) -> Judgement:
                    step = run_step(self.step_scenario(replicas, rate), replicas, rate)
                    if step.exit_code == ExitCode.TARGET:
                        step.status, step.judgement = "target-error", None
                    result.steps.append(step)
                    self._progress(step)
                    if step.exit_code == ExitCode.TARGET:
                        raise StepTargetDown(f"{replicas_text(replicas)} at {rate:g} flows/s: the target could not be "
                                         f"started or reached (see {step.folder / 'summary.json'})")
                    if step.status == "interrupted" or step.judgement is None:
                        raise SweepInterrupted(f"interrupted during {replicas_text(replicas)} at {rate:g} flows/s")
                    return step.judgement

                tried = self._climb(judge, previous)
                result.limits[replicas] = limit_of(tried)
                previous = result.limits[replicas].held or previous
        except StepTargetDown as exc:
            result.status, result.error = "target-error", str(exc)
        except (SweepInterrupted, KeyboardInterrupt) as exc:
            result.status, result.error = "interrupted", str(exc) or "interrupted"
        finally:
            for replicas in self.replica_counts:
                if replicas not in result.limits:
                    judged = [Tried(s.rate, s.judgement) for s in result.steps
                              if s.replicas == replicas and s.judgement is not None]
                    if judged:
                        result.limits[replicas] = limit_of(judged)
            result.expiry = self._expiry()
            result.finished = time.time()
        return result

    def _climb(self, judge: Callable[[float], Judgement], previous: float | None) -> list[Tried]:
        """The rates of one replica count: from the previous count's highest hold on, unless every rate is asked.

        More replicas are expected to hold what fewer held, so the rates below are not run
        again; the previous hold itself is, so a count that does worse still shows it.
        """
        plan = self.plan
        if plan.rates:
            rates = plan.rates
            if plan.from_previous and previous is not None:
                rates = [rate for rate in rates if rate >= previous] or rates
            return step_through(rates, judge)
        assert plan.search is not None
        start = plan.search
        if plan.from_previous and previous is not None and start.start < previous <= start.max:
            start = start.model_copy(update={"start": previous})
        return search(start, judge)

    def _run_step(self, scenario: Scenario, replicas: int, rate: float) -> StepResult:
        from harness.run.run import Run, RunOptions

        assert self.folder is not None
        started = time.time()
        with open_append(self.folder / "steps.log") as log:
            log.write(f"--- {replicas_text(replicas)} at {rate:g} flows/s\n")
            log.flush()
            options = RunOptions(results_root=self.folder / "steps", progress=False, stream=log,
                                 workers=self.plan.workers, remote_workers=self.plan.remote_workers, **self.master)
            run = Run(scenario, self.text, options)
            other_load = OtherLoad(lambda: run.target)
            other_load.start()
            try:
                code = run.execute()  # Ctrl-C stops the step; the sweep's own handlers are back once it returns
            finally:
                other_cores = other_load.stop()
        step = analyse_step(run.folder, scenario, self.plan, replicas, rate, code)
        if run.interrupted:
            step.status, step.judgement = "interrupted", None
        step.wall_seconds = time.time() - started
        step.other_cores = other_cores
        return step

    def _scale_to(self, replicas: int) -> None:
        """Run the scale command for this count (in steps.log); a failure stops the sweep like a dead target."""
        assert self.scale is not None and self.folder is not None
        spec = self.scenario.target
        result = run_command(fill(self.scale, {"replicas": str(replicas)}), timeout=spec.command_timeout,
                             env={"MRTR_RUN_ID": self.folder.name}, pass_env=spec.command_env)
        line = (f"scale to {replicas}: {' '.join(result.argv)} -> exit {result.exit_code} in {result.seconds:g} s"
                f"{': ' + result.error if result.error else ''}; output: {result.output or '(none)'}")
        with open_append(self.folder / "steps.log") as log:
            log.write(line + "\n")
        self.stream.write(f"scaled to {replicas_text(replicas)} (exit {result.exit_code}, {result.seconds:g} s)\n")
        if not result.ok:
            raise StepTargetDown(f"the scale command for {replicas_text(replicas)} failed: {line}")
        deadline = time.monotonic() + spec.ready_timeout
        waiting = list(spec.urls)
        while waiting and time.monotonic() < deadline:
            waiting = [url for url in waiting if not accepts(url, timeout=1.0)]
            if waiting:
                time.sleep(0.2)
        if waiting:
            raise StepTargetDown(f"after scaling to {replicas_text(replicas)}, {', '.join(waiting)} did not accept "
                             f"connections within {spec.ready_timeout:g} s")

    def _expiry(self) -> ExpiryAssessment:
        """Predicted from the lead model and the TTL; measured, pooled over the steps that held."""
        held = [step for step in self.result.steps if step.judgement is Judgement.HOLD]
        pooled = held or self.result.steps
        measured = sum((step.expiry for step in pooled), NONE)
        source = "steps that held" if held else ("every step (none held)" if pooled else "no step")
        overhead = max((step.latency_p95 or 0.0 for step in held), default=0.0)
        scenario = self.scenario
        return assess(scenario.leads.think, scenario.target.ttl, scenario.time_scale, self.plan.expiry_target,
                      measured, source, overhead)

    def _progress(self, step: StepResult) -> None:
        if self.quiet:
            return
        count = len(self.result.steps)
        of = f"/{'' if self.estimate.exact else '≤'}{self.estimate.steps}"
        judgement = step.judgement.value if step.judgement else step.status
        p95 = f"{step.latency_p95 * 1000:.0f}ms" if step.latency_p95 is not None else "-"
        done = f"{step.completion:.0%}" if step.completion is not None else "-"
        cpu = f"{step.harness_cores:.0%}" if step.harness_cores is not None else "-"
        others = f"  other load {step.other_cores:.1f} cores" if step.other_cores is not None else ""
        left = self.estimate.left(count, sum(s.wall_seconds for s in self.result.steps))
        left = f"; {left}" if left else ""
        self.stream.write(f"[{count}{of}] {replicas_text(step.replicas)} at {step.rate:g} flows/s: {judgement:9}  "
                          f"p95 {p95}  completed {done}  throughput {step.throughput or 0:.1f}/s  "
                          f"harness CPU {cpu} of a core{others}  ({step.wall_seconds:.0f} s{left})\n")
        if step.judgement is not Judgement.HOLD and step.reasons:
            self.stream.write("      " + "; ".join(step.reasons[:3]) + "\n")
        self.stream.flush()


def capacity_folder(root: Path, name: str) -> Path:
    """`<root>/<utc>-capacity-<scenario>`, with a `steps/` folder for each step's own run."""
    folder = results_folder(root, f"capacity-{name}")
    (folder / "steps").mkdir()
    return folder


def load_text(plan: CapacityPlan) -> str:
    """Where each step's load comes from, after the estimate: nothing when from the sweep's own process."""
    local = f"{plan.workers} local worker{'s' * (plan.workers != 1)}" if plan.workers else ""
    remote = f"{plan.remote_workers} worker{'s' * (plan.remote_workers != 1)} elsewhere" if plan.remote_workers \
        else ""
    spread = " and ".join(part for part in (local, remote) if part)
    return f"; each step's load from {spread}" if spread else ""


def replicas_text(count: int) -> str:
    """`1 replica`, `2 replicas`."""
    return f"{count} replica{'s' * (count != 1)}"


def _read_summary(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _show(value: float | None) -> str:
    return "nothing" if value is None else f"{value:.4g}"


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
