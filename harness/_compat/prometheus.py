"""prometheus_client's private parts the harness relies on (pinned by tests/test_compat.py).

- The two hooks a metric class fills for each child: `_metric_init` (make the child's
  values, for each label set and for an unlabelled metric) and `_child_samples` (what a
  scrape reads of the child). `CustomCounter`, `CustomGauge` and `CustomHistogram` hand them
  on as `start_child` and `child_samples`, for `harness.metrics.lockless`.
- A histogram's bounds, `_upper_bounds` (+Inf last), and a metric's label names, `_labelnames`:
  kept on the metric object only (a label set with no sample yet shows neither).
- Whether `_created` samples are exposed: the module flag `metrics._use_created`, which
  `disable_created_metrics()` clears.
- The lock each value takes, the name `values.Lock`, looked up each time a value is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, values
from prometheus_client import metrics as _metrics
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.samples import Sample

__all__ = ["CustomCounter", "CustomGauge", "CustomHistogram", "created_samples", "label_names", "upper_bounds",
           "use_value_lock"]


class _ChildHooks:
    """prometheus_client's per-child hooks, handed on under names of the harness's own."""

    def _metric_init(self) -> None:
        self.start_child()

    def _child_samples(self) -> Iterable[Sample]:
        return self.child_samples()

    def start_child(self) -> None:
        """Make this child's values (called for each label set, and once for an unlabelled metric)."""
        raise NotImplementedError

    def child_samples(self) -> Iterable[Sample]:
        """This child's samples, as a scrape reads them."""
        raise NotImplementedError


class CustomCounter(_ChildHooks, Counter):
    """A `Counter` whose subclass makes each child's values (`start_child`) and says its samples (`child_samples`)."""


class CustomGauge(_ChildHooks, Gauge):
    """A `Gauge` whose subclass makes each child's value (`start_child`) and says its samples (`child_samples`)."""


class CustomHistogram(_ChildHooks, Histogram):
    """A `Histogram` whose subclass makes each child's counts (`start_child`) and says its samples (`child_samples`).

    `bounds` is the child's bucket bounds in order, +Inf last, set before `start_child`.
    """

    bounds: list[float]

    def _metric_init(self) -> None:
        self.bounds = self._upper_bounds
        super()._metric_init()


def created_samples(created: float) -> tuple[Sample, ...]:
    """The `_created` sample, unless prometheus_client was told to leave it out (`disable_created_metrics`)."""
    return (Sample("_created", {}, created, None, None),) if _metrics._use_created else ()


def label_names(metric: MetricWrapperBase) -> tuple[str, ...]:
    """The label names a metric was defined with."""
    return tuple(metric._labelnames)


def upper_bounds(metric: MetricWrapperBase) -> list[float]:
    """A histogram's bucket bounds, +Inf last; none for a metric without buckets."""
    return list(getattr(metric, "_upper_bounds", []))


def use_value_lock(lock: Callable[[], Any]) -> Callable[[], Any]:
    """Make every metric value made from now on guard itself with `lock()`; the lock factory it used before."""
    before: Callable[[], Any] = values.Lock
    values.Lock = lock  # type: ignore[assignment]
    return before
