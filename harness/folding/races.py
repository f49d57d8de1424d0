"""The race probes' table, folded from the `race` flows' records: races by probe and how they ended, the watchdog.

Each race flow's `flow` record says its probe, its two calls' answers, watch and replicas, and whether
they agreed (`harness.load.races`). Folded here: races per probe (agreed, disagreed, not judged), the
answer pairs, how many really overlapped and how many crossed two replicas, each call's watch (`ok`,
`slow`, `hung`: the `watchdog_calls` metric), a few examples of each mismatch, and per whole second of the run
how many races began and disagreed, so the races that fell inside a `rotate-keys` step are counted once
the chaos records are in (a journal's parts fold in any order). The size grows only with the run's
seconds that had a race (two keys each), not with the races.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.flows import RACE_PROBES

EXAMPLES = 5
"""Mismatches kept as examples."""
ROTATION = "rotate-keys"
_VERDICTS = ("agreed", "disagreed", "not_judged")


@dataclass
class RaceFigures:
    """Every race flow's race, counted (see the module)."""

    races: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(probe, agreed / disagreed / not_judged) -> races."""
    pairs: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(probe, `answer / answer` in the order sent) -> races."""
    overlapped: Counter[str] = field(default_factory=Counter)
    """Per probe: races whose two calls were on the wire at once."""
    two_replicas: Counter[str] = field(default_factory=Counter)
    """Per probe: races whose two calls two different replicas answered."""
    watch: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(probe, ok / slow / hung) -> calls."""
    by_second: Counter[tuple[int, str]] = field(default_factory=Counter)
    """(whole second of the run's clock a race began, `raced` / `disagreed`) -> races."""
    examples: list[str] = field(default_factory=list)
    """The first mismatches (`EXAMPLES`), each `flow probe on replicas: answers`."""

    def add(self, record: Mapping[str, Any]) -> None:
        """One `flow` record of a race flow (one with `race`)."""
        probe = str(record.get("race"))
        answers, watch, replicas = (_strings(record.get(key)) for key in ("race_answers", "race_watch",
                                                                             "race_replicas"))
        agreed = record.get("race_agreed")
        verdict = _VERDICTS[2] if agreed is None else _VERDICTS[0] if agreed else _VERDICTS[1]
        self.races[(probe, verdict)] += 1
        self.pairs[(probe, " / ".join(answers))] += 1
        self.overlapped[probe] += bool(record.get("race_overlapped"))
        self.two_replicas[probe] += len(set(replicas)) > 1
        for state in watch:
            self.watch[(probe, state)] += 1
        at = record.get("race_at")
        if isinstance(at, int | float) and math.isfinite(at):
            self.by_second[(int(at), "raced")] += 1
            self.by_second[(int(at), "disagreed")] += agreed is False
        if agreed is False and len(self.examples) < EXAMPLES:
            self.examples.append(f"{record.get('flow_id')} {probe} on {' / '.join(replicas)}: {' / '.join(answers)}")

    def merge(self, later: RaceFigures) -> None:
        """The fold of this stretch's records then `later`'s (`harness.folding.merging`): examples keep their order."""
        for name in ("races", "pairs", "overlapped", "two_replicas", "watch", "by_second"):
            getattr(self, name).update(getattr(later, name))
        self.examples.extend(later.examples[:EXAMPLES - len(self.examples)])

    @property
    def raced(self) -> int:
        return self.races.total()

    def during_rotation(self, chaos: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """The races that began inside a `rotate-keys` step (to the whole second), and how many disagreed; or that
        none was exercised, and why."""
        windows = _windows(chaos, ROTATION)
        if not windows:
            return {"exercised": False, "why": "the scenario has no rotate-keys chaos step", "raced": 0,
                    "disagreed": 0}
        raced = disagreed = 0
        for (second, what), n in self.by_second.items():
            if any(start <= second <= end for start, end in windows):
                raced += n if what == "raced" else 0
                disagreed += n if what == "disagreed" else 0
        result: dict[str, Any] = {"exercised": raced > 0, "raced": raced, "disagreed": disagreed,
                                  "steps": len(windows)}
        if not raced:
            result["why"] = "no race began while a rotate-keys step ran"
        return result

    def table(self, chaos: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
        """summary.json's `races`: None in a run with no race."""
        if not self.raced:
            return None
        probes = sorted({probe for probe, _ in self.races}, key=_probe_order)
        return {
            "raced": self.raced,
            "by_probe": {probe: {
                "raced": sum(n for (name, _), n in self.races.items() if name == probe),
                **{verdict: self.races[(probe, verdict)] for verdict in _VERDICTS},
                "overlapped": self.overlapped[probe], "two_replicas": self.two_replicas[probe],
                "answers": {pair: n for (name, pair), n in sorted(self.pairs.items()) if name == probe},
                "watchdog": {state: self.watch[(probe, state)] for state in ("ok", "slow", "hung")}}
                for probe in probes},
            "disagreed": sum(n for (_, verdict), n in self.races.items() if verdict == "disagreed"),
            "examples": list(self.examples),
            "during_rotation": self.during_rotation(chaos),
            "watchdog": {state: sum(n for (_, name), n in self.watch.items() if name == state)
                         for state in ("ok", "slow", "hung")},
        }


def _windows(chaos: Iterable[Mapping[str, Any]], action: str) -> list[tuple[int, int]]:
    """Each step of `action`, as whole seconds from its start's to its end's (one still running: to the end)."""
    windows: list[tuple[int, int]] = []
    open_at: list[float] = []
    for row in chaos:
        t = row.get("t")
        if row.get("action") != action or not isinstance(t, int | float) or not math.isfinite(t):
            continue
        if row.get("phase") == "start":
            open_at.append(float(row["t"]))
        elif open_at:
            windows.append((int(open_at.pop(0)), math.ceil(float(row["t"]))))
    windows += [(int(start), 2 ** 62) for start in open_at]
    return windows


def _strings(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _probe_order(probe: str) -> int:
    return RACE_PROBES.index(probe) if probe in RACE_PROBES else len(RACE_PROBES)
