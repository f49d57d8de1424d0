"""Chaos actions on a schedule, each with its start and end in the journal, and their rollback.

Actions are written against the `Target` interface only, so the same scenario breaks a
local process deployment and a container one the same way. A key rotation is
done the way the SDK documents it ([old] -> [old,new] -> [new,old], then [new] one TTL
later, every phase fully rolled out before the next) or wrong on purpose:
`minter-first` promotes the new sealing key on one replica while the others cannot open
it yet; `retire-early` drops the old key before one TTL has passed.

On a deployment the harness did not start, an action is the scenario's command for it
(`[target.commands]`, run by `harness.targets.commands`): an action with a command runs it,
on any target, and one without goes to the target, which may raise `ChaosUnsupported`.
A key rotation by command hands each step (add-key, promote-key, retire-key) the new key
as a file and its fingerprint, since the harness never holds the deployment's old keys.

Each action's handler is a `ChaosRunner` method registered with `@handles(Model, uses=...)`:
the handler half of the action's declaration, whose config half (model, commands, label,
undoing) is in `harness.config.chaos`. Importing this module checks that every declared action
has exactly one handler. What the actions change is owed on one list of debts (`RollbackDebts`), shared with
`CommandTarget`, and every draw an action makes (which leads a share picks, which exchanges a
network fault hits) comes from one stream per step (`_draws`).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gevent import GreenletExit

from harness.chaos.proxy import FaultProxies
from harness.config.chaos import (
    CHAOS_ACTIONS,
    AuthDown,
    ChaosAction,
    ChaosStep,
    ClockSkew,
    CommandAction,
    MemoryRecords,
    NetworkAction,
    PauseAction,
    Rename,
    ReplicaAction,
    Revoke,
    RollingRestart,
    RotateKeys,
    ScopeLoss,
    SetTtl,
    SubjectDrift,
    TokenExpiry,
)
from harness.config.scenario import Scenario
from harness.journal.records import ChaosEnded, ChaosPhase, ChaosStarted, RecordType
from harness.journal.writer import Journal
from harness.load.seeding import stream
from harness.metrics.registry import RunMetrics
from harness.mrtr.keys import fingerprint, new_key
from harness.targets.by_command import CommandTarget, RollbackIncomplete
from harness.targets.commands import ChaosCommands, CommandFailed
from harness.targets.interface import AuthChange, ChaosUnsupported, ReplicaChange, Target
from harness.targets.rollback_debts import RollbackDebts

if TYPE_CHECKING:
    from harness.telemetry.run_span import RunSpans

Sleep = Callable[[float], None]

logger = logging.getLogger(__name__)

Step = TypeVar("Step", bound=ChaosAction)


@dataclass(frozen=True)
class Handler:
    """An action's handler half: the runner's method that does it, and the `Target` methods it calls."""

    run: Callable[[ChaosRunner, Any, int], dict]
    uses: tuple[str, ...]


HANDLERS: dict[type[ChaosAction], Handler] = {}
"""Each action's model -> its handler, filled by `@handles`."""


def handles(model: type[Step], uses: tuple[str, ...] = ()) -> Callable[[Callable[[ChaosRunner, Step, int], dict]],
                                                                      Callable[[ChaosRunner, Step, int], dict]]:
    """Register the decorated `ChaosRunner` method as `model`'s handler; `uses`: the `Target` methods it calls."""
    def register(method: Callable[[ChaosRunner, Step, int], dict]) -> Callable[[ChaosRunner, Step, int], dict]:
        if model in HANDLERS:
            raise TypeError(f"{model.__name__} has two handlers")
        HANDLERS[model] = Handler(method, uses)
        return method
    return register


class ChaosRunner:
    """Runs the scenario's chaos steps against a target at their times; journals each one."""

    def __init__(self, scenario: Scenario, target: Target, journal: Journal, run_metrics: RunMetrics,
                 sleep: Sleep = time.sleep, run_id: str = "", proxies: FaultProxies | None = None,
                 spans: RunSpans | None = None) -> None:
        """`spans`: the run's trace, when spans are exported: each action (and the rollback) a child span of it."""
        self.scenario = scenario
        self.spans = spans
        self.proxies = proxies
        """The fault proxies in front of the replicas, when the scenario has a network fault."""
        self.target = target
        self.journal = journal
        self.run_metrics = run_metrics
        self.sleep = sleep
        self.pending = sorted(scenario.chaos, key=lambda step: step.at)
        self.failures = 0
        self.running: ChaosStep | None = None
        self.commands = ChaosCommands(scenario.target, target.labels, target.urls, journal, run_id, sleep)
        self.debts = RollbackDebts()
        """What the rollback owes, newest last: a `command` step's `rollback`, and what `CommandTarget` changed."""
        self.by_command: CommandTarget | None = None
        if scenario.target.commands:
            spec = scenario.target
            original = ReplicaChange(ttl=scenario.real(spec.ttl), name=spec.name, clock_offset=0.0)
            self.target = self.by_command = CommandTarget(target, self.commands, original, self.debts)

    def next_step(self) -> ChaosStep | None:
        return self.pending[0] if self.pending else None

    def run_schedule(self, run_started: float, should_stop: Callable[[], bool],
                     wait: Callable[[float], object] | None = None) -> None:
        """Run every step at its time after `run_started`; returns early when `should_stop()`.

        `wait(seconds)` sleeps until the next step is due and returns early when the run
        stops (the run's own stop event), so nothing wakes in between; without it the
        schedule looks at `should_stop` four times a second.
        """
        while self.pending and not should_stop():
            step = self.pending[0]
            due = run_started + step.at - time.time()
            if due > 0:
                if wait is not None:
                    wait(due)
                else:
                    self.sleep(min(due, 0.25))
                continue
            self.pending.pop(0)
            self.run_step(step)

    def run_step(self, step: ChaosStep) -> bool:
        index = (step.replica or 1) - 1
        target_label = self._target_label(step)
        started = time.time()
        self.run_metrics.chaos_action(step.action, started)
        asked = step.asked()
        self.journal.write(ChaosStarted(type=RecordType.CHAOS, phase=ChaosPhase.START, t=started, action=step.action,
                                        target=target_label, detail=asked))
        self.running = step
        try:
            detail = HANDLERS[type(step)].run(self, step, index)
            if self.by_command is not None and (ran := self.by_command.take_ran()):
                detail["commands"] = [*detail.get("commands", []), *ran]
            ok, error = True, None
        except GreenletExit:  # the run ended while the action ran: say so, then let the kill go on
            self._end(step, target_label, started, ok=False, detail={},
                      error="cut short: the run ended while it ran (see chaos_overrun)")
            raise
        except ChaosUnsupported as exc:
            ok, error, detail = False, f"unsupported: {exc}", {}
        except CommandFailed as exc:  # its exit code and output are in its own `command` record
            ok, error, detail = False, f"command failed: {exc}", {}
        except Exception as exc:  # noqa: BLE001 - a failed action is a run event, not a crash of the run
            ok, error, detail = False, f"{type(exc).__name__}: {exc}", {"trace": traceback.format_exc(limit=3)}
        finally:
            self.running = None
        self._end(step, target_label, started, ok=ok, error=error, detail=detail)
        return ok

    def _target_label(self, step: ChaosStep) -> str:
        return step.journal_target(self.target.labels)

    def _end(self, step: ChaosStep, target_label: str, started: float, *, ok: bool, error: str | None,
             detail: dict) -> None:
        if not ok:
            self.failures += 1
            logger.warning("chaos %s on %s failed: %s", step.action, target_label, error)
        ended = time.time()
        self.journal.write(ChaosEnded(type=RecordType.CHAOS, phase=ChaosPhase.END, t=ended, action=step.action,
                                      target=target_label, ok=ok, error=error,
                                      seconds=round(ended - started, 3), detail=detail))
        if self.spans is not None:
            self.spans.chaos(step.action, target_label, started, ended, None if ok else error or "failed")

    def skip_pending(self) -> int:
        """Journal every step that never started as a failed one: the scenario promised it, the run ended first."""
        skipped = 0
        while self.pending:
            step = self.pending.pop(0)
            self._end(step, self._target_label(step), time.time(), ok=False, detail={"at": step.at},
                      error="not run: the run ended before the step could start")
            skipped += 1
        return skipped

    # --- actions: each written once, against the Target interface -------------------------

    def _who(self, step: ChaosStep) -> list[int]:
        """The replicas (0-based) the step acts on: the one or several it names, else its action's default."""
        return step.acted_on(len(self.target.labels))

    @handles(ReplicaAction, uses=("restart",))
    def _restart(self, step: ReplicaAction, index: int) -> dict:
        """One replica, or each of the several named in turn (each serving again before the next goes down)."""
        ready = [round(self.target.restart(replica, kill=step.action == "kill"), 3) for replica in self._who(step)]
        return {"ready_after": ready[0] if step.replicas is None else ready}

    @handles(PauseAction, uses=("pause", "resume"))
    def _pause(self, step: PauseAction, index: int) -> dict:
        """pause, wait, resume; a resume the run never reached is the rollback's (a paused replica stays paused)."""
        who = self._who(step)
        for replica in who:
            self.target.pause(replica)
        self.sleep(step.duration)
        for replica in who:
            self.target.resume(replica)
        return {"paused_for": step.duration}

    @handles(RollingRestart, uses=("restart",))
    def _rolling_restart(self, step: RollingRestart, index: int) -> dict:
        ready = []
        for replica in range(len(self.target.labels)):
            ready.append(round(self.target.restart(replica), 3))
            self.sleep(step.interval)
        return {"ready_after": ready}

    @handles(RotateKeys, uses=("sealing_key", "add_key", "promote_key", "retire_old_keys"))
    def _rotate(self, step: RotateKeys, index: int) -> dict:
        """The SDK's rotation, phase by phase on every replica, or one of its mistakes (`order`)."""
        replicas = list(range(len(self.target.labels)))
        old = self.target.sealing_key(0)
        new = new_key()
        phases: list[str] = []

        def phase(name: str, operation: Callable[[list[int], str], None], who: list[int]) -> None:
            operation(who, new)
            phases.append(f"{name} on {','.join(self.target.labels[r] for r in who)}")

        if step.order == "minter-first":  # the new key seals on one replica before the others can open it
            others = [r for r in replicas if r != index]
            phase("add-key", self.target.add_key, [index])
            phase("promote-key", self.target.promote_key, [index])
            self.sleep(step.phase_gap)
            phase("add-key", self.target.add_key, others)
            self.sleep(step.phase_gap)
            phase("promote-key", self.target.promote_key, others)
        else:
            phase("add-key", self.target.add_key, replicas)
            self.sleep(step.phase_gap)
            phase("promote-key", self.target.promote_key, replicas)
            # One TTL after [new,old] is everywhere, plus a phase gap of margin: an old-key state
            # refused after retirement reads "unknown key" in the log even when it had already
            # expired (the SDK opens the seal before it checks the expiry).
            wait = step.phase_gap if step.order == "retire-early" \
                else self.scenario.real(self.scenario.target.ttl) + step.phase_gap
            self.sleep(wait)
            phase("retire-key", self.target.retire_old_keys, replicas)
        return {**({"old": fingerprint(old)} if old else {}), "new": fingerprint(new), "phases": phases}

    @handles(SetTtl, uses=("reconfigure",))
    def _set_ttl(self, step: SetTtl, index: int) -> dict:
        """A TTL change is a config rollout: every replica in turn, or only the one named."""
        real = self.scenario.real(step.ttl)
        who = self._who(step)
        return {"ttl_real": real, "ready_after": _rounded(self.target.reconfigure(who, ReplicaChange(ttl=real)))}

    @handles(Rename, uses=("reconfigure",))
    def _rename(self, step: Rename, index: int) -> dict:
        return {"name": step.name, "ready_after": _rounded(self.target.reconfigure(self._who(step),
                                                                                   ReplicaChange(name=step.name)))}

    @handles(ClockSkew, uses=("reconfigure",))
    def _clock(self, step: ClockSkew, index: int) -> dict:
        offset = -step.offset if step.behind else step.offset
        return {"offset": offset, "ready_after": _rounded(self.target.reconfigure(self._who(step),
                                                                                  ReplicaChange(clock_offset=offset)))}

    @handles(MemoryRecords, uses=("reconfigure",))
    def _memory(self, step: MemoryRecords, index: int) -> dict:
        return {"ready_after": _rounded(self.target.reconfigure(self._who(step), ReplicaChange(store="memory")))}

    @handles(CommandAction)
    def _command(self, step: CommandAction, index: int) -> dict:
        """Any command at its time; its rollback, if any, is owed from the moment it started."""
        rollback = step.rollback
        if rollback is not None:
            def undo() -> object:
                return self.commands.run("rollback", "rollback", rollback, index)

            self.debts.owe(" ".join(rollback), undo)
        return {"commands": [self.commands.run(step.action, "command", step.command, index)]}

    @handles(NetworkAction)
    def _network(self, step: NetworkAction, index: int) -> dict:
        """A fault on the proxies of the replicas named, for its duration: what it hit, replica by replica.

        The fault is off again when the step ends however it ends (the run's end kills it mid-sleep).
        """
        if self.proxies is None:
            raise ChaosUnsupported("no fault proxy runs in front of the replicas")
        who = self._who(step)
        faults = self.proxies.set_fault(step, who, self._draws(step))
        try:
            self.sleep(step.duration)
        finally:
            self.proxies.clear_fault(who, faults)
        labels = [self.target.labels[replica] for replica in who]
        return {**step.parameters(),
                "exchanges": {label: fault.exchanges for label, fault in zip(labels, faults, strict=True)},
                "hit": {label: fault.hit for label, fault in zip(labels, faults, strict=True)}}

    # --- the authorization server's actions: each made, held for its duration, undone -----------

    def _draws(self, step: ChaosStep) -> random.Random:
        """The step's own random stream, from the scenario's seed and the step's place: a rerun draws the same."""
        return stream(self.scenario.seed, "chaos", self.scenario.chaos.index(step))

    def _seed(self, step: ChaosStep) -> int:
        """Which leads a share picks: the step's first draw."""
        return self._draws(step).getrandbits(63)

    def _held(self, change: AuthChange, duration: float | None) -> dict:
        """Make `change`; with a duration, wait it out and undo it, however the wait ends."""
        made = self.target.auth_change(change)
        if duration is None:
            return {"made": made}
        try:
            self.sleep(duration)
        finally:
            undone = self.target.auth_change(dataclasses.replace(change, on=False))
        return {"made": made, "undone": undone}

    @handles(TokenExpiry, uses=("auth_change",))
    def _token_expiry(self, step: TokenExpiry, index: int) -> dict:
        return {"lifetime": step.lifetime, **self._held(AuthChange(step.action, lifetime=step.lifetime),
                                                         step.duration)}

    @handles(Revoke, uses=("auth_change",))
    def _revoke(self, step: Revoke, index: int) -> dict:
        return self._held(AuthChange(step.action, share=step.share, seed=self._seed(step)), None)

    @handles(ScopeLoss, uses=("auth_change",))
    def _scope_loss(self, step: ScopeLoss, index: int) -> dict:
        return self._held(AuthChange(step.action, share=step.share, scope=step.scope, seed=self._seed(step)), None)

    @handles(AuthDown, uses=("auth_change",))
    def _auth_down(self, step: AuthDown, index: int) -> dict:
        return {"down_for": step.duration, **self._held(AuthChange(step.action), step.duration)}

    @handles(SubjectDrift, uses=("auth_change",))
    def _subject_drift(self, step: SubjectDrift, index: int) -> dict:
        return {"share": step.share, **self._held(AuthChange(step.action, share=step.share), step.duration)}

    def rollback(self) -> list[str]:
        """Put the target back (replicas up, rings restored, commands' changes undone); journaled like an action."""
        started = time.time()
        self.journal.write(ChaosStarted(type=RecordType.CHAOS, phase=ChaosPhase.START, t=started, action="rollback",
                                        target="all", detail={}))
        undone, errors = self.debts.pay()
        try:
            undone += self.target.rollback()
        except RollbackIncomplete as exc:
            undone += exc.undone
            errors.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - a rollback that failed is journaled; the teardown goes on
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.commands.close()
        ok, error = not errors, "; ".join(errors) or None
        ended = time.time()
        self.journal.write(ChaosEnded(type=RecordType.CHAOS, phase=ChaosPhase.END, t=ended, action="rollback",
                                      target="all", ok=ok, error=error, seconds=round(ended - started, 3),
                                      detail={"undone": undone}))
        if self.spans is not None:
            self.spans.chaos("rollback", "all", started, ended, error)
        return undone


def _unhandled() -> list[str]:
    """The declared actions without a handler: an action is its model and its handler, never one of them."""
    return sorted(name for name, model in CHAOS_ACTIONS.items() if model not in HANDLERS)


if _unhandled():
    raise TypeError(f"chaos actions without a handler: {', '.join(_unhandled())}")


def _rounded(seconds: list[float]) -> float | list[float]:
    """Seconds until each replica served again, to the millisecond: one figure for one replica."""
    rounded = [round(value, 3) for value in seconds]
    return rounded[0] if len(rounded) == 1 else rounded
