"""Think time against TTL: the share of request states that expire before the lead answers.

The model. A replica mints a `requestState` while it answers the round that asks the
lead (the SDK stamps `iat` = now and `exp` = now + TTL, float seconds) and checks it when
the retry arrives. Between the two lie: the rest of that response's trip back, the
lead's think time, and the retry's trip and wait in the server's queue before the
check. The prediction takes the lead's think time for the whole gap, so

    predicted share per retry = P(think > TTL) = think.survival(TTL)

and ignores the trips and the queueing: milliseconds against a TTL of seconds (scaled
runs) to minutes (production), as long as the server holds its latency SLO. An
overloaded server adds its queueing to every gap, so there the measured share runs
above the prediction; that is why the sweep pools the measurement over steps that held.
Both think and TTL are modelled times divided by the same `time_scale`, so the share
does not depend on the scale; the ignored overheads are real time, and in modelled
terms they grow with the scale (20 ms at scale 240 is 4.8 modelled seconds).

Beside it, each step gets the prediction with its own measured overhead: the retries'
round latency (send to answer, which covers the trip and the queue before the check,
and for an accepted retry also the work after it, so it errs towards expiry) added to
the think time, P(think + latency * time_scale > TTL) averaged over the step's retries.
Where the two predictions differ, the server's latency, not the leads, expired states.

The measurement, per step: retries sent (rounds numbered 2 and up: every retry carries
its state, declines and cancels included; an abandoning lead sends none) and the
replicas' logged `expired` rejections, so measured share = expired / retries. A state
whose lead was still thinking when the step ended sent no retry and is in neither
count; `unanswered` says how many, and a grace period longer than the think time's
p99 keeps them few.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from harness.config.durations import format_duration
from harness.config.think import ThinkTime
from harness.journal.records import RecordType
from harness.mrtr.outcome import Outcome

EXPIRED = "expired"
TTL_UNITS = ((60.0, 1.0), (3600.0, 60.0), (86400.0, 300.0), (math.inf, 3600.0))
"""(up to, round to): a TTL under a minute to whole seconds, under an hour to whole minutes, then 5 min, then hours."""
MARGIN = 0.02
"""Added to 3 binomial standard errors when a measurement is compared with the prediction:
the overheads the model ignores, and the states cut off at the end of a step."""


def predicted_share(think: ThinkTime, ttl: float) -> float:
    """P(think > TTL): the share of retries whose state has expired when it arrives."""
    return think.survival(ttl)


def round_up_ttl(seconds: float) -> float:
    """The next value above `seconds` in a sensible unit (strictly above: a TTL equal to the think time expires it)."""
    for limit, unit in TTL_UNITS:
        if seconds < limit:
            return (math.floor(seconds / unit) + 1) * unit
    return math.inf


def recommend_ttl(think: ThinkTime, target: float, overhead: float = 0.0) -> float:
    """The TTL that keeps the expired share under `target`: think's (1 - target) quantile plus the
    round-trip overhead (seconds), rounded up to a sensible unit; `inf` when no finite TTL does."""
    if not 0 < target < 1:
        raise ValueError(f"an expiry target is a share between 0 and 1, got {target!r}")
    quantile = think.quantile(1.0 - target)
    if not math.isfinite(quantile):
        return math.inf
    return round_up_ttl(quantile + max(0.0, overhead))


def tolerance(predicted: float, samples: int, *, z: float = 3.0, margin: float = MARGIN) -> float:
    """How far a measured share may sit from the prediction: z binomial standard errors plus a margin."""
    if samples <= 0:
        return math.inf
    return z * math.sqrt(predicted * (1.0 - predicted) / samples) + margin


@dataclass(frozen=True)
class ExpiryMeasurement:
    """One step's (or several pooled) retries and expired states."""

    states: int  # rounds that asked the lead (each minted a state)
    retries: int  # rounds numbered 2 and up
    expired: int  # `expired` rejections the replicas logged
    retry_latencies: tuple[float, ...] = ()  # real seconds, one per retry that got an answer

    @property
    def share(self) -> float | None:
        return self.expired / self.retries if self.retries else None

    @property
    def unanswered(self) -> int:
        """States with no retry: abandoned by the lead, or still thinking when the step ended."""
        return max(0, self.states - self.retries)

    def __add__(self, other: ExpiryMeasurement) -> ExpiryMeasurement:
        return ExpiryMeasurement(self.states + other.states, self.retries + other.retries,
                                 self.expired + other.expired, self.retry_latencies + other.retry_latencies)

    def predicted_with_latency(self, think: ThinkTime, ttl: float, time_scale: float) -> float | None:
        """P(think + retry latency > TTL), over this measurement's retries (None without any)."""
        if not self.retry_latencies:
            return None
        return sum(think.survival(ttl - latency * time_scale) for latency in self.retry_latencies) \
            / len(self.retry_latencies)

    def as_dict(self) -> dict[str, Any]:
        fields = {key: value for key, value in asdict(self).items() if key != "retry_latencies"}
        latencies = sorted(self.retry_latencies)
        median = latencies[len(latencies) // 2] if latencies else None
        return {**fields, "share": _round(self.share), "unanswered": self.unanswered,
                "retry_latency_p50": None if median is None else round(median, 6)}


NONE = ExpiryMeasurement(0, 0, 0)


def measure(records: Iterable[dict[str, Any]]) -> ExpiryMeasurement:
    """Count states, retries and logged `expired` rejections in a run's journal records."""
    states = retries = expired = 0
    latencies: list[float] = []
    for record in records:
        kind = record.get("type")
        if kind == RecordType.ROUND:
            if record.get("outcome") == Outcome.INPUT_REQUIRED:
                states += 1
            if (record.get("round") or 1) >= 2:
                retries += 1
                if isinstance(record.get("latency"), int | float):
                    latencies.append(float(record["latency"]))
        elif kind == RecordType.REJECTION and record.get("reason") == EXPIRED:
            expired += 1
    return ExpiryMeasurement(states, retries, expired, tuple(latencies))


@dataclass(frozen=True)
class ExpiryAssessment:
    """The TTL against the lead model: predicted, measured, and the TTL that meets the target."""

    think: str
    ttl: float
    time_scale: float
    predicted: float
    target: float
    recommended_ttl: float
    measured: ExpiryMeasurement
    measured_from: str  # which steps were pooled
    predicted_with_latency: float | None = None  # with the pooled steps' retry latency added to the think

    @property
    def fits(self) -> bool:
        """Whether the TTL keeps the predicted share within the target."""
        return self.predicted <= self.target

    @property
    def tolerance(self) -> float:
        return tolerance(self.predicted, self.measured.retries)

    @property
    def agrees(self) -> bool | None:
        """Whether the measurement is within the tolerance of the model's prediction (None without retries)."""
        share = self.measured.share
        return None if share is None else abs(share - self.predicted) <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {"think": self.think, "ttl_seconds": self.ttl, "ttl": format_duration(self.ttl),
                "time_scale": self.time_scale, "predicted_share": _round(self.predicted), "target": self.target,
                "fits": self.fits, "recommended_ttl_seconds": _finite(self.recommended_ttl),
                "recommended_ttl": format_duration(self.recommended_ttl) if math.isfinite(self.recommended_ttl)
                else None,
                "predicted_share_with_latency": _round(self.predicted_with_latency),
                "measured": self.measured.as_dict(), "measured_from": self.measured_from,
                "tolerance": _round(self.tolerance) if math.isfinite(self.tolerance) else None,
                "agrees": self.agrees}


def assess(think: ThinkTime, ttl: float, time_scale: float, target: float, measured: ExpiryMeasurement,
           measured_from: str, overhead: float = 0.0) -> ExpiryAssessment:
    return ExpiryAssessment(str(think), ttl, time_scale, predicted_share(think, ttl), target,
                            recommend_ttl(think, target, overhead), measured, measured_from,
                            measured.predicted_with_latency(think, ttl, time_scale))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
