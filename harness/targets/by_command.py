"""A target whose chaos is the user's commands: `[target.commands]`, as one more implementation of `Target`.

The harness cannot restart a pod or rewrite a Kubernetes Secret itself, but the user has a
command for each. `CommandTarget` wraps the target the run started or reached: an operation
with a command in the table runs it (`harness.targets.commands.ChaosCommands`: placeholders
filled, journaled, the replica waited for), one without goes to the wrapped target, which may
raise `ChaosUnsupported`. What a command changed is owed back: a paused replica's resume, a
TTL, name or clock set back to the target's own value, a rotation cut short finished
forward (the harness never holds the deployment's old keys), on the run's one list of debts
(`harness.targets.rollback_debts.RollbackDebts`). `rollback` pays what is still owed, newest first, then rolls back
the wrapped target. Which command makes, ends and puts back an authorization server action is
that action's declaration (`harness.config.chaos.AuthCommands`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from harness.config.chaos import COMMAND_NAMES, auth_commands, knob_commands
from harness.config.logs import LogSource
from harness.mrtr.keys import fingerprint
from harness.targets.commands import ChaosCommands
from harness.targets.health import ReplicaHealth
from harness.targets.interface import AuthChange, ChaosUnsupported, ReplicaChange, Target
from harness.targets.ledger_check import LedgerCheck
from harness.targets.rollback_debts import RollbackDebts

__all__ = ["CommandTarget", "RollbackIncomplete"]

logger = logging.getLogger(__name__)

_RECONFIGURE_COMMANDS = knob_commands()
"""A `ReplicaChange` field (a replica knob) -> the command that makes it, and the placeholder its value fills: read
off the chaos actions that turn a knob (`ChaosAction.turns`)."""


class CommandTarget:
    """`inner`, with every operation the scenario has a command for done by that command instead."""

    def __init__(self, inner: Target, commands: ChaosCommands, original: ReplicaChange,
                 debts: RollbackDebts | None = None) -> None:
        self.inner = inner
        self.commands = commands
        self.original = original
        """The target's own values (its TTL in real seconds, its name, no skew): what reconfiguring sets back."""
        self.debts = debts if debts is not None else RollbackDebts()
        """What the rollback owes for changes made by command (the run's one `RollbackDebts`, when it hands one)."""
        self.ran: list[dict[str, object]] = []
        """The commands run since `take_ran()` last emptied it: what the current action's end record shows."""
        self._promoted: dict[str, set[int]] = {}

    # --- what the run reads: the wrapped target's -------------------------------------------------

    @property
    def labels(self) -> list[str]:
        return self.inner.labels

    @property
    def urls(self) -> list[str]:
        return self.inner.urls

    def ledger_check(self) -> LedgerCheck | None:
        return self.inner.ledger_check()

    def start(self) -> None:
        self.inner.start()

    def stop(self) -> None:
        self.inner.stop()

    def log_sources(self) -> list[LogSource]:
        return self.inner.log_sources()

    def cpu_seconds(self) -> dict[str, tuple[int, float]]:
        return self.inner.cpu_seconds()

    def replica_health(self) -> dict[str, ReplicaHealth]:
        return self.inner.replica_health()

    def target_pids(self) -> set[int]:
        return self.inner.target_pids()

    def replicas_up(self) -> int:
        return self.inner.replicas_up()

    def take_ran(self) -> list[dict[str, object]]:
        """The commands run since the last call (each journaled in full as its own `command` record)."""
        ran, self.ran = self.ran, []
        return ran

    # --- chaos ------------------------------------------------------------------------------------

    def restart(self, index: int, *, kill: bool = False) -> float:
        name = "kill" if kill else "restart"
        if not self.commands.has(name):
            return self.inner.restart(index, kill=kill)
        return self._timed(lambda: self._run(name, [index]))

    def pause(self, index: int) -> None:
        if not self.commands.has("pause"):
            self.inner.pause(index)
            return
        if not self.commands.has("resume"):
            raise ChaosUnsupported("pause by command needs a resume command too ([target.commands] resume)")
        self.debts.owe(f"resumed {self.labels[index]}", lambda: self._run("resume", [index]), key=("resume", index))
        self._run("pause", [index], wait=False)

    def resume(self, index: int) -> None:
        if not self.commands.has("resume"):
            self.inner.resume(index)
            return
        self._run("resume", [index])
        self.debts.paid(("resume", index))

    def reconfigure(self, replicas: Sequence[int], change: ReplicaChange) -> list[float]:
        """Each field by its command where there is one (set-ttl, rename, clock-skew), the rest by the wrapped
        target; each command's change is owed back with the target's own value."""
        by_command = [field for field in change.changed()
                      if field in _RECONFIGURE_COMMANDS and self.commands.has(_RECONFIGURE_COMMANDS[field][0])]
        rest = dataclasses.replace(change, **dict.fromkeys(by_command))
        ready = self.inner.reconfigure(replicas, rest) if rest.changed() else []
        for field in by_command:
            name, placeholder = _RECONFIGURE_COMMANDS[field]
            back = {placeholder: _text(getattr(self.original, field) or 0)}
            self.debts.owe(f"{name} {back[placeholder]} on {','.join(self.labels[r] for r in replicas)}",
                           functools.partial(self._run, name, list(replicas), back, action="rollback"))
            ready.append(self._timed(functools.partial(self._run, name, replicas,
                                                       {placeholder: _text(getattr(change, field))})))
        return ready

    def add_key(self, replicas: Sequence[int], key: str) -> None:
        if not self.commands.has("add-key"):
            self.inner.add_key(replicas, key)
            return
        if key not in self._promoted:
            self._promoted[key] = set()
            self.debts.owe(f"new key {fingerprint(key)} added and promoted on every replica",
                           lambda: self._finish_rotation(key), key=("rotation", key))
        self._run("add-key", replicas, self._handed(key))

    def promote_key(self, replicas: Sequence[int], key: str) -> None:
        if not self.commands.has("promote-key"):
            self.inner.promote_key(replicas, key)
            return
        self._run("promote-key", replicas, self._handed(key))
        promoted = self._promoted.setdefault(key, set())
        promoted.update(replicas if self.commands.per_replica(self.commands.table["promote-key"])
                        else range(len(self.labels)))
        if len(promoted) == len(self.labels):  # every replica seals with it: nothing is owed any more
            self.debts.paid(("rotation", key))

    def retire_old_keys(self, replicas: Sequence[int], key: str) -> None:
        if not self.commands.has("retire-key"):
            self.inner.retire_old_keys(replicas, key)
            return
        self._run("retire-key", replicas, self._handed(key))

    def sealing_key(self, index: int) -> str | None:
        return None if self.commands.has("add-key") else self.inner.sealing_key(index)

    def auth_change(self, change: AuthChange) -> dict[str, object]:
        """The authorization server's change by its declared command (`AuthCommands`); what stays changed is owed
        back."""
        declared = auth_commands(change.action)
        name, placeholders = _auth_command(declared.on, change, {}) if change.on or declared.off is None \
            else _auth_command(declared.off, change, declared.off_values)
        if not self.commands.has(name):
            return self.inner.auth_change(change)
        everyone = list(range(len(self.labels)))
        undo = _auth_command(declared.restore, change, declared.off_values) if declared.restore else None
        if change.on and undo is not None and self.commands.has(undo[0]):
            self.debts.owe(f"{undo[0]} (after {change.action})",
                           functools.partial(self._run, undo[0], everyone, undo[1], action="rollback"),
                           key=("auth", change.action))
        self._run(name, everyone, placeholders)
        if not change.on:
            self.debts.paid(("auth", change.action))
        return {"by_command": name}

    def rollback(self) -> list[str]:
        """Every debt paid, newest first (one that fails is reported, the others still run), then the wrapped
        target's own rollback; the key files handed to commands are deleted."""
        try:
            undone, errors = self.debts.pay()
            try:
                undone += self.inner.rollback()
            except Exception as exc:  # noqa: BLE001 - reported with the debts that failed
                errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.commands.close()
        if errors:
            raise RollbackIncomplete(undone, errors)
        return undone

    # --- helpers ----------------------------------------------------------------------------------

    def _run(self, name: str, replicas: Sequence[int], extra: dict[str, str] | None = None, *,
             wait: bool = True, action: str | None = None) -> None:
        self.ran += self.commands.run_on(action or name, name, replicas, extra, wait=wait)

    def _handed(self, key: str) -> dict[str, str]:
        """What a key step is handed: the key's fingerprint and a 0600 file holding it (deleted after the run)."""
        return {"key_id": fingerprint(key), "key_file": str(self.commands.key_file(key))}

    def _finish_rotation(self, key: str) -> None:
        everyone = list(range(len(self.labels)))
        self._run("add-key", everyone, self._handed(key), action="rollback")
        self._run("promote-key", everyone, self._handed(key), action="rollback")

    def _timed(self, do: Callable[[], None]) -> float:
        started = time.monotonic()
        do()
        return time.monotonic() - started


def _auth_command(name: str, change: AuthChange, fixed: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """Command `name` with its placeholders filled from `change` (the ones `fixed` gives aside)."""
    values: dict[str, float | str] = {"lifetime": change.lifetime or 0, "share": change.share or 0,
                                      "scope": change.scope or ""}
    return name, {placeholder: fixed[placeholder] if placeholder in fixed else _text(values[placeholder])
                  for placeholder in sorted(COMMAND_NAMES[name])}


class RollbackIncomplete(RuntimeError):
    """Some debts could not be paid: what was undone, and why the rest failed."""

    def __init__(self, undone: list[str], errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.undone = undone


def _text(value: float | str) -> str:
    return f"{value:g}" if isinstance(value, float | int) else str(value)
