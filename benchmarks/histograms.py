"""Pick the figures' histogram: `hdrhistogram` against `ddsketch` on the figures' own values.

Measures, for each library at a 1% relative-error setting: CPU per added value, CPU per
merge of two filled histograms into an empty one, the memory of one histogram, and the worst relative
error of p50/p90/p95/p99/p99.9 against the exact nearest-rank values, on 200,000
log-normal round latencies (seconds, median 5 ms, a heavy tail to 2 s) and on zeros
mixed in (think time when leads answer at once). Prints one JSON document.

    pip install hdrhistogram   # the loser of this benchmark is not a dependency of the project
    python benchmarks/histograms.py
"""

from __future__ import annotations

import json
import math
import pickle
import random
import time

from ddsketch import DDSketch
from hdrh.histogram import HdrHistogram

VALUES = 200_000
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
MICROS = 1_000_000


def samples(seed: int) -> list[float]:
    rng = random.Random(seed)
    values = [min(2.0, rng.lognormvariate(math.log(0.005), 1.0)) for _ in range(VALUES)]
    return [0.0 if rng.random() < 0.05 else v for v in values]


def nearest_rank(ordered: list[float], pct: float) -> float:
    return ordered[max(1, min(len(ordered), math.ceil(pct / 100 * len(ordered)))) - 1]


def hdr_new() -> HdrHistogram:
    return HdrHistogram(1, 3600 * MICROS, 2)  # 1 µs to an hour, 2 significant digits (≤1%)


def hdr_add(histogram: HdrHistogram, values: list[float]) -> None:
    for value in values:
        histogram.record_value(max(1, round(value * MICROS)))


def hdr_quantile(histogram: HdrHistogram, pct: float) -> float:
    return histogram.get_value_at_percentile(pct) / MICROS


def dd_add(sketch: DDSketch, values: list[float]) -> None:
    for value in values:
        sketch.add(value)


def memory(name: str, histogram) -> int:
    """Bytes of the counts: HDR's counts array is allocated whole; a DDSketch's dense store grows with its range."""
    if name == "hdrhistogram":
        return histogram.counts_len * histogram.word_size
    return len(pickle.dumps(histogram))


def measure(name: str, new, add, quantile) -> dict[str, float]:
    first, second = samples(1), samples(2)
    histogram = new()
    start = time.process_time()
    add(histogram, first)
    add_ns = (time.process_time() - start) / VALUES * 1e9
    other = new()
    add(other, second)
    start = time.process_time()
    for _ in range(100):
        copy = new()
        if name == "hdrhistogram":
            copy.add(histogram)
            copy.add(other)
        else:
            copy.merge(histogram)
            copy.merge(other)
    merge_us = (time.process_time() - start) / 100 * 1e6
    ordered = sorted(first)
    errors = [abs(quantile(histogram, pct) - nearest_rank(ordered, pct)) / nearest_rank(ordered, pct)
              for pct in PERCENTILES if nearest_rank(ordered, pct) > 0]
    return {"add_ns_per_value": round(add_ns), "merge_and_copy_us": round(merge_us),
            "memory_bytes": memory(name, histogram), "worst_relative_error": round(max(errors), 5)}


def main() -> None:
    result = {"values": VALUES,
              "ddsketch": measure("ddsketch", lambda: DDSketch(0.01), dd_add,
                                  lambda s, pct: s.get_quantile_value(pct / 100)),
              "hdrhistogram": measure("hdrhistogram", hdr_new, hdr_add, hdr_quantile)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
