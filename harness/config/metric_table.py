"""The run's metrics, each declared once: its name, labels, kind, whether it can be a threshold, how compare gates it.

A metric is one `Metric(...)` line in `METRICS` below, and its computation: a function in
`harness.folding.figures` registered with `@computes(name)` that reads it off the run's
figures (and, for a count compare judges exactly, `@counts_by(name)`, its counts by
`gate_labels`). Compare's own figures (flows per second, CPU per round) are judged by a
function registered in `harness.compare.comparison` with `@judges(name)`. Each half is
checked against this table when its module is imported, so a metric missing a part fails
at import, not at a run's KeyError (`tests/test_metric_table.py`).

Thresholds (`harness.config.thresholds`) read the names, labels and kinds; compare
(`mrtr-harness compare`, `history`, `run --baseline`) reads the gates, in this table's order;
the live registry (`harness.metrics.registry`) refuses an `exported` name it does not define.
The configuration is a leaf: the computations cannot live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """How a threshold reads the metric: a count (count or rate), a ratio from 0 to 1, or a distribution."""

    COUNT = "count"
    RATIO = "ratio"
    DISTRIBUTION = "distribution"
    SLOPE = "slope"  # a fitted rate of growth with its confidence interval, judged by the interval's bound
    FIGURE = "figure"  # one figure per run that compare judges and no threshold names (flows per second, CPU)


class Gate(StrEnum):
    """How `mrtr-harness compare` (and so `history`, the nightly gate) judges the metric against a baseline."""

    EXACT = "exact"  # a count that must stay put: one more than the baseline is a regression
    SAMPLED = "sampled"  # beyond its tolerance and significant on the samples (Mann-Whitney U)
    SINGLE = "single"  # one figure per run: its tolerance alone decides


@dataclass(frozen=True)
class Metric:
    """One metric of the run: what a threshold may name and select on, and what compare gates."""

    name: str
    kind: Kind
    labels: tuple[str, ...] = ()
    """what a threshold's selector may name."""
    gate: Gate | None = None
    gate_labels: tuple[str, ...] = ()
    """an exact gate's rows beside its total, one per value of these labels (`rejections{reason='...'}`)."""
    lower_is_worse: bool = False
    seconds: bool = False
    """a distribution of seconds, shown as 250ms / 1.5s rather than 0.25 / 1.5."""
    exported: tuple[str, ...] = ()
    """its live counterparts on the Prometheus endpoint (`harness.metrics.registry`), by exposed name."""

    @property
    def threshold(self) -> bool:
        """Whether a scenario's `expect`/`reproduces` may name it (compare's own figures may not)."""
        return self.kind is not Kind.FIGURE


_COUNT, _RATIO, _DISTRIBUTION, _FIGURE, _SLOPE = Kind.COUNT, Kind.RATIO, Kind.DISTRIBUTION, Kind.FIGURE, Kind.SLOPE

_DECLARED = (
    # In compare's order: its gated metrics first, as its output lists them.
    Metric("flows_finished", _COUNT, ("flow", "outcome", "host"), gate=Gate.SINGLE, lower_is_worse=True,
           exported=("mrtr_flows_finished_total", "mrtr_host_flows_finished_total")),
    Metric("round_duration", _DISTRIBUTION, ("flow", "round"), gate=Gate.SAMPLED, seconds=True,
           exported=("mrtr_round_duration_seconds",)),
    Metric("rounds_per_call", _DISTRIBUTION, ("flow", "host"), gate=Gate.SAMPLED,
           exported=("mrtr_rounds_per_call",)),
    Metric("completed_ratio", _RATIO, ("flow", "host"), gate=Gate.SAMPLED, lower_is_worse=True),
    Metric("flows_per_second", _FIGURE, gate=Gate.SINGLE, lower_is_worse=True),
    Metric("cpu.harness_per_round_ms", _FIGURE, gate=Gate.SINGLE),
    Metric("cpu.replica_per_round_ms", _FIGURE, gate=Gate.SINGLE),
    Metric("rejections", _COUNT, ("reason", "replica"), gate=Gate.EXACT, gate_labels=("reason",),
           exported=("mrtr_request_state_rejections_total",)),
    Metric("client_errors", _COUNT, ("flow", "code", "host"), gate=Gate.EXACT, gate_labels=("flow", "code"),
           exported=("mrtr_client_errors_total", "mrtr_host_client_errors_total")),
    Metric("invariant_violations", _COUNT, ("invariant",), gate=Gate.EXACT, gate_labels=("invariant",),
           exported=("mrtr_invariant_violations_total",)),
    Metric("unexplained_rejections", _COUNT, gate=Gate.EXACT, exported=("mrtr_unexplained_rejections_total",)),
    Metric("replica_rss_growth", _SLOPE, ("replica",), gate=Gate.SINGLE),
    # Thresholds only.
    Metric("flows_started", _COUNT, ("flow",), exported=("mrtr_flows_started_total",)),
    Metric("unmatched_logged_rejections", _COUNT, exported=("mrtr_unmatched_logged_rejections_total",)),
    Metric("late_starts", _COUNT, exported=("mrtr_flow_starts_late_total",)),
    Metric("chaos_failures", _COUNT, ("action",)),
    Metric("outcome_share", _RATIO, ("flow", "outcome", "host")),
    Metric("rejection_share", _RATIO, ("reason", "replica")),
    Metric("crossed_replica_share", _RATIO, ("flow",)),
    Metric("flow_duration", _DISTRIBUTION, ("flow",), seconds=True, exported=("mrtr_flow_duration_seconds",)),
    Metric("think_time", _DISTRIBUTION, seconds=True, exported=("mrtr_think_time_seconds",)),
    Metric("cold_start", _DISTRIBUTION, ("replica",), seconds=True),
    # The fuzzer's envelope mutants and output contracts (docs/fuzz.md).
    Metric("envelope_mutants", _COUNT, ("mutation", "answer")),
    Metric("output_schema_mismatches", _COUNT, ("tool",)),
    # The race probes' watchdog: each raced call ok, slow or hung (docs/running.md, "Race probes").
    Metric("watchdog_calls", _COUNT, ("probe", "state")),
)


def _check(declared: tuple[Metric, ...]) -> dict[str, Metric]:
    """The table by name, refused at import when two metrics share a name or a declaration contradicts itself."""
    table: dict[str, Metric] = {}
    for metric in declared:
        problem = ("declared twice" if metric.name in table
                   else "an exact gate is a count" if metric.gate is Gate.EXACT and metric.kind is not Kind.COUNT
                   else "gate_labels belong to an exact gate" if metric.gate_labels and metric.gate is not Gate.EXACT
                   else f"gate labels {metric.gate_labels} are not among its labels {metric.labels}"
                   if not set(metric.gate_labels) <= set(metric.labels)
                   else "a figure is one compare gates" if metric.kind is Kind.FIGURE and metric.gate is None
                   else "")
        if problem:
            raise TypeError(f"metric {metric.name!r}: {problem}")
        table[metric.name] = metric
    return table


METRICS: dict[str, Metric] = _check(_DECLARED)
"""Every metric by name, in compare's order."""

THRESHOLD_METRICS: dict[str, Metric] = {name: metric for name, metric in METRICS.items() if metric.threshold}
"""The metrics a threshold may name."""


def of_kind(kind: Kind) -> dict[str, tuple[str, ...]]:
    """The threshold metrics of one kind, each with its labels."""
    return {name: metric.labels for name, metric in THRESHOLD_METRICS.items() if metric.kind is kind}


def gated(gate: Gate | None = None) -> list[Metric]:
    """The metrics compare gates (those of one `gate`, if given), in the table's order."""
    return [metric for metric in METRICS.values() if metric.gate is not None and gate in (None, metric.gate)]
