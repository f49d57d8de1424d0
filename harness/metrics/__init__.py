"""The harness's Prometheus metrics: what is measured (`measurements`) and how it is served (`exporter`).

`docs/metrics.md` lists every name, label and bucket (generated from `Measurements`).
"""

from harness.metrics.measurements import (
    DURATION_BUCKETS,
    MAX_ROUND_LABEL,
    ROUND_BUCKETS,
    ROUNDS_BUCKETS,
    Measurements,
)

__all__ = ["DURATION_BUCKETS", "MAX_ROUND_LABEL", "ROUNDS_BUCKETS", "ROUND_BUCKETS", "Measurements"]
