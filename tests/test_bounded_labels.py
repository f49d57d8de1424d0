"""What the target chooses cannot grow the harness without bound: metric labels and error groups are capped, and
what passes the cap is counted, never dropped."""

from __future__ import annotations

import itertools
import string

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from harness.folding.top_errors import GROUPS_MAX, OVERFLOW_MESSAGE, ErrorTable
from harness.metrics.registry import LABEL_VALUES_MAX, OVERFLOW_LABEL, RunMetrics


def samples(metrics: RunMetrics, name: str) -> list[dict[str, str]]:
    """The label sets of `name`'s samples as the exporter serves them."""
    text = generate_latest(metrics.registry).decode()
    return [sample.labels for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == name]


def overflow(metrics: RunMetrics, metric: str, label: str) -> float:
    text = generate_latest(metrics.registry).decode()
    return next((sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                 if sample.name == "mrtr_label_overflow_total" and sample.labels == {"metric": metric, "label": label}),
                0.0)


def test_a_server_that_answers_with_ever_new_codes_grows_the_code_label_only_to_its_bound_on_worker_and_master():
    worker, master = RunMetrics(buffer=True), RunMetrics()
    extra = 50
    for code in range(LABEL_VALUES_MAX + extra):
        worker.round_done("refund", 1, 0.01, str(-40000 - code))
        worker.host_round_failed("default", str(-40000 - code))
    master.apply(worker.drain())
    for metrics in (worker, master):
        codes = {labels["code"] for labels in samples(metrics, "mrtr_client_errors_total")}
        assert len(codes) == LABEL_VALUES_MAX + 1 and OVERFLOW_LABEL in codes
        assert overflow(metrics, "mrtr_client_errors_total", "code") == extra
        assert overflow(metrics, "mrtr_host_client_errors_total", "code") == extra
        total = sum(sample.value for family in text_string_to_metric_families(generate_latest(metrics.registry)
                                                                             .decode())
                    for sample in family.samples if sample.name == "mrtr_client_errors_total")
        assert total == LABEL_VALUES_MAX + extra  # every failed round counted, the last ones under `other`


def test_log_lines_that_name_ever_new_replicas_grow_the_replica_label_only_to_its_bound():
    metrics = RunMetrics(replicas=["r1", "r2"])
    for n in range(3 * LABEL_VALUES_MAX):
        metrics.preset(replicas=[f"forged-{n}"])  # what triage does for each replica it first sees
        metrics.rejection(f"forged-{n}", "seal")
    metrics.rejection("r1", "seal")
    replicas = {labels["replica"] for labels in samples(metrics, "mrtr_request_state_rejections_total")}
    assert len(replicas) == LABEL_VALUES_MAX + 1 and {"r1", "r2", OVERFLOW_LABEL} <= replicas
    assert overflow(metrics, "mrtr_request_state_rejections_total", "replica") > 0


def words(count: int) -> list[str]:
    """`count` error messages no pattern makes equal (letters only: no id, no number)."""
    return [f"refused: {''.join(letters)}" for letters in itertools.islice(
        itertools.product(string.ascii_lowercase, repeat=3), count)]


def test_a_server_that_words_every_error_apart_fills_the_error_table_only_to_its_bound_and_counts_the_rest():
    table = ErrorTable()
    messages = words(GROUPS_MAX + 500)
    for n, message in enumerate(messages):
        table.add({"type": "round", "t": 1000.0 + n, "flow": "call", "tool": "t", "round": 1, "error": message})
    assert len(table.groups) == GROUPS_MAX + 1
    assert sum(seen.count for seen in table.groups.values()) == len(messages)
    (top,) = table.top(limit=1)
    assert top.message == OVERFLOW_MESSAGE and top.count == 500


def test_two_stretches_merged_keep_the_bound_and_every_count():
    first, second = ErrorTable(), ErrorTable()
    messages = words(2 * GROUPS_MAX)
    for n, message in enumerate(messages):
        (first if n < GROUPS_MAX else second).add({"type": "round", "t": float(n), "flow": "call", "tool": "t",
                                                   "round": 1, "error": message})
    first.merge(second)
    assert len(first.groups) == GROUPS_MAX + 1
    assert sum(seen.count for seen in first.groups.values()) == len(messages)
