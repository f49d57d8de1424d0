"""How much disk a scenario's journal needs, and a warning when its results folder's filesystem has less free.

The journal is what grows with a run: one line when a flow starts, one per round, one when
it ends (the other files of a results folder, but for a target's own logs, do not grow with
the flows). The estimate is

    plain = flows x (FLOW_BYTES + rounds per flow x ROUND_BYTES)
    on disk = plain / compression + min(plain, PLAIN_TAIL_BYTES)

- flows: the open model's arrivals over `duration`, the rate (with its ramp or stages)
  integrated over the run (`max_in_flight` holding starts back is not counted). The closed
  model is not estimated: an agent starts its next flow when the last one ends, so its rate
  is what the target's latency and the leads' think times allow, known only by running
  (agents whose leads answer at once are limited by the machine, not by the scenario);
  `journal_need` says None.
- rounds per flow: the weighted mean, by `[[flows]]` weight, of each kind's most rounds
  when every lead accepts (`rounds_bound`, from the rounds each kind declares): an upper
  bound, as declining, cancelling and abandoning only end a flow sooner. A `call` flow's
  server is not known before the run, so it counts the client's cap; every call may resend
  `retry_lost_answers` rounds.
- FLOW_BYTES, ROUND_BYTES: the journal's lines as measured on a short smoke run (the
  command and the figures are in benchmarks/README.md, "journal bytes per flow").
- compression: a closed segment's plain bytes over its compressed bytes, `JOURNAL_COMPRESSION`
  (below the ratio measured on the shop's journal, benchmarks/README.md) unless told otherwise.
- PLAIN_TAIL_BYTES: the segments not compressed at any moment: the open one, and the one
  just closed while it is being compressed (two segments' worth at most).

A warning, not an error: the estimate is an upper bound, and the user may free space
while the run goes on. Free space is the results folder's, or its nearest existing parent's.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.config.durations import format_duration
from harness.config.flows import CALL_ROUNDS, FlowSpec
from harness.config.load import Load
from harness.config.scenario import Scenario
from harness.config.target import TargetConfig
from harness.vocabulary import SEGMENT_BYTES

FLOW_BYTES = 520
"""Journal bytes a flow takes besides its rounds: its start line and its outcome line (measured)."""
ROUND_BYTES = 300
"""Journal bytes one round takes: its round line (measured)."""
JOURNAL_COMPRESSION = 8.0
"""A closed segment's plain size over its compressed size: a bound below the measured ratio (1.0: no compression)."""
PLAIN_TAIL_BYTES = 2 * SEGMENT_BYTES
"""Journal bytes plain on disk at most: the open segment, and the one just closed while it is compressed."""


@dataclass(frozen=True)
class JournalNeed:
    """What a run's journal is estimated to take: how many flows, rounds per flow (a bound), bytes on disk."""

    flows: float
    rounds_per_flow: float
    bytes: float


def journal_need(scenario: Scenario, *, compression: float = JOURNAL_COMPRESSION) -> JournalNeed | None:
    """The journal's estimated size on disk; None for a closed model (see the module's docstring)."""
    flows = open_model_flows(scenario.load, scenario.duration)
    if flows is None:
        return None
    rounds = rounds_per_flow(scenario)
    plain = flows * (FLOW_BYTES + rounds * ROUND_BYTES)
    return JournalNeed(flows, rounds, plain / compression + min(plain, PLAIN_TAIL_BYTES))


def open_model_flows(load: Load, duration: float) -> float | None:
    """Flows that arrive over `duration`: the rate integrated over the run (None for a closed model).

    The rate is piecewise linear between its breakpoints (the ramp's, the stages'), so each
    piece's midpoint level times its length is exact.
    """
    if load.model != "open":
        return None
    points = {0.0, duration, load.ramp, load.ramp / 10}
    for begins, ends, _ in load.stage_bounds():
        points |= {begins, ends}
    edges = sorted(point for point in points if 0 <= point <= duration)
    return sum((b - a) * load.level_at((a + b) / 2) for a, b in zip(edges, edges[1:], strict=False))


def rounds_per_flow(scenario: Scenario) -> float:
    """The mean of each flow kind's most rounds, weighted as its flows are started."""
    total = sum(flow.weight for flow in scenario.flows)
    retries = scenario.load.retry_lost_answers
    return sum(flow.weight * rounds_bound(flow, scenario.target, retries) for flow in scenario.flows) / total


def rounds_bound(flow: FlowSpec, target: TargetConfig, retries: int = 0) -> int:
    """The most rounds a flow of this kind sends when its lead accepts, `retries` lost answers resent per call.

    Each kind declares its calls (the client's round loop, which may resend, up to the
    client's cap) and its hand-built rounds (sent once): `FlowKind.rounds`.
    """
    rounds = flow.rounds(target)
    return sum(min(each + retries, CALL_ROUNDS) for each in rounds.calls) + rounds.sent


def free_space(folder: Path) -> tuple[Path, int]:
    """The folder (or its nearest existing parent) whose filesystem is asked, and its free bytes."""
    place = folder.absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    return place, shutil.disk_usage(place).free


def disk_caution(scenario: Scenario, results: Path) -> str | None:
    """A sentence for a person when the journal may not fit in the free space under `results`; else None."""
    need = journal_need(scenario)
    if need is None:
        return None
    place, free = free_space(results)
    if need.bytes <= free:
        return None
    peak = scenario.load.peak()
    rate = f"{peak:,.0f}" if peak >= 10 else f"{peak:.3g}"
    return (f"the journal may need up to {size_text(need.bytes)} on disk ({need.flows:,.0f} flows: up to {rate} "
            f"flows/s for {format_duration(scenario.duration)}, up to {need.rounds_per_flow:.3g} rounds a flow), "
            f"but the filesystem of {place} has {size_text(free)} free: shorten the duration (or `run --duration`), "
            "lower the rate, or give --results a folder on a disk with more room")


def size_text(count: float) -> str:
    """Bytes in decimal units, three figures: 950 B, 12.3 MB, 4.1 TB, 2,600 PB."""
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("kB", "MB", "GB", "TB"):
        count /= 1000
        if count < 999.5:
            return f"{count:.3g} {unit}"
    petabytes = count / 1000
    return f"{petabytes:.3g} PB" if petabytes < 999.5 else f"{petabytes:,.0f} PB"
