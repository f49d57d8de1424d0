"""Disk and memory a run takes per hour and per day at 100, 1,000 and top-speed flows/s, with and without workers.

Each case is one real `mrtr-harness run` (`python -m harness run`, a child process: `benchmarks/runs.py`'s
`ChildRun`) against two stub servers (`benchmarks/stub_server.py`, a two-round flow, as
`benchmarks/soak.py`), same-replica routing, leads answering at once, for `--seconds` of load: the open
model at 100 and at 1,000 flows/s, and the closed model at the load's top speed (16 agents); each with
the load in the run process (`--workers 0`) and from two local Locust workers (`--workers 2`). Once a
second while it runs: the resident memory (VmRSS) of the run process, its live fold process and each
worker; the flows the journal has finished (a byte count of flow lines in every part, no parsing);
with workers, the bytes in their journal spools (the child's TMPDIR is a folder of the case's own,
where each worker makes its spool).

Figures per case:

- flows finished, and flows/s: those flows over the load window's seconds (`load-started` to
  `load-stopped`);
- the journal: plain bytes per flow (the stream); the closed segments' compression ratio (their
  plain length, which their names give, over their bytes on disk; a case that closed none takes its
  stream compressed again, as a segment is) and so their bytes per flow, what a long run converges to
  (all but the last two segments of a part are closed and compressed); the open segments' bytes;
- each process's RSS: its peak, and its growth per 1,000,000 flows after a warm-up (the first quarter
  of the load), a least-squares slope over the flows finished;
- the workers' spools: their peak bytes, their growth per flow (the same slope), whether they rolled.

From them, the day on paper, each case at the rate it reached: the journal on disk after an hour
and after a day, estimated as `harness.config.disk` does from bounds (every growing part's stream
compressed at the measured ratio but its plain tail, the open segment and the one being compressed,
two segments of `SEGMENT_BYTES` at most); the spools after an hour and a day (spools that rolled into segments, each
removed once shipped, hold a few segments whatever the flows: their peak, at the real segment size;
spools that did not keep every line: their growth per flow); and each process's RSS as its peak and
its growth over a day's flows (shown flat when it moved less than `FLAT_MIB` after the warm-up). The
table is printed as Markdown (docs/figures.md, "A day on disk"), and under it how
`harness.config.disk`'s constants compare with the measured bytes per flow and ratio.

Segments roll at `--segment-bytes` (default 4 MiB, `MRTR_JOURNAL_SEGMENT_BYTES` for the run and its
workers alike), not at a real run's 64 MiB, so that a short run at 100 flows/s closes segments at all.
That is sound for the ratio: zstd picks level 1's parameters by the source's size only below 256 KiB,
so a 4 MiB and a 64 MiB segment are compressed with the same 512 KiB window, and differ by one frame
header and one cold first window per segment. Each case checks it (`ratio_check`): the first 64 MiB
of its largest part's stream compressed again as one frame and as frames of the segment size. It is
sound for memory: a segment is compressed and read back as a stream in 1 MiB chunks
(`harness.journal.segments`), whatever its size. The day's plain tail is of the real `SEGMENT_BYTES`.

Run from the repository root, nothing else running (each case is `--seconds` of load plus about
15 s of start and end):

    python -m benchmarks.day_on_disk [--seconds 120] [--workers 0,2] [--rates 100,1000,top]
                                     [--segment-bytes 4194304] [--code DIR]

Raw figures go to `results/benchmarks/day_on_disk-<utc>.json`; run folders to
`results/benchmarks/runs/day_on_disk-<utc>/<case>/`. Leaves out: a target with logs (reconciliation;
the stub has none), chaos, a ledger, workers on other machines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import zstandard

from benchmarks.cpu import machine_facts
from benchmarks.flows_per_second import SERVERS, servers
from benchmarks.runs import (
    REPO_ROOT,
    RESULTS,
    ChildRun,
    PartTail,
    children_of,
    cmdline,
    is_fold_process,
    journal_bytes,
    rss_bytes,
    slope_mib_per_million,
    write_figures,
)
from benchmarks.soak import FLOW_MARK
from benchmarks.soak import SCENARIO as SOAK_SCENARIO
from harness.config.disk import FLOW_BYTES, JOURNAL_COMPRESSION, ROUND_BYTES, size_text
from harness.journal.segments import LEVEL, SEGMENT_ENV, PartReader, closed_segments, part_names, part_size
from harness.vocabulary import SEGMENT_BYTES

CLOSED_LOAD = 'model = "closed"\nusers = 16\n'
"""The top-speed case's load: `benchmarks/soak.py`'s (16 agents, leads answering at once)."""
SCENARIO = SOAK_SCENARIO.replace('name = "soak-benchmark"', 'name = "day-on-disk"').replace(CLOSED_LOAD, "{load}")
"""`benchmarks/soak.py`'s scenario (two stub servers, same-replica routing, the stub's two-round tool) with the
case's load in place of its own."""
if "{load}" not in SCENARIO:
    raise RuntimeError("benchmarks/soak.py's scenario no longer has the load this benchmark replaces")
PARTS = r"journal(?:-w\d+)?"
RUN_PART = "journal.jsonl"
CLOSED_NAME = re.compile(PARTS + r"\.\d{12}\.jsonl(?:\.zst)?")
WARM_UP = 0.25
"""The share of the load window left out of the growth slopes (agents spawning, workers connecting)."""
FLAT_MIB = 1.0
"""An RSS that the growth slope moves by less than this over the steady part of a case is shown flat: a page-grained
size sampled once a second tells no less."""
SAMPLE_EVERY = 1.0
HOUR, DAY = 3600.0, 86400.0
MIB = 2**20


@dataclass(frozen=True)
class Case:
    """One run: the open model at `rate` flows/s, or the closed model at top speed (`rate` None); `workers` local
    Locust workers (0: the load in the run process)."""

    rate: float | None
    workers: int

    @property
    def name(self) -> str:
        return f"{'top' if self.rate is None else f'{self.rate:g}'}-w{self.workers}"

    def load_toml(self) -> str:
        if self.rate is None:
            return CLOSED_LOAD
        return f'model = "open"\narrival_rate = {self.rate:g}\n'


@dataclass
class Look:
    """One look at a running case: when, the flows finished, each process's RSS, the spools' bytes."""

    at: float
    flows: int
    rss: dict[str, int]
    spool: int
    spool_closed: int
    """Closed segments in the spools now: a spool that rolls (and removes what it shipped) is bounded in segments."""


@dataclass
class JournalCount:
    """A run's journal parts read as they grow: flows finished (flow lines counted), the load's start and stop."""

    folder: Path
    flows: int = 0
    events: dict[str, float] = field(default_factory=dict)
    _tails: dict[str, PartTail] = field(default_factory=dict)

    def read(self) -> None:
        for name in part_names(self.folder, PARTS):
            tail = self._tails.setdefault(name, PartTail(self.folder / name))
            data = tail.read()
            self.flows += data.count(FLOW_MARK)
            if name == RUN_PART:
                for event in ("load-started", "load-stopped"):
                    self._find(data, event)

    def _find(self, data: bytes, event: str) -> None:
        at = data.find(b'"%s"' % event.encode())
        if event in self.events or at < 0:
            return
        line = data[data.rfind(b"\n", 0, at) + 1:data.find(b"\n", at)]
        record = orjson.loads(line)
        if record.get("type") == "run" and record.get("event") == event:
            self.events[event] = float(record["t"])


def processes(run_pid: int, known: dict[str, int], workers: int) -> dict[str, int]:
    """The run's processes by role (`run`, `fold`, `worker-1`...), looked for among its children until all found."""
    if len(known) < 2 + workers:
        found = {"run": run_pid}
        worker_pids = []
        for pid in children_of(run_pid):
            if is_fold_process(pid):
                found["fold"] = pid
            elif " worker " in f"{cmdline(pid)} ":
                worker_pids.append(pid)
        found.update({f"worker-{number}": pid for number, pid in enumerate(sorted(worker_pids), 1)})
        known.update(found)
    return known


def spool_now(root: Path) -> tuple[int, int]:
    """Bytes of the files under `root` now (files that go while it looks are left out), and how many of them are a
    journal part's closed segments."""
    total = closed = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                continue
            closed += CLOSED_NAME.fullmatch(name) is not None
    return total, closed


def run_case(case: Case, seconds: float, urls: list[str], results: Path, segment: int, work: Path,
             code: Path = REPO_ROOT) -> dict[str, Any]:
    """One case's run, watched once a second; its figures."""
    scenario = work / f"{case.name}.toml"
    scenario.write_text(SCENARIO.format(seconds=seconds, urls=json.dumps(urls), logs="", load=case.load_toml()))
    spool_root = work / f"{case.name}-tmp"
    spool_root.mkdir()
    child = ChildRun(scenario, results, code, args=("--workers", str(case.workers)) if case.workers else (),
                     env={SEGMENT_ENV: str(segment), "TMPDIR": str(spool_root)}).start()
    looks: list[Look] = []
    known: dict[str, int] = {}
    count: JournalCount | None = None
    deadline = time.monotonic() + seconds + 300
    assert child.process is not None
    while child.process.poll() is None and time.monotonic() < deadline:
        if count is None and (folder := child.folder) is not None:
            count = JournalCount(folder)
        if count is not None:
            count.read()
        pids = processes(child.pid, known, case.workers)
        rss = {role: size for role, pid in pids.items() if (size := rss_bytes(pid)) is not None}
        looks.append(Look(time.time(), count.flows if count else 0, rss, *spool_now(spool_root)))
        time.sleep(SAMPLE_EVERY)
    if child.process.poll() is None:
        child.process.kill()  # by its PID; its fold and workers die with it (their lifeline)
    _, stderr = child.process.communicate(timeout=60)
    folder = child.folder
    assert folder is not None and count is not None, stderr.decode(errors="replace")[-2000:]
    count.read()
    began, stopped = count.events.get("load-started"), count.events.get("load-stopped")
    assert began is not None and stopped is not None, stderr.decode(errors="replace")[-2000:]
    steady = [look for look in looks if began + WARM_UP * (stopped - began) <= look.at <= stopped]
    journal = journal_figures(folder, count.flows, segment)
    return {"case": case.name, "rate_asked": case.rate, "workers": case.workers, "segment_bytes": segment,
            "exit_code": child.process.returncode,
            "stderr_tail": stderr.decode(errors="replace")[-500:], "flows_finished": count.flows,
            "load_seconds": round(stopped - began, 1), "flows_per_second": round(count.flows / (stopped - began), 1),
            "journal": journal, "spool": spool_figures(looks, steady),
            "rss": {role: rss_figures(looks, steady, role) for role in sorted(known)},
            "folder": str(folder.relative_to(REPO_ROOT)), "code": str(code),
            "samples": [{"s": round(look.at - began, 1), "flows": look.flows, "spool": look.spool,
                         "rss_mib": {role: round(size / MIB, 1) for role, size in look.rss.items()}}
                        for look in looks]}


def journal_figures(folder: Path, flows: int, segment: int) -> dict[str, Any]:
    """The journal's parts on disk: the stream, the closed segments plain and compressed, the open segments."""
    parts = {}
    for name in part_names(folder, PARTS):
        part = folder / name
        closed = [piece for piece in closed_segments(part) if piece.compressed]
        parts[name] = {"closed_segments": len(closed),
                       "closed_plain_bytes": sum(piece.end - piece.start for piece in closed),
                       "closed_bytes": sum(piece.path.stat().st_size for piece in closed),
                       "still_plain_closed": len(closed_segments(part)) - len(closed),
                       "open_bytes": part.stat().st_size if part.is_file() else 0, "stream_bytes": part_size(part)}
    stream = sum(p["stream_bytes"] for p in parts.values())
    closed_plain = sum(p["closed_plain_bytes"] for p in parts.values())
    closed_bytes = sum(p["closed_bytes"] for p in parts.values())
    plain_per_flow = stream / flows if flows else None
    largest = max(parts, key=lambda name: parts[name]["stream_bytes"])
    check = ratio_check(folder / largest, segment)
    # No closed segment (a short run at a low rate): the stream compressed again, as a segment would be.
    ratio = closed_plain / closed_bytes if closed_bytes else check.get("ratio_segment_frames")
    on_disk = journal_bytes(folder)
    return {"stream_bytes": stream, "on_disk_bytes": on_disk,
            "on_disk_bytes_per_flow": round(on_disk / flows, 1) if flows else None, "plain_bytes_per_flow":
            round(plain_per_flow, 1) if plain_per_flow else None,
            "compression": round(ratio, 2) if ratio else None, "compression_from": "closed segments"
            if closed_bytes else "the stream compressed again",
            "closed_bytes_per_flow": round(plain_per_flow / ratio, 1) if ratio and plain_per_flow else None,
            "growing_parts": sum(1 for name in parts if name != RUN_PART) or 1,
            "parts": parts, "ratio_check": check}


def ratio_check(part: Path, segment: int, whole: int = SEGMENT_BYTES) -> dict[str, Any]:
    """The first `whole` bytes of a part's stream compressed as one frame (a real run's segment) and as frames of
    `segment` bytes (this run's): the ratio of each, as the journal compresses (`harness.journal.segments`)."""
    reader, data = PartReader(part), bytearray()
    while len(data) < whole and (chunk := reader.read()):
        data += chunk
    reader.close()
    del data[whole:]
    if not data:
        return {"plain_bytes": 0}

    def compressed(size: int) -> int:
        return sum(len(zstandard.ZstdCompressor(level=LEVEL, write_checksum=True).compress(data[at:at + size]))
                   for at in range(0, len(data), size))

    one, pieces = compressed(whole), compressed(segment)
    return {"plain_bytes": len(data), "ratio_one_frame": round(len(data) / one, 3),
            "ratio_segment_frames": round(len(data) / pieces, 3), "segment_over_one_frame": round(one / pieces, 4)}


def rss_figures(looks: list[Look], steady: list[Look], role: str) -> dict[str, Any]:
    """A process's RSS: its peak over the run, where the steady part began, its growth per 1,000,000 flows."""
    sizes = [look.rss[role] for look in looks if role in look.rss]
    points = [(look.flows, look.rss[role]) for look in steady if role in look.rss]
    slope = slope_mib_per_million(points)
    return {"peak_mib": round(max(sizes, default=0) / MIB, 1),
            "after_warm_up_mib": round(points[0][1] / MIB, 1) if points else None,
            "growth_mib_per_million_flows": slope,
            "growth_over_steady_mib": round(slope * (points[-1][0] - points[0][0]) / 1_000_000, 2)
            if slope is not None else None}


def spool_figures(looks: list[Look], steady: list[Look]) -> dict[str, Any]:
    """The workers' spools (0 without workers): peak bytes, growth in bytes per flow, whether they rolled."""
    slope = slope_mib_per_million([(look.flows, look.spool) for look in steady])
    return {"peak_bytes": max((look.spool for look in looks), default=0),
            "bytes_per_flow": round(slope * MIB / 1_000_000, 1) if slope is not None else None,
            "rolled": any(look.spool_closed for look in looks)}


# --- the day on paper --------------------------------------------------------------------------------


def journal_after(seconds: float, rate: float, plain_per_flow: float, ratio: float, parts: int) -> float:
    """Journal bytes on disk after `seconds` at `rate`: each growing part compressed at `ratio` but its plain tail
    (two segments of `SEGMENT_BYTES` at most), as `harness.config.disk` models it."""
    per_part = plain_per_flow * rate * seconds / parts
    tail = min(per_part, 2 * SEGMENT_BYTES)
    return parts * (tail + (per_part - tail) / ratio)


def spool_after(flows: float, spool: dict[str, Any], segment: int) -> float:
    """The workers' spools after `flows`: a spool that rolls holds a few segments, whatever the flows (its peak, at
    the real `SEGMENT_BYTES`); one that does not keeps every line it journaled (its growth per flow)."""
    if spool["rolled"]:
        return float(spool["peak_bytes"]) * SEGMENT_BYTES / segment
    return max(spool["bytes_per_flow"] or 0.0, 0.0) * flows


def day_on_paper(figures: dict[str, Any]) -> dict[str, Any]:
    """The case's journal, spools and RSS after an hour and a day at the rate it reached."""
    rate, journal, spool = figures["flows_per_second"], figures["journal"], figures["spool"]
    plain, ratio = journal["plain_bytes_per_flow"], journal["compression"]
    paper: dict[str, Any] = {}
    for label, seconds in (("hour", HOUR), ("day", DAY)):
        flows = rate * seconds
        if plain and ratio:
            paper[f"journal_per_{label}_bytes"] = round(journal_after(seconds, rate, plain, ratio,
                                                                      journal["growing_parts"]))
        if figures["workers"]:
            paper[f"spool_after_{label}_bytes"] = round(spool_after(flows, spool, figures["segment_bytes"]))
        for role, memory in figures["rss"].items():
            slope = memory["growth_mib_per_million_flows"]
            paper.setdefault("rss_growth_mib", {}).setdefault(role, {})[label] = \
                round(slope * flows / 1_000_000, 1) if slope is not None else None
    return paper


def table(cases: list[dict[str, Any]]) -> str:
    """The measured cases as docs/figures.md's Markdown table."""
    rows = ["| flows/s (asked: reached) | workers | journal a flow: plain, on disk (ratio) | journal per hour "
            "| per day | workers' spools after a day | RSS: run process | fold process | each worker |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case in cases:
        journal, paper, rss = case["journal"], case["day"], case["rss"]
        asked = "top" if case["rate_asked"] is None else f"{case['rate_asked']:,.0f}"
        closed = (f"{journal['closed_bytes_per_flow']:,.0f} B ({journal['compression']:.1f}x"
                  f"{'' if journal['compression_from'] == 'closed segments' else ', recompressed'})"
                  if journal["compression"] else "-")
        workers = [memory_cell(rss[role], paper, role) for role in rss if role.startswith("worker-")]
        rows.append(" | ".join([
            f"| {asked}: {case['flows_per_second']:,.0f}", str(case["workers"]),
            f"{journal['plain_bytes_per_flow'] or 0:,.0f} B, {closed}",
            size_cell(paper.get("journal_per_hour_bytes")), size_cell(paper.get("journal_per_day_bytes")),
            size_cell(paper.get("spool_after_day_bytes")) if case["workers"] else "",
            memory_cell(rss.get("run"), paper, "run"), memory_cell(rss.get("fold"), paper, "fold"),
            "; ".join(workers) + " |"]))
    return "\n".join(rows)


def size_cell(count: float | None) -> str:
    return "-" if count is None else size_text(count)


def memory_cell(memory: dict[str, Any] | None, paper: dict[str, Any], role: str) -> str:
    """`peak MiB (+growth over the run after its warm-up)`, or `(flat)` when that moved RSS by less than `FLAT_MIB`.

    Not a day's growth: a two-minute slope multiplied up to a day is the allocator's warm-up multiplied, so a day's
    memory is `benchmarks/soak.py`'s (a slope over a million flows and more); `paper` keeps the extrapolation in the
    JSON for who wants it."""
    if memory is None:
        return "-"
    steady = memory["growth_over_steady_mib"]
    if steady is None:
        return f"{memory['peak_mib']:,.0f} MiB"
    return f"{memory['peak_mib']:,.0f} MiB " + ("(flat)" if abs(steady) < FLAT_MIB else f"({steady:+,.1f} MiB)")


def model_check(cases: list[dict[str, Any]]) -> str:
    """`harness.config.disk`'s constants against the measured plain bytes per two-round flow and ratio."""
    plain = [case["journal"]["plain_bytes_per_flow"] for case in cases if case["journal"]["plain_bytes_per_flow"]]
    ratios = [case["journal"]["compression"] for case in cases if case["journal"]["compression"]]
    model = FLOW_BYTES + 2 * ROUND_BYTES
    lines = []
    if plain:
        low, high = min(plain), max(plain)
        lines.append(f"harness.config.disk: FLOW_BYTES + 2 x ROUND_BYTES = {model:,} bytes a two-round flow; "
                     f"measured {low:,.0f}-{high:,.0f} ({model / high - 1:+.0%} to {model / low - 1:+.0%})")
    if ratios:
        low, high = min(ratios), max(ratios)
        lines.append(f"harness.config.disk: JOURNAL_COMPRESSION = {JOURNAL_COMPRESSION:g}; measured "
                     f"{low:.1f}x-{high:.1f}x ({JOURNAL_COMPRESSION / high - 1:+.0%} to "
                     f"{JOURNAL_COMPRESSION / low - 1:+.0%})")
    return "\n".join(lines)


def cases_of(rates: str, workers: str) -> list[Case]:
    return [Case(None if rate == "top" else float(rate), int(count))
            for rate in rates.split(",") for count in workers.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="seconds of load per case (default 120)")
    parser.add_argument("--rates", default="100,1000,top",
                        help="open-model flows/s, or `top` (closed model, 16 agents), comma-separated")
    parser.add_argument("--workers", default="0,2", help="local Locust workers per case, comma-separated (0: none)")
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose harness runs")
    parser.add_argument("--segment-bytes", type=int, default=4 * MIB,
                        help="segment size of the runs' journals (default 4 MiB; see the module's docstring)")
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    results = RESULTS / "runs" / f"day_on_disk-{started:%Y%m%dT%H%M%SZ}"
    measured = []
    with servers(SERVERS["stub"], 2) as running, tempfile.TemporaryDirectory(prefix="day-on-disk-") as tmp:
        for case in cases_of(args.rates, args.workers):
            print(f"{case.name}: {args.seconds:g} s of load", flush=True)
            figures = run_case(case, args.seconds, [server.url for server in running], results / case.name,
                               args.segment_bytes, Path(tmp), args.code.resolve())
            figures["day"] = day_on_paper(figures)
            figures["load_average_after"] = os.getloadavg()
            measured.append(figures)
    document = {"started": f"{started:%Y-%m-%d %H:%M:%S UTC}", "machine": machine_facts(), "seconds": args.seconds,
                "segment_bytes": args.segment_bytes, "cases": measured}
    write_figures("day_on_disk", document, started)
    print(table(measured))
    print(model_check(measured))
    for case in measured:
        check = case["journal"]["ratio_check"]
        print(f"{case['case']}: exit {case['exit_code']}, {case['flows_finished']:,} flows; ratio check over "
              f"{check['plain_bytes']:,} plain bytes: {check.get('ratio_one_frame')}x as one frame, "
              f"{check.get('ratio_segment_frames')}x in {args.segment_bytes:,}-byte frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
