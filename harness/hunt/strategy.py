"""The strategy seam: how the search picks each trial's schedule, from the trials so far.

A strategy is one module of `harness.hunt.strategies`: a subclass of `Strategy` with its `name`
(one of `StrategyName`, which `[hunt] strategy` and `--strategy` validate against) and one method,
`next(history) -> Schedule`, the next search trial's schedule. `history` is every trial the hunt
ran so far, oldest first (the controls, then the search's), each a `Tried`: the trial as judged
(its schedule, failures, reasons, whether it was judged), its hunt.jsonl record
(`harness.hunt.records.TrialRecord`), and its results folder, whose `summary.json` and
`journal.jsonl` a strategy that learns from the runs themselves reads (as untrusted data, through
the harness's own readers). A strategy is built once per hunt from the space it may draw from,
the hunt's seed and the replicas' labels.

A strategy draws from seeded streams of the hunt's seed (`harness.load.seeding.stream`) and from
`history` alone, never from the clock or a state it keeps: the same seed and the same trials so far
give the same schedule, in any process, so `hunt --seed S` draws again what it drew, and the hunt
can ask for the first schedule before anything starts (`Hunt.first_scenario`, with no history).
A schedule's steps come through the draw (`harness.hunt.draw.draw_step`) or `chaos_step`, so every
step validates and the draw's rules (windows within the trial, a TTL below the target's) hold.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, get_args

from harness.config.hunt import StrategyName
from harness.hunt.draw import Space
from harness.hunt.model import Schedule, Trial
from harness.hunt.records import TrialRecord


@dataclass(frozen=True)
class Tried:
    """One trial the hunt ran, as a strategy reads it."""

    trial: Trial
    """The trial as judged: its schedule (steps as models), failures, reasons, `unjudged`."""
    record: TrialRecord
    """Its record in hunt.jsonl, as written."""
    folder: Path
    """Its results folder (a run's: summary.json, journal.jsonl, scenario.toml)."""


def searched(history: Sequence[Tried]) -> int:
    """How many search trials the history holds: the next one's index (1-based) is one more."""
    return sum(1 for tried in history if tried.trial.purpose == "search")


class Exhausted(Exception):
    """A strategy with no schedule left to try within the hunt's bounds: its text is the certificate of what the
    search covered (`lineage`'s), and the hunt stops with it (`stopped_by` "certified", nothing broke)."""


class Strategy(ABC):
    """How the search draws: `next(history)` is the next search trial's schedule."""

    name: ClassVar[StrategyName]
    """Its name, as `[hunt] strategy` and `--strategy` give it."""

    def __init__(self, space: Space, seed: int, labels: Sequence[str]) -> None:
        self.space = space
        self.seed = seed
        self.labels = list(labels)
        """The replicas' labels (r1, r2, ...), as the coverage names whom a step acts on."""

    @abstractmethod
    def next(self, history: Sequence[Tried]) -> Schedule:
        """The next search trial's schedule, from the seed and the trials so far alone; `Exhausted` when none is
        left to try."""


_STRATEGIES: dict[str, type[Strategy]] = {}


def strategies() -> dict[str, type[Strategy]]:
    """Every strategy by its name: each module of `harness.hunt.strategies` imported once. A module whose strategy is
    not a `StrategyName`, a name with no strategy or two strategies of one name raise TypeError: a half added
    strategy fails at its first use (and in the tests), not in a hunt."""
    if not _STRATEGIES:
        from harness.hunt import strategies as package

        found: dict[str, type[Strategy]] = {}
        for module in pkgutil.iter_modules(package.__path__):
            loaded = importlib.import_module(f"{package.__name__}.{module.name}")
            for item in vars(loaded).values():
                if isinstance(item, type) and issubclass(item, Strategy) and item.__module__ == loaded.__name__:
                    if item.name in found:
                        raise TypeError(f"two strategies are named {item.name!r}: {found[item.name].__module__} and "
                                        f"{loaded.__name__}")
                    found[item.name] = item
        named = set(get_args(StrategyName))
        if set(found) != named:
            raise TypeError(f"the strategies ({', '.join(sorted(found))}) are not those StrategyName names "
                            f"({', '.join(sorted(named))}) in harness.config.hunt: add or remove the name there")
        _STRATEGIES.update(found)
    return dict(_STRATEGIES)


def strategy_for(name: StrategyName, space: Space, seed: int, labels: Sequence[str]) -> Strategy:
    """The named strategy, built for this hunt."""
    return strategies()[name](space, seed, labels)
