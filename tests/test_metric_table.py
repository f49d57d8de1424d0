"""The registry of metrics: each metric is one declaration (harness.config.metric_table) and its computation.

Thresholds read the table's names, labels and kinds; the figures compute each declared metric
(`@computes`, and `@breaks_down` for a count compare judges exactly); compare judges the rest
of its gates (`@judges`); the live registry exports what the table says it does. A part missing
is named here (and at import), not found by a run's KeyError.
"""

from __future__ import annotations

import pytest
from prometheus_client.metrics import MetricWrapperBase

from harness._compat.prometheus import label_names
from harness.compare.comparison import JUDGES, _unjudged, judges
from harness.config.metric_table import METRICS, THRESHOLD_METRICS, Gate, Kind, Metric, _check, gated
from harness.config.thresholds import ThresholdError, parse_threshold
from harness.folding.figures import BREAKDOWNS, COMPUTATIONS, RunFigures, _uncomputed, computes
from harness.metrics.registry import RunMetrics
from harness.vocabulary import LABEL_VALUES


def test_every_metric_has_its_parts():
    assert _uncomputed() == [] and _unjudged() == []
    assert set(COMPUTATIONS) == set(THRESHOLD_METRICS)
    assert set(BREAKDOWNS) == {metric.name for metric in gated(Gate.EXACT)}
    assert set(JUDGES) == {metric.name for metric in gated() if metric.gate is not Gate.EXACT}


def test_a_metric_declared_without_its_computation_is_named():
    METRICS["queue_depth"] = Metric("queue_depth", Kind.COUNT, gate=Gate.EXACT)
    METRICS["drain_rate"] = Metric("drain_rate", Kind.FIGURE, gate=Gate.SINGLE)
    try:
        assert _uncomputed() == ["queue_depth (@computes)", "queue_depth (@breaks_down)"]
        assert _unjudged() == ["drain_rate"]
    finally:
        del METRICS["queue_depth"], METRICS["drain_rate"]
    assert _uncomputed() == [] and _unjudged() == []


def test_a_computation_or_judge_of_no_declared_metric_or_a_second_one_is_refused():
    with pytest.raises(TypeError, match="not declared"):
        computes("queue_depth")(lambda figures, selector: 0)
    with pytest.raises(TypeError, match="computed twice"):
        computes("rejections")(lambda figures, selector: 0)
    with pytest.raises(TypeError, match="judged twice"):
        judges("round_duration")(lambda judge, before, after: [])
    with pytest.raises(TypeError, match="no metric compare judges"):
        judges("rejections")(lambda judge, before, after: [])  # an exact gate: compare's rows come from the table


def test_a_declaration_that_contradicts_itself_is_refused():
    with pytest.raises(TypeError, match="declared twice"):
        _check((Metric("late_starts", Kind.COUNT), Metric("late_starts", Kind.COUNT)))
    with pytest.raises(TypeError, match="exact gate is a count"):
        _check((Metric("think_time", Kind.DISTRIBUTION, gate=Gate.EXACT),))
    with pytest.raises(TypeError, match="not among its labels"):
        _check((Metric("rejections", Kind.COUNT, ("reason",), gate=Gate.EXACT, gate_labels=("replica",)),))
    with pytest.raises(TypeError, match="a figure is one compare gates"):
        _check((Metric("flows_per_second", Kind.FIGURE),))


def test_thresholds_read_the_table():
    for name, metric in METRICS.items():
        if not metric.threshold:  # compare's own figures: no threshold names them
            with pytest.raises(ThresholdError, match="unknown metric"):
                parse_threshold(name.split(".")[0], "> 0")
            continue
        condition = "p(95) < 1s" if metric.kind is Kind.DISTRIBUTION else "<= 1" if metric.kind is Kind.RATIO else "> 0"
        assert parse_threshold(name, condition).metric == name
        for label in metric.labels:
            value = LABEL_VALUES.get(label, ("1",))[0]
            assert parse_threshold(f"{name}{{{label}='{value}'}}", condition).selector == ((label, value),)
        with pytest.raises(ThresholdError, match="is not a label of this metric"):
            parse_threshold(f"{name}{{shard='a'}}", condition)


def test_each_metric_is_computed_as_its_kind_says():
    figures = RunFigures()
    for name, metric in THRESHOLD_METRICS.items():
        lookups = {Kind.COUNT: figures.count, Kind.RATIO: figures.ratio, Kind.DISTRIBUTION: figures.distribution,
                   Kind.SLOPE: figures.slopes}
        value = lookups[metric.kind](name, {})
        assert value.count == 0 if metric.kind is Kind.DISTRIBUTION else value in (0, None, []), name
        for kind, lookup in lookups.items():
            if kind is not metric.kind:
                with pytest.raises(KeyError):
                    lookup(name, {})


def test_the_live_registry_exports_what_the_table_says():
    exposed = {}
    for value in vars(RunMetrics()).values():
        if isinstance(value, MetricWrapperBase):
            family = next(iter(value.describe()))
            exposed[family.name + ("_total" if family.type == "counter" else "")] = label_names(value)
    for metric in METRICS.values():
        for name in metric.exported:
            assert name in exposed, (metric.name, name)
            assert set(exposed[name]) <= set(metric.labels), (metric.name, name, exposed[name])


def test_a_live_counterpart_the_registry_does_not_define_is_refused():
    METRICS["queue_depth"] = Metric("queue_depth", Kind.COUNT, exported=("mrtr_queue_depth",))
    try:
        with pytest.raises(TypeError, match="'mrtr_queue_depth' is not defined by RunMetrics"):
            RunMetrics()
    finally:
        del METRICS["queue_depth"]
    METRICS["late_starts"], saved = Metric("late_starts", Kind.COUNT, exported=("mrtr_flows_started_total",)), \
        METRICS["late_starts"]
    try:  # a live label (flow) the threshold could not select on
        with pytest.raises(TypeError, match="mrtr_flows_started_total"):
            RunMetrics()
    finally:
        METRICS["late_starts"] = saved
    RunMetrics()
