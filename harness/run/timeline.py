"""`mrtr-harness run`: one scenario, from target up to verdict, with results written as it goes.

The timeline of one run: target up -> log collector and metrics endpoint -> Locust load
with leads -> chaos on schedule -> load stops, flows in flight get a grace period and the
rest are journaled as interrupted -> rejections matched to logged reasons -> ledger
invariants -> chaos rolled back -> target down -> results and exit code. Every step
leaves its trace in the journal as it happens, so a run killed at any point leaves a
folder `mrtr-harness report` can rebuild; Ctrl-C and SIGTERM stop the load at once, but
rollback, teardown and results still happen. An unexpected error anywhere is the
harness's own failure (exit 4), never the target's: the teardown still runs, step by
step, and the results are still written.

What each step needs lives in its own module: the target factory (`harness.targets`),
the client stack (`harness.load.client_stack`), the exporter (`harness.metrics.exporter`),
CPU accounting (`harness.run.cpu`), the live fold of the journal into the figures, the checks and
reconciliation (`harness.run.fold.worker`, a process of its own, driven from `harness.run.fold.client`),
the hypothesis (`harness.run.hypothesis`), the progress line (`harness.run.progress`). This module
is the order.

Import it only after Locust's gevent patching (the CLI imports `locust` first).
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

import gevent
from gevent.event import Event
from locust.env import Environment
from locust.event import Events
from locust.stats import save_stats_json
from prometheus_client import generate_latest

from harness.chaos.proxy import FaultProxies
from harness.chaos.schedule import ChaosRunner
from harness.config.cautions import cautions
from harness.config.chaos import NetworkAction
from harness.config.durations import format_duration
from harness.config.flows import flow_label
from harness.config.scenario import Scenario
from harness.config.thresholds import parse_thresholds
from harness.errors import ExitCode, TargetDown
from harness.folding.invariants import INVARIANTS, ledger_violations
from harness.journal.records import (
    EndStatus,
    HarnessErrorRecord,
    InvariantChecked,
    LoadExtended,
    LoadStarted,
    LoadStopped,
    RecordType,
    RejectionLogged,
    RunEnded,
    RunEvent,
    RunStarted,
)
from harness.journal.writer import Journal
from harness.load.client_stack import build_flow_env
from harness.load.drivers import DistributedLoad, LocalLoad
from harness.load.plan import LoadPlan
from harness.logs.collector import Collector, RejectionEvent
from harness.metrics.exporter import MetricsExporter
from harness.metrics.registry import RunMetrics
from harness.run import cpu
from harness.run.fold.client import FoldLost, FoldProcess
from harness.run.fold.protocol import (
    Figures,
    Invariants,
    OpenWindow,
    ProgressCounts,
    Reconcile,
    ReplicaRounds,
    WindowFigures,
)
from harness.run.hypothesis import EVERY as HYPOTHESIS_EVERY
from harness.run.hypothesis import SteadyState, Window
from harness.run.progress import Progress, ProgressLine
from harness.run.results_folder import results_folder
from harness.secrets import scrub
from harness.targets.base import Target, TargetError
from harness.targets.factory import build_target

if TYPE_CHECKING:
    from harness.folding.read import JournalRead

logger = logging.getLogger(__name__)

WATCH_EVERY = 1.0
"""Seconds between checks of the replicas (up or not) and of the chaos window's hypothesis."""
BACKGROUND_STOP_TIMEOUT = 30.0
"""Seconds the run's own greenlets (chaos, watch, progress) get to stop; longer means an overloaded process."""

TRACEBACK_FILE = "harness-error.txt"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass
class RunOptions:
    results_root: Path = Path("results")
    progress: bool = True
    workers: int = 0  # Locust workers this run starts on this machine
    remote_workers: int = 0  # Locust workers started elsewhere (`mrtr-harness worker --master-host ...`)
    master_bind_host: str = "127.0.0.1"
    master_bind_port: int | None = None
    workers_wait: float = 60.0  # how long the master waits for every worker to be ready
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_linger: float = 0.0
    web: tuple[str, int] | None = None  # serve Locust's web UI, with the MRTR tab, here
    web_linger: float = 0.0
    save_figures_every: float = 60.0  # seconds between saves of the live figures (by the fold process)
    prometheus_targets: Path | None = None
    stream: IO[str] = field(default_factory=lambda: sys.stderr)


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
        self.scenario = scenario
        self.options = options
        self.folder = results_folder(options.results_root, scenario.name)
        (self.folder / "scenario.toml").write_text(scenario_text)
        (self.folder / "scenario.json").write_text(scenario.model_dump_json(indent=2))
        self.fold = FoldProcess(self.folder, options.save_figures_every)
        """Every journal record, the workers' too, folded as it is written, in a process of its own: the results,
        the checks and the hypothesis windows come from it, not from a re-read of the journal."""
        self.journal = Journal(self.folder / "journal.jsonl", on_flush=self.fold.grown)
        self.fold.flush = self.journal.flush
        self.run_metrics = RunMetrics(flows=[flow_label(flow) for flow in scenario.flows])
        self.run_metrics.preset(actions={step.action for step in scenario.chaos}, invariants=INVARIANTS,
                                hosts=[host.name for host in scenario.host_list])
        self.steady_state = SteadyState(scenario.hypothesis, self.journal, scenario.hypothesis_unjudged)
        self.progress = ProgressLine(options.stream, enabled=options.progress)
        self.target: Target | None = None
        self.collector: Collector | None = None
        self.exporter: MetricsExporter | None = None
        self.web_ui: Any = None
        self.env: Environment | None = None
        self.load: LocalLoad | DistributedLoad | None = None
        self.chaos: ChaosRunner | None = None
        self.proxies: FaultProxies | None = None
        """The fault proxies the load talks to, when the scenario has a network fault."""
        self.started = 0.0
        """Time zero: when the load started (workers take a while to be ready)."""
        self.chaos_window: tuple[float | None, float | None] = (None, None)
        """The hypothesis windows, "during" the chaos and "after" it, are the fold's (opened when each begins)."""
        self._chaos_end_probed = False
        self.load_ended: float | None = None
        """When the load's last flow ended (or was journaled as interrupted): the "after" window's end."""
        self.cpu_start: cpu.CpuSnapshot | None = None
        self.cpu_end: cpu.CpuSnapshot | None = None
        self._stopping = Event()
        """Set with `stop_reason`: whatever waits for the load's end (or a chaos step's time) wakes at once."""
        self._stop_reason: str | None = None
        self.stopped_because = "duration"
        self.interrupted = False
        self.target_error: str | None = None
        self.error: str | None = None
        """The harness's own first failure, in one line (exit 4); its traceback is in TRACEBACK_FILE."""
        self._progress_counts: tuple[int, list[tuple[str, int]]] = (0, [])
        """Flows finished and the top rejection reasons, as the fold last said (the progress line's)."""
        self.ledger_before: int | None = None
        """Double releases and payouts the ledger held when the live check first read it (another run's)."""
        self._overrun_said = False
        self._previous_handlers: dict[signal.Signals, Any] = {}

    @property
    def stop_reason(self) -> str | None:
        """Set when the run stops early (an abort, a signal, a harness error): the load stops at once."""
        return self._stop_reason

    @stop_reason.setter
    def stop_reason(self, reason: str | None) -> None:
        self._stop_reason = reason
        if reason is not None:
            self._stopping.set()

    # --- the whole run -----------------------------------------------------------------------

    def execute(self) -> int:
        """The whole run. Until it returns, Ctrl-C and SIGTERM stop the load (results are still written);
        then the handlers the caller had are back."""
        self.began = time.time()
        self._install_signals()
        try:
            self.journal.write(RunStarted(type=RecordType.RUN, event=RunEvent.START, t=self.began,
                                          run_id=self.folder.name, scenario=self.scenario.name,
                                          seed=self.scenario.seed, duration=self.scenario.duration))
            self.say(f"results: {self.folder}")
            for caution in cautions(self.scenario):
                self.say(f"warning: {caution}")
            try:
                self.fold.start()  # the records before it are read all the same: each size it is told is the whole
                self._bring_up()
                self._drive()
            except TargetDown as exc:  # the target, or a token endpoint it needs (harness.auth)
                self.target_error = str(exc)
                self.say(f"target could not be started or reached: {exc}")
            except (Exception, gevent.Timeout) as exc:  # noqa: BLE001 - whatever it was, it is the harness's: exit 4
                self._harness_failed(exc)
            finally:
                self._wind_down()
            return self._results()
        except Exception as exc:  # noqa: BLE001 - the results themselves failed: still one line and exit 4
            self._harness_failed(exc)
            self.say(f"results could not be written: see {self.folder}")
            return ExitCode.HARNESS
        finally:
            self.fold.close()
            self._restore_signals()

    def _bring_up(self) -> None:
        self.target = build_target(self.scenario, self.folder / "target")
        self.say(f"starting the {self.scenario.target.kind} target ...")
        self.target.start()
        self.run_metrics.preset(replicas=self.target.labels)
        self.collector = Collector(self._on_rejection, since=self.began)
        for source in self.target.log_sources():
            self.collector.follow(source)
        if self.options.metrics_port is not None:
            self.exporter = MetricsExporter(self.run_metrics.registry, port=self.options.metrics_port,
                                            host=self.options.metrics_host,
                                            targets_folder=self.options.prometheus_targets, run_id=self.folder.name)
            self.exporter.start(self.target.urls, self.target.labels)
        if self.scenario.abort_on_violation:
            ledger, _ = self._ledger()
            self.ledger_before = ledger_violations(ledger) if ledger is not None else None
        self.say(f"target up: {', '.join(self.target.urls)}")
        if any(isinstance(step, NetworkAction) for step in self.scenario.chaos):
            self._start_proxies(self.target)

    def _start_proxies(self, target: Target) -> None:
        """A fault proxy in front of each replica, in this process's own loop: the load talks to them."""
        try:
            self.proxies = FaultProxies(target.urls, target.labels)
        except ValueError as exc:
            raise TargetError(str(exc)) from None
        self.proxies.start()
        self.say(f"network faults through proxies: {self.proxies.describe()}")

    def _load_urls(self, target: Target) -> list[str]:
        """Where the load sends each replica's rounds: its proxy when there is one."""
        return self.proxies.urls if self.proxies is not None else list(target.urls)

    def _drive(self) -> None:
        assert self.target is not None
        self.load = self._load_driver(self.target)
        _collect_from_now_on()
        self.cpu_start = self._cpu_snapshot(self.target)
        self.load.start()
        self.started = time.time()  # the duration counts from when the load runs (workers take a while)
        self._serve_web_ui()
        self.journal.write(LoadStarted(type=RecordType.RUN, event=RunEvent.LOAD_STARTED, t=self.started))
        self.chaos = ChaosRunner(self.scenario, self.target, self.journal, self.run_metrics, sleep=gevent.sleep,
                                 run_id=self.folder.name, proxies=self.proxies)
        chaos = self._background(self._chaos_loop)
        background = [chaos, self._background(self._watch),
                      self._background(self.progress.follow, self._progress_now, gevent.sleep)]
        try:
            while self.stop_reason is None and not self._load_done(chaos):
                # Asleep until the clock can end the load, the chaos schedule ends, or the run stops early:
                # no wake-ups in between (a run's fixed cost per second, benchmarks/idle_cost.py).
                gevent.wait([self._stopping, *([] if chaos.dead else [chaos])], timeout=self._until_due(), count=1)
            self._stop_load(self.load)
        finally:
            try:
                _stop_greenlets(background, timeout=BACKGROUND_STOP_TIMEOUT)
            finally:  # the flows in flight are accounted for whatever else failed
                interrupted = self.load.quit()
                self.load_ended = time.time()
                if interrupted:
                    self.say(f"{interrupted} flows still in flight: journaled as interrupted")

    def _background(self, function: Callable[..., Any], *args: Any) -> gevent.Greenlet:
        """A greenlet of the run's own; if it dies of an error, that is a harness failure and the load stops."""
        greenlet = gevent.spawn(function, *args)
        greenlet.link_exception(lambda dead: self._harness_failed(dead.exception))
        return greenlet

    def _load_done(self, chaos: gevent.Greenlet) -> bool:
        """The load runs for `duration`, and on while the chaos schedule runs, at most `chaos_overrun` longer.

        A chaos step that starts late (a slow restart before it) must still be seen under
        load: stopping the load mid-rotation would pass a run that never tested it.
        """
        overrun = time.time() - self.started - self.scenario.duration
        if overrun < 0 or chaos.dead:
            return overrun >= 0
        if not self._overrun_said:
            self._overrun_said = True
            step = self.chaos.running if self.chaos is not None else None
            what = f"{step.action} (due at {format_duration(step.at)})" if step else "the chaos schedule"
            self.say(f"{what} still running at the end of the load: the load goes on until it ends, "
                     f"at most {format_duration(self.scenario.chaos_overrun)} more")
            self.journal.write(LoadExtended(type=RecordType.RUN, event=RunEvent.LOAD_EXTENDED, t=time.time(),
                                            reason="chaos still running", action=step.action if step else None))
        if overrun < self.scenario.chaos_overrun:
            return False
        self.stopped_because = "chaos_overrun reached with a chaos action still running"
        return True

    def _until_due(self) -> float:
        """Seconds until `_load_done` can next say yes by the clock: the end of `duration`, then of the overrun."""
        elapsed = time.time() - self.started
        due = self.scenario.duration
        if elapsed >= due:
            due += self.scenario.chaos_overrun
        return max(due - elapsed, 0.001)

    def _load_driver(self, target: Target) -> LocalLoad | DistributedLoad:
        self.env = Environment(events=Events())
        options = self.options
        auth_url = next(iter(target.urls), None)  # discovery asks the target itself, never a fault proxy before it
        if options.workers or options.remote_workers:
            self._warn_unreachable_replicas(target)
            return DistributedLoad(self.env, self.scenario, self.run_metrics, self.folder, self._load_urls(target),
                                   target.labels, self.fold.grown, before_append=self.journal.flush,
                                   local=options.workers,
                                   remote=options.remote_workers, bind_host=options.master_bind_host,
                                   bind_port=options.master_bind_port, wait=options.workers_wait, say=self.say,
                                   auth_url=auth_url)
        flow_env = build_flow_env(self.scenario, self._load_urls(target), target.labels, self.journal,
                                  self.run_metrics, fire_request=self.env.events.request.fire,
                                  auth_url=auth_url)
        return LocalLoad(self.env, LoadPlan(self.scenario, flow_env), time.time())

    def _warn_unreachable_replicas(self, target: Target) -> None:
        """Workers on other machines send rounds to the URLs the master has; loopback ones only work here."""
        if self.options.remote_workers and self.options.master_bind_host not in _LOOPBACK:
            local = [url for url in target.urls if urlsplit(url).hostname in _LOOPBACK]
            if local:
                logger.warning("workers on other machines cannot reach %s; give the target URLs they can reach "
                               "(`urls` of an external or docker target)", ", ".join(local))

    def _stop_load(self, load: LocalLoad | DistributedLoad) -> None:
        """No new flows; those in flight get the grace period (none after Ctrl-C)."""
        load.stop_accepting()
        self.journal.write(LoadStopped(type=RecordType.RUN, event=RunEvent.LOAD_STOPPED, t=time.time(),
                                       reason=self.stop_reason or self.stopped_because))
        grace = 0.0 if self.interrupted else self.scenario.grace
        if grace:
            self.say(f"load stopped; waiting up to {format_duration(grace)} for {load.active} flows in flight")
        load.wait_in_flight(grace)
        assert self.target is not None
        self.cpu_end = self._cpu_snapshot(self.target)

    def _cpu_snapshot(self, target: Target) -> cpu.CpuSnapshot:
        """CPU so far, the harness's with its fold process's, and the rounds each replica served."""
        return cpu.snapshot(target.cpu_seconds, self.fold.ask(ReplicaRounds()), helpers=self.fold.cpu_seconds())

    # --- background greenlets ----------------------------------------------------------------

    def _chaos_loop(self) -> None:
        assert self.chaos is not None
        steps = self.chaos.pending
        if not steps:
            return
        try:
            self._wait_until(steps[0].at)
            self._probe_before()
            self.chaos_window = (time.time(), None)
            self._open_window("during", self.chaos_window[0])
            self.chaos.run_schedule(self.started, lambda: self.stop_reason is not None, wait=self._stopping.wait)
        finally:  # ended by its schedule, an abort, or the kill at the end of the run
            if self.chaos_window[0] is not None:
                self.chaos_window = (self.chaos_window[0], time.time())
                self._open_window("after", self.chaos_window[1], closing="during")
            if self.chaos.skip_pending():
                self.say("chaos steps not run: the run ended first (see chaos_overrun)")
        self._probe_chaos_end()  # not when killed: the wind-down probes the closed window then

    # The hypothesis is judged on the fold's figures. Where the run's own greenlets ask the fold, a lost fold is
    # the run's harness error (said once), and the greenlet goes on without it.

    def _probe_before(self) -> None:
        """Judge the hypothesis over the whole run so far, before the chaos starts."""
        if self.steady_state.thresholds:
            with self._fold_lost_is_an_error():
                until = time.time() - self.started  # what the fold holds when asked: the flows ended by now
                self.steady_state.probe("before", self.fold.ask(Figures()), Window(0.0, until))

    def _open_window(self, name: str, since: float, closing: str | None = None) -> None:
        """A hypothesis window in the fold, fed from `since` on (only a scenario with a hypothesis has them)."""
        if not self.steady_state.thresholds:
            return
        with self._fold_lost_is_an_error():
            self.fold.tell(OpenWindow(name, since, closing))

    def _probe_window(self, phase: str, since: float, until: float | None = None) -> None:
        """Judge the hypothesis over a window's flows (`phase` names the window: during, after), from `since` to
        `until` (the window's end: its last probe) or to now (an earlier probe of a window still open)."""
        if not self.steady_state.thresholds:
            return
        with self._fold_lost_is_an_error():
            end = time.time() if until is None else until  # taken before asking: the fold holds the flows ended by now
            figures = self.fold.ask(WindowFigures(phase))
            if phase == "during" and until is None and self.chaos_window[1] is not None:
                return  # the chaos ended while the fold was asked: its last probe judges the whole window
            if figures is not None:
                self.steady_state.probe(phase, figures, Window(since - self.started, end - self.started,
                                                               last=until is not None))

    def _probe_chaos_end(self) -> None:
        """The "during" window's last probe, once the chaos ended and its window is closed (fed no more); marked done
        after it, so a greenlet killed while asking leaves it to the wind-down."""
        since, until = self.chaos_window
        if since is not None and until is not None and not self._chaos_end_probed:
            self._probe_window("during", since, until)
            self._chaos_end_probed = True

    @contextmanager
    def _fold_lost_is_an_error(self) -> Iterator[None]:
        try:
            yield
        except FoldLost as exc:
            self._harness_failed(exc)

    def _wait_until(self, offset: float) -> None:
        while time.time() < self.started + offset and self.stop_reason is None:
            self._stopping.wait(self.started + offset - time.time())

    def _watch(self) -> None:
        """Replicas up, the live fold alive, the steady-state hypothesis during chaos, and the live double-payment
        check."""
        assert self.target is not None
        last_check = time.time()
        while True:
            gevent.sleep(WATCH_EVERY)
            self.run_metrics.replicas_up.set(self.target.replicas_up())
            with self._fold_lost_is_an_error():
                self.fold.check()
            if time.time() - last_check < HYPOTHESIS_EVERY:
                continue
            last_check = time.time()
            since, until = self.chaos_window
            if since is not None and until is None:
                self._probe_window("during", since)
            if self.scenario.abort_on_violation:
                self._abort_on_ledger_violation()

    def _abort_on_ledger_violation(self) -> None:
        """Stop at once when a refund is released or paid twice during this run.

        Flows in flight have not journaled their quotes yet, so this cannot ask which refunds
        are this run's; it counts what the ledger held before the load (another run's doing,
        on a shared store) as already there, and aborts only on a new double release or payout.
        """
        ledger, _ = self._ledger()
        if ledger is None:
            return
        if self.ledger_before is None:
            self.ledger_before = ledger_violations(ledger)
        elif ledger_violations(ledger) > self.ledger_before:
            self.stop_reason = "aborted: a refund was released or paid twice"
            self.say(self.stop_reason)

    def _progress_now(self) -> Progress:
        if self.fold.lost is None:  # once the fold is lost, the line keeps the counts it last had
            with self._fold_lost_is_an_error():
                self._progress_counts = self.fold.ask(ProgressCounts())
        finished, rejections = self._progress_counts
        step = self.chaos.next_step() if self.chaos is not None else None
        return Progress(elapsed=time.time() - self.started, duration=self.scenario.duration,
                        finished=finished, in_flight=self.load.active if self.load else 0, rejections=rejections,
                        next_chaos=f"{step.action} at {format_duration(step.at)}" if step else None,
                        intended=self._intended_level())

    def _intended_level(self) -> str | None:
        """What the stages aim at now, for the progress line; None without stages."""
        load = self.scenario.load
        if not load.stages or not self.started:
            return None
        level = load.level_at(time.time() - self.started)
        return f"{level:.1f} flows/s" if load.model == "open" else f"{round(level)} agents"

    def _on_rejection(self, event: RejectionEvent) -> None:
        self.journal.write(RejectionLogged(type=RecordType.REJECTION, t=event.t, replica=event.replica,
                                           reason=event.reason, method=event.method))
        self.run_metrics.rejection(event.replica, event.reason)

    # --- after the load ----------------------------------------------------------------------

    def _wind_down(self) -> None:
        """Every teardown step runs, whatever failed before it; a step that fails is a harness error."""
        self.progress.end()
        self._step(self._stop_collector)
        self._step(self._reconcile)
        self._step(self._account_cpu)
        self._step(self._check_invariants)
        self._step(self._probe_after)
        self._step(self._stop_proxies)
        self._step(self._roll_back)
        self._step(self._stop_target)
        self._step(self.fold.check)
        self.journal.write(RunEnded(type=RecordType.RUN, event=RunEvent.END, t=time.time(), status=self._status(),
                                    reason=self.error or self.stop_reason, target_error=self.target_error))
        self.journal.close()

    def _step(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - one failed step must not skip the rollback or the teardown
            self._harness_failed(exc)

    def _status(self) -> EndStatus:
        if self.error is not None:
            return EndStatus.ERRORED
        if self.interrupted:
            return EndStatus.INTERRUPTED
        if self.stop_reason or self.target_error:
            return EndStatus.ABORTED
        return EndStatus.COMPLETED

    def _stop_collector(self) -> None:
        if self.collector is not None:
            self.collector.stop(settle=0.5)

    def _reconcile(self) -> None:
        """Match every client -32602 to a logged line, from the journal as written (every part)."""
        if self.collector is None or self.target is None:
            return
        record = self.fold.ask(Reconcile(tuple(self.target.labels)))
        self.journal.write(record)
        self.run_metrics.unexplained.inc(record["unexplained"])
        self.run_metrics.unmatched_logged.inc(record["unmatched_logged"])

    def _account_cpu(self) -> None:
        if self.cpu_start is not None and self.cpu_end is not None:
            self.journal.write(cpu.account(self.cpu_start, self.cpu_end))

    def _check_invariants(self) -> None:
        if self.target is None:
            return
        ledger, ledger_error = self._ledger()
        for result in self.fold.ask(Invariants(ledger, ledger_error)):
            self.journal.write(InvariantChecked(type=RecordType.INVARIANT, t=time.time(), invariant=result.name,
                                                checked=result.checked, violations=result.violations,
                                                detail=result.examples))
            if result.violations:
                self.run_metrics.invariant_violations.labels(invariant=result.name).inc(result.violations)

    def _ledger(self) -> tuple[list[dict[str, Any]] | None, str | None]:
        """The shop's ledger, or why it could not be read (None, None: the target declares none)."""
        api = self.target.api_url if self.target is not None else None
        if api is None:
            return None, None
        import httpx  # only a target with a ledger needs it, and only here: the load's start-up does not

        try:
            response = httpx.get(f"{api}/ledger", timeout=30.0)
            response.raise_for_status()
            return response.json()["refunds"], None
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            return None, f"GET {api}/ledger: {type(exc).__name__}: {exc}"

    def _probe_after(self) -> None:
        """The "during" window's last probe if the chaos was cut short, then the "after" window's, which ends when
        the last flow did (the load's flows ended or journaled as interrupted)."""
        self._probe_chaos_end()
        until = self.chaos_window[1]
        if until is not None:
            self._probe_window("after", until, self.load_ended or time.time())

    def _roll_back(self) -> None:
        if self.chaos is not None:
            undone = self.chaos.rollback()
            if undone:
                self.say("rolled back: " + "; ".join(undone))

    def _stop_proxies(self) -> None:
        if self.proxies is not None:
            self.proxies.close()

    def _stop_target(self) -> None:
        if self.target is not None:
            self.target.stop()

    def _journal_parts(self) -> list[Path]:
        return [self.journal.path, *(self.load.journal_parts() if self.load is not None else [])]

    def _results(self) -> int:
        from harness.report import write_results
        from harness.report.terminal import render_thresholds

        if self.env is not None:
            save_stats_json(self.env.stats, str(self.folder / "locust_stats"))
        (self.folder / "metrics.prom").write_bytes(generate_latest(self.run_metrics.registry))
        live = self._finished_fold()
        verdict = write_results(self.folder, self.scenario, self._journal_parts(),
                                parse_thresholds(self.scenario.expect), live=live, save=live is None)
        self.options.stream.write(render_thresholds(verdict) + "\n")
        self.say(f"results in {self.folder}")
        if self.exporter is not None:
            self.exporter.linger(self.options.metrics_linger, gevent.sleep, self.say)
            self.exporter.close()
        self._close_web_ui()
        return verdict.exit_code

    def _finished_fold(self) -> JournalRead | None:
        """The live fold, finished and saved by its process; None (the results are then read from the journal,
        as `report DIR` reads it) when the process is gone, which the run's end already recorded as its error."""
        try:
            return self.fold.finish(self._journal_parts())
        except FoldLost as exc:
            if self.error is None:
                self.say(f"the live figures are lost ({exc}): the results are read from the journal")
            return None

    def _serve_web_ui(self) -> None:
        """`--web`: Locust's web UI with the MRTR tab, from the load's start (the run is never waiting for a click)."""
        if self.options.web is None or self.env is None:
            return
        from harness.run.web import mrtr_rows, serve_web_ui

        host, port = self.options.web
        self.web_ui = serve_web_ui(self.env, host, port, lambda: mrtr_rows(self.run_metrics, self.started))
        self.say(f"web UI: http://{host}:{port}/?tab=mrtr")

    def _close_web_ui(self) -> None:
        """The web UI keeps the final counts for `--web-linger`, then goes."""
        if self.web_ui is None:
            return
        if self.options.web_linger > 0:
            self.say(f"web UI: the final counts stay up for {format_duration(self.options.web_linger)}")
            gevent.sleep(self.options.web_linger)
        self.web_ui.stop()
        self.web_ui = None

    # --- failures and signals ------------------------------------------------------------------

    def _harness_failed(self, exc: BaseException | None) -> None:
        """The harness's own failure: one line on the terminal, the traceback in a file, the load stopped.

        Only the first is kept as the cause (later ones are often its consequences); each
        one's traceback is appended to the file.
        """
        text = scrub(f"{type(exc).__name__}: {exc}") if exc is not None else "unknown error"
        trace = scrub("".join(traceback.format_exception(exc))) if exc is not None else text
        path: Path | None = self.folder / TRACEBACK_FILE
        try:
            with open(self.folder / TRACEBACK_FILE, "a", encoding="utf-8") as file:
                file.write(trace + "\n")
        except OSError:
            path = None
        first = self.error is None
        if first:
            self.error = text
            self.stop_reason = self.stop_reason or f"harness error: {text}"
        elif text == self.error:
            return  # the same failure again, seen by a later step (a lost fold is asked again): said once
        if not self.journal.closed:
            self.journal.write(HarnessErrorRecord(type=RecordType.RUN, event=RunEvent.ERROR, t=time.time(), error=text,
                                            traceback_file=path.name if path else None))
        logger.debug("harness error", exc_info=exc)
        self.say(f"harness error: {text}" + (f" (traceback in {path})" if path else ""))

    def _install_signals(self) -> None:
        def stop(signum: int, frame: object) -> None:
            self.interrupted = True
            self.stop_reason = f"interrupted by {signal.Signals(signum).name}"

        self._previous_handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _restore_signals(self) -> None:
        """Put back the handlers the run replaced, so a caller running several (a capacity sweep) keeps its own."""
        for sig, handler in self._previous_handlers.items():
            if handler is not None:  # None: installed outside Python, nothing this process can put back
                signal.signal(sig, handler)

    def say(self, message: str) -> None:
        self.progress.say(message)


class OverloadedError(RuntimeError):
    """The load process was too busy to stop its own greenlets: its figures cannot be trusted."""


def _stop_greenlets(greenlets: list[gevent.Greenlet], timeout: float) -> None:
    """Kill the run's own greenlets; one that has not stopped after `timeout` is the harness's failure.

    `gevent.Timeout` is a BaseException: left to itself it would escape every handler
    of the run (and skip the accounting of the flows in flight).
    """
    try:
        gevent.killall(greenlets, block=True, timeout=timeout)
    except gevent.Timeout:
        raise OverloadedError(f"the run's own greenlets did not stop within {timeout:.0f} s: the load process "
                              "was too busy (lower the arrival rate, or spread the load with --workers)") from None

