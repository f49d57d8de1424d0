"""`[compare]`: how far a run may drift from its baseline (read by `mrtr-harness compare`)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from harness.config.strict import Strict


def parse_share(value: Any) -> Any:
    """A tolerance is written as a percentage ("20%"); scenario.json keeps it as the fraction (0.2)."""
    if isinstance(value, str):
        if not re.fullmatch(r"\s*\d+(\.\d+)?\s*%\s*", value):
            raise ValueError(f"a tolerance is a percentage such as \"20%\", not {value!r}")
        return float(value.strip().rstrip("%")) / 100
    return value


Share = Annotated[float, BeforeValidator(parse_share), Field(ge=0)]
"""A relative change as a fraction of the baseline, written "20%" in a scenario or on the command line."""


class LatencyTolerance(Strict):
    """`[compare.round_duration]`: latency percentiles; the tail is noisier than the median, so it gets more room."""

    p50: Share = Field(default=0.20, description="how much slower the median round may get, e.g. \"20%\"")
    p95: Share = Field(default=0.25, description="how much slower the 95th percentile may get")
    p99: Share = Field(default=0.50, description="how much slower the 99th percentile may get")


class MeanTolerance(Strict):
    """`[compare.rounds_per_call]`: a tool that asks once more per call is a regression however fast it is."""

    mean: Share = Field(default=0.10, description="how much the mean rounds per call of a tool may grow")


class CpuTolerance(Strict):
    """`[compare.cpu]`: CPU per round, compared only when both runs measured it (one figure per run: no test)."""

    harness_per_round_ms: Share = Field(default=0.30, description="how much the harness's CPU per round may grow")
    replica_per_round_ms: Share = Field(default=0.30, description="how much the replicas' CPU per round may grow")


class CompareSettings(Strict):
    """`[compare]`: what `mrtr-harness compare` (and `run --baseline`) calls a regression.

    A change is a regression only when it is larger than its tolerance and, for samples
    (round latency, rounds per call, completion), real at `significance` (a one-sided
    Mann-Whitney U test); counts (rejections, client errors, invariant violations) compare
    exactly. Tolerances are relative to the baseline, written "20%"; keys read like the
    command line's `--tolerance round_duration.p95=20%`.
    """

    significance: float = Field(default=0.01, gt=0, lt=0.5,
                                description="the p-value under which a change counts as real, not noise")
    round_duration: LatencyTolerance = Field(default_factory=LatencyTolerance,
                                             description="round latency p50/p95/p99, per flow, tool and round")
    rounds_per_call: MeanTolerance = Field(default_factory=MeanTolerance, description="rounds per call, per tool")
    completed_ratio: Share = Field(default=0.05, description="relative drop in the share of flows completed")
    flows_per_second: Share = Field(default=0.10, description="relative drop in flows finished per second "
                                                               "(one figure per run: no significance test)")
    flows_finished: Share = Field(default=0.20, description="relative drop in the number of flows finished: a "
                                                            "run cut short, or a load that could not be offered")
    cpu: CpuTolerance = Field(default_factory=CpuTolerance, description="CPU per round, harness and replicas")


