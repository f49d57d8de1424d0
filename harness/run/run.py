"""`mrtr-harness run`: one scenario, from target up to verdict, with results written as it goes.

The order of one run: target up -> log collector and metrics endpoint -> Locust load
with leads -> chaos on schedule -> load stops, flows in flight get a grace period and the
rest are journaled as interrupted -> rejections matched to logged reasons -> ledger
invariants -> chaos rolled back -> target down -> results and exit code. Every step
leaves its trace in the journal as it happens, so a run killed at any point leaves a
folder `mrtr-harness report` can rebuild; Ctrl-C and SIGTERM stop the load at once, but
rollback, teardown and results still happen. An unexpected error anywhere is the
harness's own failure (exit 4), never the target's: the teardown still runs, step by
step, and the results are still written.

Whatever a step starts goes down through an `ExitStack`, in the reverse of the order it
came up, whatever failed. There are two lifetimes: the target's side (target, log
collector, fault proxies, chaos rollback) is down before the run's end is journaled; the
run's side (signal handlers, live fold, metrics endpoint, web UI) outlasts the results,
which the endpoint and the web UI keep serving for their linger.

What each step needs lives in its own module: the target factory (`harness.targets`, whose
target supplies its ledger check), the load and when it ends
(`harness.run.load`), the exporter (`harness.metrics.exporter`), CPU accounting
(`harness.run.cpu`), the live fold (`harness.run.live_fold.worker`, a process of its own, driven from
`harness.run.live_fold.client`), the hypothesis windows (`harness.run.hypothesis`), the
progress line (`harness.run.progress`), early stops (`harness.run.stopping`), harness
errors (`harness.run.failures`) and the results (`harness.run.results`). This module is
the order.

Import it only after Locust's gevent patching (the CLI imports `locust` first).
"""

from __future__ import annotations

import gc
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import gevent
from locust.env import Environment

from harness.atomic_files import write_atomically
from harness.chaos.proxy import FaultProxies
from harness.chaos.schedule import ChaosRunner
from harness.config.cautions import cautions
from harness.config.chaos import NetworkAction
from harness.config.disk import disk_caution
from harness.config.durations import format_duration
from harness.config.scenario import Scenario
from harness.errors import ExitCode, TargetDown
from harness.folding.invariants import INVARIANTS
from harness.journal.records import (
    ColdStarted,
    EndStatus,
    LoadStarted,
    LoadStopped,
    LogsLost,
    LogsRead,
    RecordType,
    RejectionLogged,
    RunEnded,
    RunEvent,
    RunStarted,
    UnaskedLogged,
)
from harness.load.drivers import DistributedLoad, LocalLoad, WorkerLost
from harness.logs.adapters import AdapterError, adapter_named
from harness.logs.collector import Collector, LostSource, RejectionEvent
from harness.logs.parse import MISSING_CAPABILITY
from harness.metrics.exporter import MetricsExporter
from harness.metrics.registry import RunMetrics
from harness.run import cpu, health
from harness.run.end_checks import check_invariants, reconcile
from harness.run.failures import Failures, background, stop_greenlets
from harness.run.hypothesis import EVERY as HYPOTHESIS_EVERY
from harness.run.hypothesis import HypothesisWindows
from harness.run.live_fold.client import FoldLost, journal_and_fold
from harness.run.live_fold.protocol import ReplicaRounds
from harness.run.load import LoadEnd, load_driver, new_environment
from harness.run.options import RunOptions
from harness.run.progress import LiveProgress, ProgressLine
from harness.run.results import write_run_results
from harness.run.results_folder import results_folder
from harness.run.stopping import Stop
from harness.secrets import scrub
from harness.targets.factory import build_target
from harness.targets.interface import Target, TargetError
from harness.targets.ledger_check import NewDoubles
from harness.telemetry import switch

if TYPE_CHECKING:
    from harness.mrtr.stdio import ColdStart
    from harness.targets.stdio import StdioTarget
    from harness.telemetry.registry_metrics import RegistryExport
    from harness.telemetry.run_span import RunSpans

__all__ = ["Run", "RunOptions"]

WATCH_EVERY = 1.0
"""Seconds between checks of the replicas (up or not) and of the chaos window's hypothesis."""


def _collect_from_now_on() -> None:
    """The cyclic garbage collector runs again from the load's start, with what start-up made frozen out of its way.

    `mrtr-harness run` turns it off before its imports (start-up makes many long-lived
    objects and little garbage); frozen, they are never walked again by the load's
    collections. Only then: a run started another way (a capacity sweep runs several in one
    process) keeps its collector as it is, or a freeze would keep an earlier run's garbage.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


class Run:
    """One execution of a scenario; `execute()` returns the process exit code."""

    def __init__(self, scenario: Scenario, scenario_text: str, options: RunOptions) -> None:
        self.began = time.time()
        """When the harness began: log lines stamped before it are history, not this run's."""
        self.scenario, self.options = scenario, options
        self.folder = results_folder(options.results_root, scenario.name)
        write_atomically(self.folder / "scenario.toml", scenario_text)
        write_atomically(self.folder / "scenario.json", scenario.model_dump_json(indent=2))
        self.journal, self.fold = journal_and_fold(self.folder, options.save_figures_every)
        """Every journal record, the workers' too, folded as it is written, in a process of its own: the results,
        the checks and the hypothesis windows come from it, not from a re-read of the journal."""
        self.run_metrics = RunMetrics(flows=[flow.label() for flow in scenario.flows])
        self.run_metrics.preset(actions={step.action for step in scenario.chaos}, invariants=INVARIANTS,
                                hosts=[host.name for host in scenario.host_list])
        self.progress = ProgressLine(options.stream, enabled=options.progress)
        self.stop = Stop()
        self.failures = Failures(self.folder, self.journal, self.stop, self.say)
        self.windows = HypothesisWindows(scenario.hypothesis, scenario.hypothesis_unjudged, self.journal, self.fold,
                                         self.failures)
        self.target: Target | None = None
        self.collector: Collector | None = None
        self.env: Environment | None = None
        self.load: LocalLoad | DistributedLoad | None = None
        self.proxies: FaultProxies | None = None
        """The fault proxies the load talks to, when the scenario has a network fault."""
        self.new_doubles: NewDoubles | None = None
        """With `abort_on_violation` and a ledger: the live check for a refund released or paid twice."""
        self.started = 0.0
        """Time zero: when the load started (workers take a while to be ready)."""
        self.load_ended: float | None = None
        """When the load's last flow ended (or was journaled as interrupted): the "after" window's end."""
        self.cpu_start: cpu.CpuSnapshot | None = None
        self.cpu_end: cpu.CpuSnapshot | None = None
        self.target_error: str | None = None
        self.spans = self._run_spans() if switch.tracing_on() else None
        """The run's own trace (the run span, a child per chaos action), when spans are exported."""
        self.registry_export = self._registry_export() if switch.metrics_on() else None
        """The run's Prometheus counters and gauges also over OTLP, when metrics are exported."""

    def _registry_export(self) -> RegistryExport:
        from harness.telemetry.registry_metrics import RegistryExport

        return RegistryExport(self.run_metrics.registry, self.folder.name)

    def _run_spans(self) -> RunSpans:
        from harness.telemetry.run_span import RunSpans

        return RunSpans(self.folder.name, self.scenario.name, self.scenario.seed, self.began)

    @property
    def interrupted(self) -> bool:
        return self.stop.interrupted

    # --- the whole run -----------------------------------------------------------------------

    def execute(self) -> int:
        """The whole run. Until it returns, Ctrl-C and SIGTERM stop the load (results are still written);
        then the handlers the caller had are back."""
        try:
            self.adapter = adapter_named(self.scenario.target.log_adapter)  # refused before anything starts
        except AdapterError as exc:
            self.say(f"[target] log_adapter: {exc}")
            return ExitCode.USAGE
        self.began = time.time()
        try:
            with ExitStack() as run_side:
                run_side.enter_context(self.stop.on_signals())
                self._begin()
                run_side.callback(self.fold.close)
                with ExitStack() as target_side:
                    try:
                        self.fold.start()  # the records before it are read all the same: each size told is the whole
                        target = self._bring_up(run_side, target_side)
                        self._drive(target, run_side, target_side)
                    except TargetDown as exc:  # the target, or a token endpoint it needs (harness.auth)
                        self.target_error = str(exc)
                        self.say(f"target could not be started or reached: {exc}")
                    except (Exception, gevent.Timeout) as exc:  # noqa: BLE001 - whatever it was, it is the harness's
                        self.failures.record(exc)
                    self._after_load()
                self._end_journal()
                return write_run_results(self.folder, self.scenario, env=self.env, run_metrics=self.run_metrics,
                                         fold=self.fold, parts=self._journal_parts(),
                                         failed=self.failures.error is not None, stream=self.options.stream,
                                         say=self.say, judged=self.options.judged)
        except Exception as exc:  # noqa: BLE001 - the results themselves failed: still one line and exit 4
            self.failures.record(exc)
            self.say(f"results could not be written: see {self.folder}")
            return ExitCode.HARNESS

    def _begin(self) -> None:
        self.journal.write(RunStarted(type=RecordType.RUN, event=RunEvent.START, t=self.began, run_id=self.folder.name,
                                      scenario=self.scenario.name, seed=self.scenario.seed,
                                      duration=self.scenario.duration, judged=self.options.judged.value))
        self.say(f"results: {self.folder}")
        for caution in [*cautions(self.scenario), disk_caution(self.scenario, self.folder)]:
            if caution is not None:
                self.say(f"warning: {caution}")

    def _bring_up(self, run_side: ExitStack, target_side: ExitStack) -> Target:
        target = self.target = build_target(self.scenario, self.folder / "target")
        stdio = _stdio_of(target)
        if stdio is not None:
            stdio.on_cold_start(self._journal_cold_start)
        self.say(f"starting the {self.scenario.target.kind} target ...")
        target_side.callback(self.failures.step, target.stop)  # a target half started is stopped too
        target.start()
        self.run_metrics.preset(replicas=target.labels)
        collector = self.collector = Collector(self._on_rejection, since=self.began, on_lost=self._on_logs_lost,
                                               adapter=self.adapter)
        target_side.callback(self.failures.step, collector.stop)
        for source in target.log_sources():
            collector.follow(source)
        if self.options.metrics_port is not None:
            self._serve_metrics(self.options.metrics_port, target, run_side)
        ledger = target.ledger_check()
        if self.scenario.abort_on_violation and ledger is not None:
            self.new_doubles = NewDoubles(ledger)
            self.new_doubles.mark()
        self.say(f"target up: {', '.join(target.urls)}")
        if any(isinstance(step, NetworkAction) for step in self.scenario.chaos):
            self._start_proxies(target, target_side)
        return target

    def _journal_cold_start(self, cold: ColdStart) -> None:
        """A server process's cold start, journaled as it happens (a stdio target's; its figure: `cold_start`)."""
        self.journal.write(ColdStarted(type=RecordType.COLD_START, t=cold.at, replica=cold.label, pid=cold.pid,
                                       seconds=round(cold.seconds, 6)))

    def _serve_metrics(self, port: int, target: Target, run_side: ExitStack) -> None:
        """`/metrics`, serving the final counts for `--metrics-linger` after the results."""
        exporter = MetricsExporter(self.run_metrics.registry, port=port,
                                   host=self.options.metrics_host, targets_folder=self.options.prometheus_targets,
                                   run_id=self.folder.name)
        run_side.callback(exporter.close)
        run_side.callback(exporter.linger, self.options.metrics_linger, gevent.sleep, self.say)
        stdio = _stdio_of(target) is not None  # a stdio server has no /metrics for Prometheus to scrape
        exporter.start([] if stdio else target.urls, [] if stdio else target.labels)

    def _start_proxies(self, target: Target, target_side: ExitStack) -> None:
        """A fault proxy in front of each replica, in this process's own loop: the load talks to them."""
        try:
            proxies = self.proxies = FaultProxies(target.urls, target.labels)
        except ValueError as exc:
            raise TargetError(str(exc)) from None
        target_side.callback(self.failures.step, proxies.close)
        proxies.start()
        self.say(f"network faults through proxies: {proxies.describe()}")

    def _drive(self, target: Target, run_side: ExitStack, target_side: ExitStack) -> None:
        env = self.env = new_environment()
        load = self.load = load_driver(env, self.scenario, self.options, target_urls=target.urls,
                                       urls=self.proxies.urls if self.proxies is not None else target.urls,
                                       labels=target.labels, journal=self.journal, run_metrics=self.run_metrics,
                                       folder=self.folder, grown=self.fold.grown, say=self.say,
                                       stdio=stdio.servers if (stdio := _stdio_of(target)) is not None else None)
        _collect_from_now_on()
        self.cpu_start = self._cpu_snapshot(target)
        load.start()
        try:
            self.started = self.windows.started = time.time()  # the duration counts from when the load runs
            self._serve_web_ui(env, run_side)
            self.journal.write(LoadStarted(type=RecordType.RUN, event=RunEvent.LOAD_STARTED, t=self.started))
            chaos = ChaosRunner(self.scenario, target, self.journal, self.run_metrics, sleep=gevent.sleep,
                                run_id=self.folder.name, proxies=self.proxies, spans=self.spans)
            target_side.callback(self.failures.step, self._roll_back, chaos)
            self._load_until_done(target, load, chaos)
        finally:  # the flows in flight are accounted for whatever else failed
            interrupted = load.quit()
            self.load_ended = time.time()
            if interrupted:
                self.say(f"{interrupted} flows still in flight: journaled as interrupted")

    def _load_until_done(self, target: Target, load: LocalLoad | DistributedLoad, chaos: ChaosRunner) -> None:
        """The load runs, the chaos on schedule, until the clock or an early stop ends it; then it stops."""
        end = LoadEnd(self.scenario, self.started, self.journal, self.say)
        progress = LiveProgress(self.scenario.load, self.scenario.duration, self.started, self.fold, self.failures,
                                load, chaos)
        scheduled = background(self._chaos_loop, chaos, failed=self.failures.record)
        greenlets = [scheduled, background(self._watch, target, failed=self.failures.record),
                     background(health.sample_every, target, self.journal, gevent.sleep, failed=self.failures.record),
                     background(self.progress.follow, progress, gevent.sleep, failed=self.failures.record)]
        try:
            while self.stop.reason is None and not end.reached(scheduled.dead, chaos):
                # Asleep until the clock can end the load, the chaos schedule ends, or the run stops early:
                # no wake-ups in between (a run's fixed cost per second, benchmarks/idle_cost.py).
                gevent.wait([self.stop.event, *([] if scheduled.dead else [scheduled])], timeout=end.seconds_left(),
                            count=1)
            self._stop_load(target, load, end.stopped_because)
        finally:
            stop_greenlets(greenlets)

    def _stop_load(self, target: Target, load: LocalLoad | DistributedLoad, because: str) -> None:
        """No new flows; those in flight get the grace period (none after Ctrl-C)."""
        load.stop_accepting()
        self.journal.write(LoadStopped(type=RecordType.RUN, event=RunEvent.LOAD_STOPPED, t=time.time(),
                                       reason=self.stop.reason or because))
        grace = 0.0 if self.stop.interrupted else self.scenario.grace
        if grace:
            self.say(f"load stopped; waiting up to {format_duration(grace)} for {load.active} flows in flight")
        load.wait_in_flight(grace)
        self.cpu_end = self._cpu_snapshot(target)
        with self.failures.recorded(Exception):
            health.sample(target, self.journal)  # the series ends where the load did

    def _cpu_snapshot(self, target: Target) -> cpu.CpuSnapshot:
        """CPU so far, the harness's with its fold process's, and the rounds each replica served."""
        return cpu.snapshot(target.cpu_seconds, self.fold.ask(ReplicaRounds()), helpers=self.fold.cpu_seconds())

    def _serve_web_ui(self, env: Environment, run_side: ExitStack) -> None:
        """`--web`: Locust's web UI with the MRTR tab, from the load's start (the run is never waiting for a click);
        it keeps the final counts for `--web-linger` after the results."""
        if self.options.web is None:
            return
        from harness.run.page_guard import TOKEN_HEADER, PageGuard, control_token
        from harness.run.web import (
            CHARTS,
            LiveRun,
            StateSizeTable,
            WhileRunning,
            charts_so_far,
            flows_in_flight,
            mrtr_rows,
            serve_web_ui,
            state_sizes,
        )

        host, port = self.options.web

        def running() -> bool:  # the fold is asked only while the load runs
            return self.load_ended is None

        guard = PageGuard(control_token(), self.options.web_password, loopback=self.options.web_password is None)
        sizes: WhileRunning[StateSizeTable] = WhileRunning(lambda: state_sizes(self.fold), running, {})
        charts = WhileRunning(lambda: charts_so_far(self.fold, self.scenario), running, "<p>no charts yet</p>", 5.0)
        web_ui = serve_web_ui(env, host, port, LiveRun(
            rows=lambda: mrtr_rows(self.run_metrics, self.started, sizes()),
            in_flight=lambda: flows_in_flight(self.run_metrics), stop=self.stop.interrupt, charts=charts), guard)
        run_side.callback(web_ui.stop)
        if self.options.web_linger > 0:
            run_side.callback(gevent.sleep, self.options.web_linger)
            run_side.callback(self.say, f"web UI: the final counts stay up for "
                                        f"{format_duration(self.options.web_linger)}")
        self.say(f"web UI: http://{host}:{port}/?tab=mrtr (charts over time: http://{host}:{port}{CHARTS}); "
                 f"its STOP from a script: POST /stop with the header {TOKEN_HEADER}: {guard.token}")

    # --- background greenlets ----------------------------------------------------------------

    def _chaos_loop(self, chaos: ChaosRunner) -> None:
        steps = chaos.pending
        if not steps:
            return
        try:
            self.stop.wait_until(self.started + steps[0].at)
            self.windows.probe_before()
            self.windows.chaos_began()
            chaos.run_schedule(self.started, lambda: self.stop.reason is not None, wait=self.stop.event.wait)
        finally:  # ended by its schedule, an abort, or the kill at the end of the run
            self.windows.chaos_ended()
            if chaos.skip_pending():
                self.say("chaos steps not run: the run ended first (see chaos_overrun)")
        self.windows.probe_chaos_end()  # not when killed: the wind-down probes the closed window then

    def _watch(self, target: Target) -> None:
        """Replicas up, the live fold and every Locust worker alive, the steady-state hypothesis during chaos, and the
        live double-payment check."""
        last_check = time.time()
        while True:
            gevent.sleep(WATCH_EVERY)
            self.run_metrics.replicas_up.set(target.replicas_up())
            with self.failures.recorded(FoldLost):
                self.fold.check()
            if self.load is not None:
                with self.failures.recorded(WorkerLost):  # the harness's failure, never the target's
                    self.load.check()
            if time.time() - last_check < HYPOTHESIS_EVERY:
                continue
            last_check = time.time()
            self.windows.probe_during()
            if self.new_doubles is not None and self.new_doubles.grew():
                self.stop.reason = "a refund was released or paid twice"  # the verdict says "aborted: " before it
                self.say(f"aborted: {self.stop.reason}")

    def _on_rejection(self, event: RejectionEvent) -> None:
        if event.code == MISSING_CAPABILITY:  # a -32021 line: no refused requestState, and no rejection metric
            unasked = UnaskedLogged(type=RecordType.UNASKED, t=event.t, replica=event.replica, method=event.method)
            if event.capability:
                unasked["capability"] = event.capability
            self.journal.write(unasked)
            return
        record = RejectionLogged(type=RecordType.REJECTION, t=event.t, replica=event.replica, reason=event.reason,
                                 method=event.method)
        if event.trace_id is not None:
            record["trace_id"] = event.trace_id
        self.journal.write(record)
        self.run_metrics.rejection(event.replica, event.reason)

    def _on_logs_lost(self, lost: LostSource) -> None:
        """A log source ended before the run: its replica is unobserved from now on, said and journaled."""
        why = scrub(lost.why)
        self.journal.write(LogsLost(type=RecordType.RUN, event=RunEvent.LOGS_LOST, t=lost.t, replica=lost.replica,
                                    source=scrub(lost.source), why=why))
        self.say(f"warning: the log of {lost.replica} is unobserved from now on ({why}): its rejections from here "
                 "are not judged")

    # --- after the load ----------------------------------------------------------------------

    def _after_load(self) -> None:
        """The checks, before the target side goes down: every step runs, whatever failed before it."""
        self.progress.end()
        for step in (self._stop_collector, self._reconcile, self._account_cpu, self._check_invariants):
            self.failures.step(step)
        self.failures.step(self.windows.probe_after, self.load_ended)

    def _end_journal(self) -> None:
        self.failures.step(self.fold.check)
        ended, status = time.time(), self._status()
        self.journal.write(RunEnded(type=RecordType.RUN, event=RunEvent.END, t=ended, status=status,
                                    reason=self.failures.error or self.stop.reason, target_error=self.target_error))
        self.journal.close()
        if self.spans is not None:
            self.failures.step(self.spans.close, ended, status.value, self.failures.error)
        if self.registry_export is not None:  # the final counts, as the run ended
            self.failures.step(self.registry_export.close)

    def _status(self) -> EndStatus:
        if self.failures.error is not None:
            return EndStatus.ERRORED
        if self.stop.interrupted:
            return EndStatus.INTERRUPTED
        if self.stop.reason or self.target_error:
            return EndStatus.ABORTED
        return EndStatus.COMPLETED

    def _stop_collector(self) -> None:
        """What the logs still hold is read (a settle for writes in flight) before the reconciliation."""
        if self.collector is not None:
            self.collector.stop(settle=0.5)
            self.journal.write(LogsRead(type=RecordType.RUN, event=RunEvent.LOGS, t=time.time(), sources=[
                {**asdict(read), "source": scrub(read.source), "why": scrub(read.why) if read.why else None}
                for read in self.collector.sources()]))

    def _reconcile(self) -> None:
        if self.collector is not None and self.target is not None:
            reconcile(self.fold, self.target.labels, self.journal, self.run_metrics, self.spans)

    def _account_cpu(self) -> None:
        if self.cpu_start is not None and self.cpu_end is not None:
            self.journal.write(cpu.account(self.cpu_start, self.cpu_end))

    def _check_invariants(self) -> None:
        if self.target is not None:
            check_invariants(self.fold, self.target.ledger_check(), self.journal, self.run_metrics)

    def _roll_back(self, chaos: ChaosRunner) -> None:
        undone = chaos.rollback()
        if undone:
            self.say("rolled back: " + "; ".join(undone))

    def _journal_parts(self) -> list[Path]:
        return [self.journal.path, *(self.load.journal_parts() if self.load is not None else [])]

    def say(self, message: str) -> None:
        self.progress.say(message)



def _stdio_of(target: Target) -> StdioTarget | None:
    """The target as a stdio target, when it is one: its module (and the SDK's client) is imported only when the
    factory built one, so another run does not load it."""
    if "harness.targets.stdio" not in sys.modules:
        return None
    from harness.targets.stdio import StdioTarget

    return target if isinstance(target, StdioTarget) else None
