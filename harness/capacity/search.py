"""Which arrival rate to try next: step through a list, or ramp until the SLO breaks and then bisect.

Pure: the caller passes `judge(rate) -> Judgement`, which runs (or, in tests, pretends to
run) one step. A step where the load generator saturated says nothing about the server,
so it ends the climb for that replica count without counting as a break: above it the
harness cannot tell, below it the holds stand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from harness.capacity.sweep_plan import RateSearch


class Judgement(StrEnum):
    HOLD = "hold"  # every SLO threshold held over the steady window
    BREAK = "break"  # a threshold (or an invariant) failed: the server's limit is below this rate
    SATURATED = "saturated"  # the harness itself could not keep up: no verdict on the server


Judge = Callable[[float], Judgement]


@dataclass(frozen=True)
class Tried:
    rate: float
    judgement: Judgement


@dataclass(frozen=True)
class Limit:
    """What the steps of one replica count say about its capacity."""

    held: float | None  # the highest rate that held (None: not even the lowest)
    broke: float | None  # the lowest rate that broke, above `held` (None: none broke)
    saturated: float | None  # the lowest rate where the generator saturated (None: never)

    @property
    def found(self) -> bool:
        """Whether a real break was seen (not a saturated generator): the limit lies below `broke`."""
        return self.broke is not None


def nice_rate(rate: float) -> float:
    """Three significant digits: rates in a table and a folder name, not 23.4567891."""
    return float(f"{rate:.3g}")


def step_through(rates: list[float], judge: Judge) -> list[Tried]:
    """Each rate in rising order, stopping after the first break or saturated step (higher says nothing new)."""
    tried = []
    for rate in sorted(rates):
        judgement = judge(rate)
        tried.append(Tried(rate, judgement))
        if judgement is not Judgement.HOLD:
            break
    return tried


def search(plan: RateSearch, judge: Judge) -> list[Tried]:
    """Multiply the rate by `factor` from `start` until a step breaks (or `max` holds), then bisect.

    The bisection runs between the last hold (0 when the start already broke) and the
    first break, `refine` times, on rates rounded to three digits; it stops early when
    the bracket is too narrow to give a new rate.
    """
    tried: list[Tried] = []
    low, high = 0.0, None
    for rate in ramp(plan):
        judgement = judge(rate)
        tried.append(Tried(rate, judgement))
        if judgement is Judgement.SATURATED:
            return tried
        if judgement is Judgement.BREAK:
            high = rate
            break
        low = rate
    if high is None:
        return tried
    for _ in range(plan.refine):
        middle = nice_rate((low + high) / 2)
        if not low < middle < high:
            break
        judgement = judge(middle)
        tried.append(Tried(middle, judgement))
        if judgement is Judgement.HOLD:
            low = middle
        elif judgement is Judgement.BREAK:
            high = middle
        else:
            break
    return tried


def ramp(plan: RateSearch) -> Iterator[float]:
    """The search's rising rates before its first break: `start`, times `factor` each step, the last one `max`."""
    rate = nice_rate(plan.start)
    while True:
        yield rate
        if rate >= plan.max:
            return
        rate = min(nice_rate(rate * plan.factor), plan.max)


def most_steps(plan: RateSearch) -> int:
    """The most steps a search can run: the whole ramp, then `refine` bisections after a break at its top."""
    return sum(1 for _ in ramp(plan)) + plan.refine


def limit_of(tried: list[Tried]) -> Limit:
    """The highest hold, the lowest break above it, and the lowest saturated rate."""
    holds = [t.rate for t in tried if t.judgement is Judgement.HOLD]
    held = max(holds) if holds else None
    breaks = [t.rate for t in tried if t.judgement is Judgement.BREAK and (held is None or t.rate > held)]
    saturated = [t.rate for t in tried if t.judgement is Judgement.SATURATED]
    return Limit(held, min(breaks) if breaks else None, min(saturated) if saturated else None)
