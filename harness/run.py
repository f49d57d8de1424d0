"""`mrtr-harness run`: one scenario, from target up to verdict, with results written as it goes.

The flow of one run (DESIGN): target up -> log collector -> Locust load with leads ->
chaos on schedule -> load stops, flows in flight get a grace period -> rejections
reconciled with logged reasons -> ledger invariants -> chaos rolled back -> target down
-> results and exit code. Every step leaves its trace in the journal as it happens, so
a run killed at any point still leaves a folder that can be summarised; Ctrl-C and
SIGTERM stop the load at once, but rollback, teardown and results still happen.

Import this module only after Locust's gevent patching (the CLI imports `locust` first).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import gevent
import httpx
from locust.env import Environment
from locust.event import Events
from locust.stats import save_stats_json
from prometheus_client import generate_latest

from harness.chaos import ChaosRunner
from harness.durations import format_duration
from harness.invariants import INVARIANTS, check_invariants, ledger_violations
from harness.journal import Journal
from harness.leads import capabilities, stream
from harness.load.drivers import DistributedLoad, LocalLoad
from harness.load.flows import FlowEnv, url_labels
from harness.load.plan import LoadPlan
from harness.logs import Collector, RejectionEvent
from harness.metrics import Measurements
from harness.mrtr import MrtrClient, Outcome, Router, Transport
from harness.scenario import Scenario, flow_label
from harness.shop.catalogue import build_catalogue
from harness.report.folder import results_folder
from harness.summary import RunFigures
from harness.target.base import Target, TargetError
from harness.target.factory import build_target
from harness.thresholds import evaluate, parse_thresholds

PROGRESS_EVERY_TTY = 1.0
PROGRESS_EVERY_LOG = 5.0
HYPOTHESIS_EVERY = 5.0
HYPOTHESIS_MIN_FLOWS = 10
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
    prometheus_targets: Path | None = None
    stream: IO[str] = field(default_factory=lambda: sys.stderr)


class Run:
    """One execution of a scenario; `execute()` returns the process exit code."""

    def __init__(self, scenario: Scenario, scenario_text: str, options: RunOptions) -> None:
        self.scenario = scenario
        self.options = options
        self.folder = results_folder(options.results_root, scenario.name)
        (self.folder / "scenario.toml").write_text(scenario_text)
        (self.folder / "scenario.json").write_text(scenario.model_dump_json(indent=2))
        self.figures = RunFigures()
        self.journal = Journal(self.folder / "journal.jsonl", on_record=self.figures.add)
        self.labels = [flow_label(flow) for flow in scenario.flows]
        self.measurements = Measurements(flows=self.labels)
        self.measurements.preset(actions={step.action for step in scenario.chaos}, invariants=INVARIANTS)
        self.hypothesis = parse_thresholds(scenario.hypothesis)  # parsed once; probed every few seconds
        self.stop_reason: str | None = None  # set when the run aborts; the load stops early
        self._stopped_because = "duration"
        self._overrun_said = False
        self.interrupted = False
        self.target: Target | None = None
        self.load: LocalLoad | DistributedLoad | None = None
        self.chaos: ChaosRunner | None = None
        self.started = 0.0
        self._chaos_window: tuple[float | None, float | None] = (None, None)
        self._cpu_start: tuple[float, int, dict] | None = None
        self._cpu_end: tuple[float, int, dict] | None = None
        self._previous_handlers: dict[signal.Signals, Any] = {}

    # --- the whole run -----------------------------------------------------------------------

    def execute(self) -> int:
        """The whole run. Until it returns, Ctrl-C and SIGTERM stop the load (results are still written);
        then the handlers the caller had are back."""
        self._install_signals()
        try:
            self.journal.write("run", event="start", run_id=self.folder.name, scenario=self.scenario.name,
                               seed=self.scenario.seed, duration=self.scenario.duration)
            self.say(f"results: {self.folder}")
            target_error = None
            try:
                self._bring_up()
                self._drive()
            except TargetError as exc:
                target_error = str(exc)
                self.say(f"target could not be started or reached: {exc}")
            finally:
                self._wind_down()
            return self._results(target_error)
        finally:
            self._restore_signals()

    def _bring_up(self) -> None:
        self.target = build_target(self.scenario, self.folder / "target")
        self.say(f"starting the {self.scenario.target.kind} target ...")
        self.target.start()
        self.measurements.preset(replicas=self.target.labels)
        self.collector = Collector(self._on_rejection)
        for source in self.target.log_sources():
            self.collector.follow(source)
        if self.options.metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(self.options.metrics_port, addr=self.options.metrics_host,
                              registry=self.measurements.registry)
            if self.options.prometheus_targets is not None:
                self._write_scrape_targets(self.options.prometheus_targets)
        self.say(f"target up: {', '.join(self.target.urls)}")

    def _write_scrape_targets(self, folder: Path) -> None:
        """File-sd files for this run (the harness and every replica, labelled with the run id).

        Prometheus re-reads them live, so the shipped `dashboards/prometheus.yml` scrapes a
        run with random replica ports without any editing; they are removed after the run.
        """
        assert self.target is not None
        run_id = self.folder.name
        harness = [{"targets": [f"127.0.0.1:{self.options.metrics_port}"], "labels": {"run_id": run_id}}]
        replicas = [{"targets": [urlsplit(url).netloc], "labels": {"run_id": run_id, "replica": label}}
                    for url, label in zip(self.target.urls, self.target.labels, strict=True)]
        folder.mkdir(parents=True, exist_ok=True)
        self._scrape_files = [_write_atomically(folder / "harness.json", harness),
                              _write_atomically(folder / "replicas.json", replicas)]

    def _drive(self) -> None:
        assert self.target is not None
        scenario = self.scenario
        self.started = time.time()
        self.load = self._load_driver()
        self._cpu_start = self._cpu_snapshot()
        self.load.start()
        self.started = time.time()  # the duration counts from when the load runs (workers take a while)
        self.journal.write("run", event="load-started", t=self.started)
        self.chaos = ChaosRunner(scenario, self.target, self.journal, self.measurements, sleep=gevent.sleep)
        chaos = gevent.spawn(self._chaos_loop)
        background = [chaos, gevent.spawn(self._watch), gevent.spawn(self._progress)]
        try:
            while self.stop_reason is None and not self._load_done(chaos):
                gevent.sleep(0.1)
            self._stop_load()
        finally:
            gevent.killall(background, block=True, timeout=10)
            self.load.quit()

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
            self.journal.write("run", event="load-extended", reason="chaos still running",
                               action=step.action if step else None)
        if overrun < self.scenario.chaos_overrun:
            return False
        self._stopped_because = "chaos_overrun reached with a chaos action still running"
        return True

    def _load_driver(self) -> LocalLoad | DistributedLoad:
        assert self.target is not None
        self.env = Environment(events=Events())
        options = self.options
        if options.workers or options.remote_workers:
            self._warn_unreachable_replicas()
            return DistributedLoad(self.env, self.scenario, self.measurements, self.folder, self.target.urls,
                                   self.target.labels, self.figures.add, local=options.workers,
                                   remote=options.remote_workers, bind_host=options.master_bind_host,
                                   bind_port=options.master_bind_port, wait=options.workers_wait, say=self.say)
        return LocalLoad(self.env, self._local_plan(), self.started)

    def _warn_unreachable_replicas(self) -> None:
        """Workers on other machines send rounds to the URLs the master has; loopback ones only work here."""
        assert self.target is not None
        if self.options.remote_workers and self.options.master_bind_host not in _LOOPBACK:
            local = [url for url in self.target.urls if urlsplit(url).hostname in _LOOPBACK]
            if local:
                self.say(f"warning: workers on other machines cannot reach {', '.join(local)}; "
                         "give the target URLs they can reach (`urls` of an external or docker target)")

    def _local_plan(self) -> LoadPlan:
        assert self.target is not None
        scenario = self.scenario
        router = Router(self.target.urls, scenario.load.routing, rng=stream(scenario.seed, "router"))
        transport = Transport(read_timeout=scenario.load.timeout, reuse_connections=len(self.target.urls) > 1)
        client = MrtrClient(router, capabilities=capabilities(scenario.leads), timeout=scenario.load.timeout,
                            transport=transport)
        flow_env = FlowEnv(scenario, client, self.journal, self.measurements, build_catalogue(),
                           url_labels(self.target.urls, self.target.labels), fire_request=self.env.events.request.fire)
        return LoadPlan(scenario, flow_env)

    def _stop_load(self) -> None:
        """No new flows; those in flight get the grace period (none after Ctrl-C), the rest are interrupted."""
        self.load.stop_accepting()
        self.journal.write("run", event="load-stopped", reason=self.stop_reason or self._stopped_because)
        grace = 0.0 if self.interrupted else self.scenario.grace
        if grace:
            self.say(f"load stopped; waiting up to {format_duration(grace)} for {self.load.active} flows in flight")
        left = self.load.wait_in_flight(grace)
        self._cpu_end = self._cpu_snapshot()
        if left:
            self.say(f"{left} flows still in flight: counted as interrupted")

    # --- background greenlets ----------------------------------------------------------------

    def _chaos_loop(self) -> None:
        assert self.chaos is not None
        steps = self.chaos.pending
        if not steps:
            return
        try:
            self._wait_until(steps[0].at)
            self._hypothesis("before", self.figures)
            self._chaos_window = (time.time(), None)
            self.chaos.run_schedule(self.started, lambda: self.stop_reason is not None)
        finally:  # ended by its schedule, an abort, or the kill at the end of the run
            if self._chaos_window[0] is not None:
                self._chaos_window = (self._chaos_window[0], time.time())
            if self.chaos.skip_pending():
                self.say("chaos steps not run: the run ended first (see chaos_overrun)")

    def _wait_until(self, offset: float) -> None:
        while time.time() < self.started + offset and self.stop_reason is None:
            gevent.sleep(0.1)

    def _watch(self) -> None:
        """Replicas up, the steady-state hypothesis during chaos, and the live double-payment check."""
        last_check = time.time()
        while True:
            gevent.sleep(1.0)
            assert self.target is not None
            self.measurements.replicas_up.set(self.target.replicas_up())
            if time.time() - last_check < HYPOTHESIS_EVERY:
                continue
            last_check = time.time()
            since, until = self._chaos_window
            if since is not None and until is None:
                self._hypothesis("during", self.figures.since(since))
            if self.scenario.abort_on_violation:
                self._abort_on_ledger_violation()

    def _abort_on_ledger_violation(self) -> None:
        ledger = self._ledger()
        if ledger is not None and ledger_violations(ledger):
            self.stop_reason = "aborted: a refund was released or paid twice"
            self.say(self.stop_reason)

    def _progress(self) -> None:
        if not self.options.progress:
            return
        every = PROGRESS_EVERY_TTY if self.options.stream.isatty() else PROGRESS_EVERY_LOG
        finished_before = 0
        while True:
            gevent.sleep(every)
            finished = len(self.figures.flows)
            rate = (finished - finished_before) / every
            finished_before = finished
            self._print_progress(rate)

    def _print_progress(self, rate: float) -> None:
        assert self.chaos is not None
        elapsed = time.time() - self.started
        reasons = Counter({reason: n for (_, reason), n in self.figures.rejections.items()})
        rejected = ", ".join(f"{reason} {n}" for reason, n in reasons.most_common(3)) or "none"
        step = self.chaos.next_step()
        upcoming = f"{step.action} at {format_duration(step.at)}" if step else "none"
        line = (f"{format_duration(elapsed)}/{format_duration(self.scenario.duration)}  "
                f"flows/s {rate:.1f}  in flight {self.load.active}  finished {len(self.figures.flows)}  "
                f"rejections: {rejected}  next chaos: {upcoming}")
        if self.options.stream.isatty():
            self.options.stream.write("\r\033[K" + line)
        else:
            self.options.stream.write(line + "\n")
        self.options.stream.flush()

    # --- after the load ----------------------------------------------------------------------

    def _on_rejection(self, event: RejectionEvent) -> None:
        self.journal.write("rejection", t=event.t, replica=event.replica, reason=event.reason, method=event.method)
        self.measurements.rejection(event.replica, event.reason)

    def _wind_down(self) -> None:
        if self.options.progress and self.options.stream.isatty():
            self.options.stream.write("\n")
        if getattr(self, "collector", None) is not None:
            self.collector.stop(settle=0.5)
            self._reconcile()
        if self.target is not None:
            self._account_cpu()
            self._check_invariants()
            since, until = self._chaos_window
            if until is not None:
                self._hypothesis("after", self.figures.since(until))
            if self.chaos is not None:
                undone = self.chaos.rollback()
                if undone:
                    self.say("rolled back: " + "; ".join(undone))
            self.target.stop()
        status = "interrupted" if self.interrupted else ("aborted" if self.stop_reason else "completed")
        self.journal.write("run", event="end", status=status, reason=self.stop_reason)
        self.journal.close()

    def _cpu_snapshot(self) -> tuple[float, int, dict[str, tuple[int, float]]]:
        processes = getattr(self.target, "cpu_seconds", lambda: {})()
        return time.process_time(), len(self.figures.rounds), processes

    def _account_cpu(self) -> None:
        """The harness's CPU per round beside the replicas', over the load window only.

        The harness must never be the bottleneck. Start-up is left out on both sides, and
        a replica restarted during the load (another pid at the end) is left out of the
        replicas' figure, which makes the comparison err against the harness.
        """
        if self._cpu_start is None or self._cpu_end is None:
            return
        (cpu0, rounds0, procs0), (cpu1, rounds1, procs1) = self._cpu_start, self._cpu_end
        rounds = rounds1 - rounds0
        same = [label for label in procs1 if label != "api" and procs0.get(label, (None,))[0] == procs1[label][0]]
        replica_cpu = sum(procs1[label][1] - procs0[label][1] for label in same)
        replica_rounds = sum(1 for row in self.figures.rounds if row["replica"] in same)
        self.cpu = {
            "rounds": rounds,
            "harness_seconds": round(cpu1 - cpu0, 3),
            "harness_per_round_ms": round((cpu1 - cpu0) / rounds * 1000, 3) if rounds else None,
            "replicas_measured": same,
            "replica_seconds": round(replica_cpu, 3),
            "replica_per_round_ms": round(replica_cpu / replica_rounds * 1000, 3) if replica_rounds else None,
        }
        if self.cpu["harness_per_round_ms"] and self.cpu["replica_per_round_ms"]:
            self.cpu["harness_to_replica"] = round(self.cpu["harness_per_round_ms"] / self.cpu["replica_per_round_ms"], 3)
        self.journal.write("run", event="cpu", **self.cpu)

    def _reconcile(self) -> None:
        client = sum(1 for row in self.figures.rounds if row["outcome"] == Outcome.INVALID_STATE.value)
        logged = sum(self.figures.rejections.values())
        unexplained = max(0, client - logged)
        self.journal.write("reconciliation", client_rejections=client, logged=logged, unexplained=unexplained)
        self.measurements.unexplained.inc(unexplained)

    def _check_invariants(self) -> None:
        ledger = self._ledger()
        for result in check_invariants(ledger, self.figures.starts, self.figures.flows):
            self.journal.write("invariant", invariant=result.name, checked=result.checked,
                               violations=result.violations, detail=result.examples)
            if result.violations:
                self.measurements.invariant_violations.labels(invariant=result.name).inc(result.violations)

    def _ledger(self) -> list[dict[str, Any]] | None:
        api = self.target.api_url if self.target is not None else None
        if api is None:
            return None
        try:
            return httpx.get(f"{api}/ledger", timeout=30.0).json()["refunds"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def _hypothesis(self, phase: str, figures: RunFigures) -> None:
        """Probe the steady state on the flows that ended in this phase's window.

        A window with fewer than `HYPOTHESIS_MIN_FLOWS` finished flows is not judged:
        two seconds into a chaos action, one unlucky flow would otherwise read as a
        deviation.
        """
        if not self.scenario.hypothesis or len(figures.flows) < HYPOTHESIS_MIN_FLOWS:
            return
        figures.duration = max(time.time() - self.started, 1e-9)
        verdicts = evaluate(self.hypothesis, figures)
        ok = all(verdict.passed or verdict.observed is None for verdict in verdicts)
        self.journal.write("hypothesis", phase=phase, ok=ok, detail=[verdict.as_dict() for verdict in verdicts])

    def _results(self, target_error: str | None) -> int:
        from harness.report import write_results
        from harness.report.terminal import render_thresholds

        extra: dict[str, Any] = {"cpu": getattr(self, "cpu", None)}
        if getattr(self, "env", None) is not None:
            save_stats_json(self.env.stats, str(self.folder / "locust_stats"))
        (self.folder / "metrics.prom").write_bytes(generate_latest(self.measurements.registry))
        parts = self.load.journal_parts() if self.load is not None else []
        verdict = write_results(self.folder, self.scenario, [self.journal.path, *parts],
                                parse_thresholds(self.scenario.expect), interrupted=self.interrupted,
                                aborted_reason=self.stop_reason if not self.interrupted else None,
                                target_error=target_error, extra=extra)
        self.options.stream.write(render_thresholds(verdict) + "\n")
        self.say(f"results in {self.folder}")
        if self.options.metrics_port is not None and self.options.metrics_linger > 0:
            self.say(f"serving the final metrics for {format_duration(self.options.metrics_linger)} more")
            gevent.sleep(self.options.metrics_linger)
        for path in getattr(self, "_scrape_files", []):
            path.unlink(missing_ok=True)
        return verdict.exit_code

    # --- plumbing ---------------------------------------------------------------------------

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
        if self.options.progress and self.options.stream.isatty():
            self.options.stream.write("\r\033[K")
        self.options.stream.write(message + "\n")
        self.options.stream.flush()


def _write_atomically(path: Path, data: Any) -> Path:
    """Replace a file in one step, so a reader (Prometheus's file_sd) never sees half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
    return path
