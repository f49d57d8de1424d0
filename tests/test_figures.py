"""The run's figures hold a long run in a fixed size, and judge percentiles by the documented rule.

Percentiles come from sketches within 1% of the exact nearest-rank value; a percentile
condition passes only when it holds over the whole band the exact value lies in
(docs/figures.md). So a pass is never false, and outside the band the verdict is the
exact one.
"""

from __future__ import annotations

import gc
import random

import pytest
from ddsketch import DDSketch

from harness.config.thresholds import parse_thresholds
from harness.folding.figures import RunFigures
from harness.folding.invariants import FlowChecks
from harness.folding.over_time import _MAX_BINS, Timeline
from harness.folding.read import JournalRead
from harness.folding.thresholds import evaluate
from harness.journal.distributions import FLOOR, RELATIVE_ERROR, Sketch
from harness.report.series import percentile

T0 = 1_800_000_000.0


def _round(t: float, latency: float, *, flow: str = "refund", number: int = 1) -> dict[str, object]:
    return {"type": "round", "t": t, "flow": flow, "tool": "issue_refund", "round": number, "latency": latency,
            "outcome": "complete", "code": None, "replica": "r1", "crossed": None if number == 1 else False}


def _figures_of(latencies: list[float]) -> RunFigures:
    figures = RunFigures(duration=10.0)
    for n, latency in enumerate(latencies):
        figures.add(_round(T0 + n, latency))
    return figures


def _verdict(figures: RunFigures, condition: str) -> bool:
    (result,) = evaluate(parse_thresholds({"round_duration": condition}), figures)
    return result.passed


def test_a_percentile_threshold_between_two_adjacent_samples_fails_closed_either_way():
    figures = _figures_of([n / 1000 for n in range(1, 101)])  # 1 ms .. 100 ms: p95 is 95 ms, the next sample 96 ms
    (result,) = evaluate(parse_thresholds({"round_duration": "p(95) < 95.5ms"}), figures)
    assert result.observed == pytest.approx(0.095, rel=RELATIVE_ERROR)
    assert not result.passed  # exactly 95 ms would pass, but 95.5 ms lies inside the 1% band around the estimate
    assert not _verdict(figures, "p(95) > 95.5ms")  # and the other side of the same boundary fails as well
    assert _verdict(figures, "p(95) < 98ms") and _verdict(figures, "p(95) > 92ms")  # past the band: the exact verdict
    assert not _verdict(figures, "p(95) > 98ms") and not _verdict(figures, "p(95) < 92ms")


def test_count_mean_min_and_max_are_exact_and_p100_is_the_largest_sample():
    samples = [0.0, 0.0031, 0.2, 0.0157, 1.5]
    figures = _figures_of(samples)
    observed = {result.condition.aggregate: result.observed
                for result in evaluate(parse_thresholds({"round_duration": ["count > 0", "avg > 0", "min >= 0",
                                                                            "max > 0", "p(100) > 0"]}), figures)}
    assert observed == {"count": 5.0, "avg": pytest.approx(sum(samples) / 5), "min": 0.0, "max": 1.5,
                        "p(100)": 1.5}
    assert _verdict(figures, "max <= 1.5s") and not _verdict(figures, "max < 1.5s")


def test_percentile_verdicts_equal_the_exact_ones_outside_the_band_and_never_pass_falsely():
    rng = random.Random(7)
    for trial in range(40):
        samples = [rng.lognormvariate(-5, 1.2) for _ in range(rng.randint(1, 3000))]
        figures, ordered = _figures_of(samples), sorted(samples)
        for pct in (50, 90, 95, 99, 99.9):
            exact = percentile(ordered, pct)
            for factor in (0.5, 0.97, 0.99, 0.995, 1.0, 1.005, 1.01, 1.03, 2.0):
                limit = exact * factor
                for op, exact_verdict in (("<", exact < limit), (">=", exact >= limit)):
                    judged = _verdict(figures, f"p({pct:g}) {op} {limit!r}")
                    assert not judged or exact_verdict, (trial, pct, op, factor)  # a pass is always true
                    if abs(limit - exact) > 2.05 * RELATIVE_ERROR * exact:
                        assert judged == exact_verdict, (trial, pct, op, factor)


def test_four_hundred_thousand_rounds_leave_the_figures_size_unchanged():
    """Two-round flows at random times over one hour: after 100,000 rounds and after 400,000, the same cells.

    A sketch's bins span the range of its values, not their count (at most 1 µs to an hour,
    about 1,100 bins); the values here keep one range, as a steady run's do. Four times the
    rounds in the same cells is the claim; a million rounds only took the suite longer.
    """
    rng = random.Random(19)
    figures, timeline, checks = RunFigures(), Timeline(started=T0), FlowChecks()
    sizes = []
    flows = 0
    while flows * 2 < 400_000:
        t = T0 + rng.uniform(0, 3600)
        flow_id = f"w0-{flows:07d}"
        records = [{"type": "start", "t": t, "flow": "refund", "flow_id": flow_id},
                   _round(t, rng.uniform(0.001, 2.0)), _round(t, rng.uniform(0.001, 2.0), number=2),
                   {"type": "flow", "t": t, "flow": "refund", "flow_id": flow_id, "outcome": "completed",
                    "rounds": 2, "duration": rng.uniform(0.002, 4.0), "think_time": rng.uniform(0.05, 2.0),
                    "calls": [{"tool": "issue_refund", "rounds": 2, "outcome": "completed"}]}]
        for record in records:
            figures.add(record)
            timeline.add(record)
            checks.add(record)
        flows += 1
        if flows * 2 in (100_000, 400_000):
            sizes.append((_cells(figures), _cells(timeline), _cells(checks)))
    assert figures.rounds == 400_000 and figures.flows == 200_000 and not checks.in_flight
    assert len(timeline.stored) <= _MAX_BINS
    assert sizes[0] == sizes[1]


def _cells(root: object) -> int:
    """Objects and container slots reachable from `root` (numbers and strings are leaves): its size, clock-free."""
    seen, stack, cells = set(), [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, int | float | str | bytes | type):
            continue
        seen.add(id(obj))
        cells += 1 + (len(obj) if isinstance(obj, list | dict | tuple | set) else 0)
        stack.extend(gc.get_referents(obj))
    return cells


def test_a_sketch_holds_what_the_librarys_own_add_would():
    """`Sketch.add` skips DDSketch's generic checks: the bins, zeros, count, min and max must be the library's, the
    sum its own in whole nanoseconds (merges exact in any order) and within a nanosecond a value of the library's."""
    rng = random.Random(1)
    values = [rng.choice([0.0, 1e-9, 5e-7, 1e-6, -0.001]) if rng.random() < 0.05 else rng.lognormvariate(-5, 2)
              for _ in range(20_000)]
    ours, theirs = Sketch(), DDSketch(RELATIVE_ERROR)
    for value in values:
        ours.add(value)
        theirs.add(value if value >= FLOOR else 0.0)
    mine = ours._sketch
    assert (mine._count, mine._min, mine._max, mine._zero_count) == \
        (theirs._count, theirs._min, theirs._max, theirs._zero_count)
    assert mine.nanoseconds == sum(round(value * 1e9) for value in values if value >= FLOOR)
    assert abs(mine.sum - theirs._sum) <= len(values) * 1e-9
    assert (mine._store.bins, mine._store.offset, mine._store.count) == \
        (theirs._store.bins, theirs._store.offset, theirs._store.count)


def test_a_sketch_merged_from_parts_gives_the_percentiles_of_the_whole():
    rng = random.Random(3)
    samples = [rng.expovariate(20) for _ in range(20_000)]
    whole, parts = Sketch(), [Sketch(), Sketch(), Sketch()]
    for n, value in enumerate(samples):
        whole.add(value)
        parts[n % 3].add(value)
    merged = Sketch()
    for part in parts:
        merged.merge(part)
    ordered = sorted(samples)
    for pct in (50, 95, 99):
        assert merged.percentile(pct) == whole.percentile(pct)
        assert merged.percentile(pct) == pytest.approx(percentile(ordered, pct), rel=RELATIVE_ERROR)
    assert merged.count == len(samples) and merged.maximum == max(samples)


def test_a_hypothesis_window_counts_only_what_ended_after_it_opened():
    figures = RunFigures()
    figures.add(_round(T0, 0.5))
    window = figures.window(T0 + 1)
    figures.add(_round(T0 + 2, 0.01))
    figures.add(_round(T0 + 0.5, 0.9))  # a worker's late batch: it ended before the window opened
    figures.add({"type": "rejection", "t": T0 + 2, "replica": "r1", "reason": "expired"})
    figures.close(window)
    figures.add(_round(T0 + 3, 0.02))
    assert figures.rounds == 4 and window.rounds == 1
    assert window.distribution("round_duration", {}).maximum == 0.01
    assert window.count("rejections", {}) == 1  # the run's rejections, shared


def test_rounds_per_call_are_kept_per_flow_and_again_per_host():
    def flow(host: str | None, rounds: list[int]) -> dict[str, object]:
        record = {"type": "flow", "t": T0, "flow": "refund", "outcome": "completed",
                  "calls": [{"tool": "refund", "rounds": n} for n in rounds]}
        return record if host is None else {**record, "host": host}

    read = JournalRead.from_records([flow("desktop", [2, 3]), flow("cli", [1]), flow(None, [4]),
                                     {**flow("cli", [5]), "calls": 7, "duration": 9.0}])  # calls no list: unreadable
    figures = read.figures

    def values(selector: dict[str, str]) -> list[tuple[float, int]]:
        return figures.distribution("rounds_per_call", selector).pairs()

    assert values({}) == [(1.0, 1), (2.0, 1), (3.0, 1), (4.0, 1)]
    assert values({"host": "desktop"}) == [(2.0, 1), (3.0, 1)]
    assert values({"host": "cli"}) == [(1.0, 1)] and values({"host": "default"}) == [(4.0, 1)]
    assert read.unreadable == 1 and figures.by_host.table()["cli"]["flows"] == 2  # its outcome counted, as before
    assert figures.distribution("flow_duration", {}).count == 0  # and nothing after its calls
