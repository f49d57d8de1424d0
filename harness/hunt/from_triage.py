"""`hunt --from-triage FILE`: the reasons a production incident's replicas logged steer the hunt to the chaos that
provokes them, as Anduril uses a failure's logs to steer its fault injection.

FILE is `mrtr-harness triage --once --json` output (`harness.triage.display.as_json`), read from production
logs and so untrusted: it is parsed as JSON alone, at most `MOST_BYTES`, and only what steering needs is kept
(`by_reason`, `by_reason_and_replica`); a reason outside the vocabulary is ignored and named, a replica's label
passes `harness.foreign_text.line`. Each chaos action declares, on its model, the reasons it can make replicas log
(`ChaosAction.provokes`, `harness.config.chaos`); `steer` narrows the actions a hunt draws to those provoking a
reason triage counted, and says which counted reasons no drawable action provokes. The property gains "the logged
reasons reproduced": a trial whose replicas log one of them fails (`expect_table`, the thresholds a catalogue
scenario's `[reproduces]` states), so the failure found, shrunk and handed over in minimal.toml is one that
reproduces a triaged reason.

Replicas are not narrowed: the replica that logs a reason is often not the one the fault acted on (a state sealed
by a restarted r1 is refused on r2), and production's labels are not the hunt's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import foreign_text
from harness.capped_read import TooLarge, read_capped
from harness.config.chaos import CHAOS_ACTIONS
from harness.errors import UsageError
from harness.vocabulary import OTHER_REASON, REASONS

MOST_BYTES = 4 << 20
"""The largest triage file read: `triage --json` writes a few kilobytes; more is not its output."""
MOST_REPLICAS = 64
"""Replica labels kept per reason (a deployment's pods; the rest are counted in, not named)."""
MOST_IGNORED = 10
"""Unknown reason names kept to say (each a line of at most `NAME_CHARS`)."""
NAME_CHARS = 64

NOT_BY_CHAOS: frozenset[str] = frozenset({"seal", "malformed", "non-string requestState", "request binding",
                                          "codec error", "principal", "principal binding error"})
"""The reasons no chaos action provokes: a changed token or a misbehaving client (seal, malformed, non-string
requestState, request binding: the load's mutations reproduce those), the server's own code (codec error, principal
binding error) or another user retrying a state (principal). Every other reason of the vocabulary has an action
that provokes it (tests/test_hunt_from_triage.py holds the registry to it)."""


class TriageFileError(UsageError):
    """The triage file cannot steer a hunt (unreadable, not triage's JSON, or nothing to steer by): exit 2."""


@dataclass(frozen=True)
class Triaged:
    """What a triage file counted, as steering reads it."""

    counts: dict[str, int]
    """Each reason of the vocabulary triage counted rejections of (more than 0), in the SDK's order."""
    replicas: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each counted reason's replicas, as triage labelled them (made one safe line each)."""
    ignored: tuple[str, ...] = ()
    """Names `by_reason` gave that are no reason of the vocabulary (made safe), a few."""


@dataclass(frozen=True)
class Steering:
    """Where the triaged reasons steer a hunt."""

    triaged: Triaged
    actions: tuple[str, ...]
    """The drawable actions that provoke a counted reason, in the registry's order."""
    provoked: tuple[str, ...]
    """The counted reasons those actions provoke."""
    unprovoked: dict[str, str] = field(default_factory=dict)
    """Each counted reason no drawable action provokes, and why (a sentence naming it)."""
    source: str = ""
    """The triage file, as the command line named it (a rerun of the hunt names it again)."""
    drawable: tuple[str, ...] = ()
    """The actions the hunt could draw before the steering narrowed them."""

    def left_out(self, action: str) -> str | None:
        """Why the steering left a drawable action out; None when it did not."""
        if action in self.drawable and action not in self.actions:
            return "it provokes no reason triage counted"
        return None

    def counted(self) -> str:
        """`unknown key 41, expired 3`."""
        return ", ".join(f"{reason} {count:,}" for reason, count in self.triaged.counts.items())

    def start_line(self) -> str:
        """`from triage: unknown key 41, expired 3 → restart, kill, rotate-keys, set-ttl`."""
        return f"from triage: {self.counted()} → {', '.join(self.actions) or 'no action'}"

    @property
    def controls_only(self) -> bool:
        """No drawable action provokes a counted reason: only the control trials can show the deployment logging them
        as it stands (a client's changed arguments, a replica's clock, per-process keys: its own settings)."""
        return not self.actions

    def nothing_to_draw(self, controls_held: int | None = None) -> str:
        """Why a hunt steered to no action searches nothing (after `controls_held` control trials that held)."""
        held = (f"; {controls_held} control trial{'s' if controls_held != 1 else ''} without chaos held, so the "
                "deployment alone does not log them either" if controls_held is not None else "")
        return (f"from triage: {self.counted()}: no action this hunt may draw can provoke a reason triage counted, "
                f"so no search could reproduce it ({'; '.join(self.unprovoked.values())}){held}")

    def lines(self) -> list[str]:
        """What the hunt says before its first trial: where it is steered, what the property gains, what no action
        it draws can provoke."""
        lines = [self.start_line()]
        if self.provoked:
            lines.append(f"from triage: the property gains the logged reasons reproduced: a trial whose replicas "
                         f"log {' or '.join(self.provoked)} fails")
        lines += [f"from triage: {why}" for why in self.unprovoked.values()]
        if self.controls_only:
            lines.append(f"from triage: so only the control trials run, with {' or '.join(self.triaged.counts)} "
                         "counted: a deployment that logs them without chaos reproduces them as it stands")
        if self.triaged.ignored:
            lines.append(f"from triage: ignored, no reason the SDK logs: {', '.join(self.triaged.ignored)}")
        return lines

    def as_data(self) -> dict[str, Any]:
        """For hunt.json."""
        replicas = {reason: list(labels) for reason, labels in self.triaged.replicas.items()}
        return {"file": self.source, "counts": dict(self.triaged.counts), "replicas": replicas,
                "actions": list(self.actions), "provoked": list(self.provoked), "unprovoked": dict(self.unprovoked),
                "ignored": list(self.triaged.ignored)}


def read_triage(path: Path) -> Triaged:
    """A triage file's counts; TriageFileError when it cannot be read as triage's JSON."""
    try:
        raw = read_capped(path, MOST_BYTES)
    except OSError as exc:
        raise TriageFileError(f"--from-triage {path}: cannot read it: {exc.strerror or exc}") from None
    except TooLarge:
        raise TriageFileError(f"--from-triage {path}: larger than {MOST_BYTES >> 20} MiB: not `triage --json` "
                              "output") from None
    return parse_triage(raw, str(path))


def parse_triage(raw: bytes | str, source: str = "the triage file") -> Triaged:
    """`triage --json` output's counts by reason and replica; TriageFileError for anything else. JSON only, nothing
    evaluated; what is kept is bounded."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, a huge number; too deep a nesting
        raise TriageFileError(f"--from-triage {source}: not JSON ({foreign_text.line(exc, 200)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("by_reason"), dict):
        raise TriageFileError(f"--from-triage {source}: not `mrtr-harness triage --json` output (no by_reason table)")
    known = (*REASONS, OTHER_REASON)
    counts: dict[str, int] = {}
    ignored: list[str] = []
    for name, count in data["by_reason"].items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise TriageFileError(f"--from-triage {source}: by_reason {foreign_text.line(name, NAME_CHARS)!r} is "
                                  "not a count")
        if name not in known:
            if len(ignored) < MOST_IGNORED:
                ignored.append(foreign_text.line(name, NAME_CHARS))
        elif count:
            counts[name] = count
    by_replica = data.get("by_reason_and_replica")
    replicas = {reason: _labels(by_replica.get(reason)) for reason in counts} if isinstance(by_replica, dict) else {}
    ordered = {reason: counts[reason] for reason in known if reason in counts}
    return Triaged(ordered, {reason: labels for reason, labels in replicas.items() if labels}, tuple(ignored))


def _labels(replicas: object) -> tuple[str, ...]:
    """The replicas that logged a reason (those with a count above 0), each a safe line, a bounded few."""
    if not isinstance(replicas, dict):
        return ()
    labels = [foreign_text.line(label, NAME_CHARS) for label, count in replicas.items()
              if isinstance(count, int) and not isinstance(count, bool) and count > 0]
    return tuple(sorted(set(labels)))[:MOST_REPLICAS]


def provokers(reason: str) -> tuple[str, ...]:
    """Every chaos action that declares it can provoke `reason`, in the registry's order."""
    return tuple(name for name, model in CHAOS_ACTIONS.items() if reason in model.provokes)


def steer(triaged: Triaged, drawable: Sequence[str], source: str = "") -> Steering:
    """The drawable actions narrowed to those provoking a reason triage counted; the counted reasons none of them
    provokes, each with why. TriageFileError when triage counted no rejection (nothing to steer by)."""
    if not triaged.counts:
        raise TriageFileError("--from-triage: the triage file counts no rejection: nothing to steer the hunt by (run "
                              "the hunt without it)")
    actions: dict[str, None] = {}
    provoked, unprovoked = [], {}
    for reason in triaged.counts:
        every = provokers(reason)
        mine = [name for name in every if name in drawable]
        if mine:
            provoked.append(reason)
            actions.update(dict.fromkeys(mine))
        elif every:
            unprovoked[reason] = f"only {', '.join(every)} provoke {reason}, which this hunt does not draw"
        elif reason == OTHER_REASON:
            unprovoked[reason] = f"no chaos action is known to provoke {reason} (a reason this harness does not know)"
        else:
            unprovoked[reason] = (f"no chaos action provokes {reason}: a changed token, a client's bug or the "
                                  "server's own code (the on-call catalogue's scenarios reproduce those)")
    ordered = tuple(name for name in CHAOS_ACTIONS if name in actions)
    return Steering(triaged, ordered, tuple(provoked), unprovoked, source, tuple(drawable))


def expect_table(steering: Steering) -> dict[str, str]:
    """The thresholds that make "the logged reasons reproduced" part of the property: each provoked reason's
    rejections must stay 0, so a trial that provokes one fails, and minimal.toml's `[reproduces]` says `> 0`. With
    no action to draw, every counted reason: the controls judge the deployment as it stands."""
    reasons = steering.triaged.counts if steering.controls_only else steering.provoked
    return {f"rejections{{reason='{reason}'}}": "== 0" for reason in reasons}


def steered_overrides(steering: Steering, overrides: Mapping[str, Any], own_expect: Mapping[str, Any] | None,
                      ) -> dict[str, Any]:
    """The hunt's overrides with the steering applied: the actions narrowed, `[expect]` the logged reasons (beside the
    scenario's own only when `--expect` counts it) and counted."""
    expect = {**(own_expect or {}), **expect_table(steering)}
    narrowed = {} if steering.controls_only else {"hunt.actions": list(steering.actions)}  # no search runs
    return {**overrides, **narrowed, "hunt.expect": True, "expect": expect}
