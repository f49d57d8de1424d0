"""A run's load: which load it drives (Locust in this process, or a master with workers), where it sends each round,
and when the load ends.

The load talks to each replica's fault proxy when there is one; discovery asks the target
itself, never a fault proxy before it. Workers on other machines send rounds to the URLs the
master has, so loopback ones are said to work only here.

The load ends at the scenario's `duration`, or runs on while a chaos step runs, at most
`chaos_overrun` longer (`LoadEnd`): a step that starts late (a slow restart before it) must
still be seen under load, and stopping the load mid-rotation would pass a run that never tested it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from locust.env import Environment
from locust.event import Events

from harness.chaos.schedule import ChaosRunner
from harness.config.durations import format_duration
from harness.config.scenario import Scenario
from harness.journal.records import LoadExtended, RecordType, RunEvent
from harness.journal.writer import Journal
from harness.load.client_stack import build_flow_env
from harness.load.drivers import DistributedLoad, LocalLoad
from harness.load.plan import LoadPlan
from harness.metrics.registry import RunMetrics
from harness.run.options import RunOptions

if TYPE_CHECKING:
    from harness.mrtr.stdio import StdioServers

logger = logging.getLogger(__name__)

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def load_driver(env: Environment, scenario: Scenario, options: RunOptions, *, urls: Sequence[str],
                target_urls: Sequence[str], labels: Sequence[str], journal: Journal, run_metrics: RunMetrics,
                folder: Path, grown: Callable[[str, int], None],
                say: Callable[[str], None], stdio: StdioServers | None = None) -> LocalLoad | DistributedLoad:
    """The load for `scenario`, sending rounds to `urls` (one per replica, proxies or the target's own); with
    `stdio`, a stdio target's processes, whose pipes the rounds go over (in this process only)."""
    auth_url = next(iter(target_urls), None)  # discovery asks the target itself, never a fault proxy before it
    if options.workers or options.remote_workers:
        warn_unreachable_replicas(options, target_urls)
        return DistributedLoad(env, scenario, run_metrics, folder, list(urls), list(labels), grown,
                               before_append=journal.flush, local=options.workers, remote=options.remote_workers,
                               bind_host=options.master_bind_host, bind_port=options.master_bind_port,
                               wait=options.workers_wait, say=say, auth_url=auth_url)
    flow_env = build_flow_env(scenario, list(urls), list(labels), journal, run_metrics,
                              fire_request=env.events.request.fire, auth_url=auth_url, stdio=stdio)
    return LocalLoad(env, LoadPlan(scenario, flow_env), time.time())


def new_environment() -> Environment:
    """A Locust environment of the run's own (its events too: several runs in one process share nothing)."""
    return Environment(events=Events())


def warn_unreachable_replicas(options: RunOptions, urls: Sequence[str]) -> None:
    """Workers on other machines send rounds to the URLs the master has; loopback ones only work here."""
    if options.remote_workers and options.master_bind_host not in LOOPBACK:
        local = [url for url in urls if urlsplit(url).hostname in LOOPBACK]
        if local:
            logger.warning("workers on other machines cannot reach %s; give the target URLs they can reach "
                           "(`urls` of an external or docker target)", ", ".join(local))


class LoadEnd:
    """The load's clock, from `started`; `stopped_because` says why it ended when no one stopped it."""

    def __init__(self, scenario: Scenario, started: float, journal: Journal, say: Callable[[str], None]) -> None:
        self.duration, self.overrun = scenario.duration, scenario.chaos_overrun
        self.started, self.journal, self.say = started, journal, say
        self.stopped_because = "duration"
        self._overrun_said = False

    def reached(self, chaos_done: bool, chaos: ChaosRunner | None) -> bool:
        """The load has run its `duration` and the chaos is done, or the overrun is spent."""
        overrun = time.time() - self.started - self.duration
        if overrun < 0 or chaos_done:
            return overrun >= 0
        if not self._overrun_said:
            self._overrun_said = True
            self._say_overrun(chaos)
        if overrun < self.overrun:
            return False
        self.stopped_because = "chaos_overrun reached with a chaos action still running"
        return True

    def _say_overrun(self, chaos: ChaosRunner | None) -> None:
        step = chaos.running if chaos is not None else None
        what = f"{step.action} (due at {format_duration(step.at)})" if step else "the chaos schedule"
        self.say(f"{what} still running at the end of the load: the load goes on until it ends, "
                 f"at most {format_duration(self.overrun)} more")
        self.journal.write(LoadExtended(type=RecordType.RUN, event=RunEvent.LOAD_EXTENDED, t=time.time(),
                                        reason="chaos still running", action=step.action if step else None))

    def seconds_left(self) -> float:
        """Seconds until `reached` can next say yes by the clock: the end of `duration`, then of the overrun."""
        elapsed = time.time() - self.started
        due = self.duration
        if elapsed >= due:
            due += self.overrun
        return max(due - elapsed, 0.001)
