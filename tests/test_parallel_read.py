"""`report DIR` folds a journal of many segments in several processes: the same figures as one pass, to the byte."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import zstandard

from harness import report
from harness.folding.parallel import read_parallel
from harness.folding.read import JournalRead, read_run
from harness.journal.plain import to_plain
from harness.journal.segments import SEGMENT_ENV, closed_segments
from harness.journal.writer import Journal, UnreadableJournal
from harness.processes.children import descendants
from harness.report import journal_parts, rebuild_results, results_scenario, write_results
from tests.harness_run import ROOT
from tests.services import sigint_default
from tests.test_lifeline import describe, kill_and_count_survivors
from tests.test_report import T0, put

SEGMENT = 4096
"""Segments of 4 KiB: a few hundred flows roll dozens of them, and the parallel read takes a journal this big."""


@pytest.fixture(autouse=True)
def _small_segments(monkeypatch):
    monkeypatch.setenv(SEGMENT_ENV, str(SEGMENT))


def _plain(read: JournalRead) -> bytes:
    return orjson.dumps(to_plain(read, JournalRead))


def _journal(path: Path, flows: int, seed: int = 3, *, network: bool = False) -> Path:
    """A run's journal with a bit of everything the folds read: three flow kinds on two hosts, rounds that fail with
    a message or are refused for their token, fuzz mutants, request states, late starts, rejections, invariants,
    chaos, reconciliation and the run's events, written by the run's own writer in small compressed segments."""
    rng = random.Random(seed)
    with Journal(path, segment_bytes=SEGMENT, flush_delay=0.0) as journal:
        put(journal, "run", t=T0, event="start", run_id="run-1", scenario="mix", seed=seed, judged="expect")
        put(journal, "run", t=T0 + 0.25, event="load-started")
        for n in range(flows):
            t = T0 + 0.3 + n * 0.37 + rng.random()
            _flow(journal, rng, n, t)
            journal.flush()  # a segment rolls at a batch's end
            if n % 97 == 13:
                put(journal, "rejection", t=t, replica=f"r{n % 3}", reason=rng.choice(["expired", "seal"]),
                    method="tools/call")
            if n == flows // 3:
                put(journal, "chaos", t=t, action="network" if network else "restart", phase="start",
                    target="r1", ok=None, detail="")
            if n == flows // 2:
                put(journal, "chaos", t=t, action="network" if network else "restart", phase="end", target="r1",
                    ok=True, detail="")
        end = T0 + 1 + flows * 0.37
        put(journal, "run", t=end, event="load-stopped")
        put(journal, "invariant", t=end + 1, invariant="no refund released twice", violations=1,
            detail=["refund R-1"])
        put(journal, "reconciliation", t=end + 2, client_rejections=5, logged=4, matched=4, unexplained=1,
            unmatched_logged=0, examples={"unexplained": ["f1 round 2"], "unmatched_logged": []})
        put(journal, "run", t=end + 3, event="end", status="completed")
    return path


def _flow(journal: Journal, rng: random.Random, n: int, t: float) -> None:
    kind, host = rng.choice(["refund", "return", "fuzz"]), rng.choice(["default", "claude"])
    flow_id = f"w0-{n}"
    put(journal, "start", t=t, flow_id=flow_id, flow=kind, scheduled=t - 0.001, late=n % 11 == 0, host=host)
    rounds = rng.choice([1, 2, 2, 3])
    sent = t
    for number in range(1, rounds + 1):
        latency = round(rng.lognormvariate(-5, 1), 6)
        outcome = "complete" if number == rounds else "input_required"
        extra: dict[str, object] = {}
        if rng.random() < 0.08:
            outcome, extra = "invalid_state", {"code": -32602, "error": f"Invalid requestState for order O-{n}",
                                               "trace_id": f"{rng.getrandbits(128):032x}"}
        elif rng.random() < 0.03:
            outcome, extra = "unauthorized", {"code": 401}
        if number > 1:
            extra["crossed"] = rng.random() < 0.5
        put(journal, "round", t=sent + latency, flow_id=flow_id, flow=kind, tool=f"{kind}_tool", round=number,
            replica=f"r{rng.randrange(3)}", sent=sent, latency=latency, outcome=outcome, host=host,
            state_bytes=rng.choice([512, 640]), **extra)
        sent += latency + rng.random()
    record: dict[str, object] = {"duration": round(sent - t, 6), "think_time": round(rng.random(), 6),
                                 "calls": [{"tool": f"{kind}_tool", "rounds": rounds, "outcome": "complete"}]}
    if kind == "fuzz":
        record |= {"mutation": rng.choice(["truncate", "flip"]), "mutant_answer": "rejected", "mutant_round": 2}
    put(journal, "flow", t=sent, flow_id=flow_id, flow=kind, outcome=rng.choice(["completed", "declined"]),
        rounds=rounds, late=n % 11 == 0, host=host, **record)


def test_a_journal_folded_by_segment_in_two_processes_equals_one_pass_to_the_last_byte(tmp_path):
    journal = _journal(tmp_path / "journal.jsonl", 1500)
    worker = _journal(tmp_path / "journal-w1.jsonl", 400, seed=4)  # a worker's part, read after the run's own
    assert len(closed_segments(journal)) > 50 and len(closed_segments(worker)) > 10
    parts = journal_parts(tmp_path)
    assert [path.name for path in parts] == ["journal.jsonl", "journal-w1.jsonl"]
    serial = read_run(parts)
    parallel = read_parallel(parts, 2)
    assert parallel is not None
    assert _plain(parallel) == _plain(serial)
    assert parallel.figures.flows == 1900 and parallel.records == serial.records
    assert parallel.errors.top() == serial.errors.top() and parallel.errors.top()[0].count > 50
    assert parallel.fuzz.table().as_dict() == serial.fuzz.table().as_dict()
    assert len(parallel.timeline.stored) > 60  # widened past the first width, the same bins either way


def test_report_of_a_folder_gives_the_results_one_pass_gives(tmp_path, monkeypatch):
    """`report DIR` takes the parallel read for a journal of many segments: its summary is the one pass's."""
    folders = []
    for name in ("parallel", "serial"):
        folder = tmp_path / name
        folder.mkdir()
        _journal(folder / "journal.jsonl", 900)
        (folder / "scenario.json").write_text(_scenario_json())
        folders.append(folder)
    taken: list[bool] = []
    monkeypatch.setattr(report, "read_parallel", lambda parts, workers: _noted(taken, read_parallel(parts, 2)))
    rebuild_results(folders[0])
    assert taken == [True]
    parts = journal_parts(folders[1])
    write_results(folders[1], results_scenario(folders[1]), parts, [], live=read_run(parts), save=True)
    parallel, serial = (json.loads((folder / "summary.json").read_text()) for folder in folders)
    for summary in (parallel, serial):
        summary["journal"]["parts"] = [Path(part).name for part in summary["journal"]["parts"]]
    assert parallel == serial and parallel["flows"]["total"] == 900


def _noted(taken: list[bool], read: JournalRead | None) -> JournalRead | None:
    taken.append(read is not None)
    return read


def test_damaged_lines_and_a_torn_end_are_counted_alike(tmp_path):
    journal = _journal(tmp_path / "journal.jsonl", 800)
    with open(journal, "ab") as part:  # the open segment: a line that is no record, then a torn one
        part.write(b'{"type":"round","t":\n[1, 2]\n{"type":"flow","t":17')
    parts = journal_parts(tmp_path)
    serial, parallel = read_run(parts), read_parallel(parts, 2)
    assert parallel is not None and (serial.unreadable, serial.torn) == (2, 1)
    assert _plain(parallel) == _plain(serial)


def test_a_journal_with_a_network_fault_is_read_in_one_pass(tmp_path):
    """A fault's window counts the rounds sent into it, which lie in the segments after its start."""
    _journal(tmp_path / "journal.jsonl", 800, network=True)
    parts = journal_parts(tmp_path)
    assert read_parallel(parts, 2) is None
    assert read_run(parts).figures.faults[0].rounds.total() > 50


def test_a_line_running_past_a_segment_s_end_sends_the_read_back_to_one_pass(tmp_path):
    journal = _journal(tmp_path / "journal.jsonl", 800)
    first = closed_segments(journal)[0]
    text = _decompressed(first.path)
    cut = text.rstrip(b"\n").rfind(b"\n") + 10  # within the last line
    (tmp_path / first.path.name).unlink()
    (tmp_path / f"journal.{cut:012d}.jsonl").write_bytes(text[:cut])
    second = closed_segments(journal)[1]
    rest = text[cut:] + _decompressed(second.path)
    second.path.unlink()
    (tmp_path / f"journal.{second.end:012d}.jsonl").write_bytes(rest)
    parts = journal_parts(tmp_path)
    assert read_parallel(parts, 2) is None
    assert read_run(parts).unreadable == 0  # one pass reads that line whole


def test_a_part_that_is_no_journal_is_refused_by_the_parallel_read_too(tmp_path):
    _journal(tmp_path / "journal.jsonl", 800)
    first = closed_segments(tmp_path / "journal.jsonl")[0]
    first.path.unlink()
    (tmp_path / f"journal.{first.end:012d}.jsonl").write_bytes(b"\0" * first.end)
    with pytest.raises(UnreadableJournal, match="binary file"):
        read_parallel(journal_parts(tmp_path), 2)


def test_report_killed_with_sigkill_mid_read_leaves_no_fold_process_behind(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _journal(folder / "journal.jsonl", 20_000)
    (folder / "scenario.json").write_text(_scenario_json())
    report = subprocess.Popen([sys.executable, "-m", "harness", "report", str(folder)], cwd=ROOT,
                              env={**os.environ, SEGMENT_ENV: str(SEGMENT)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, preexec_fn=sigint_default)
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 2 and report.poll() is None and time.monotonic() < deadline:
            seen |= descendants(report.pid)
            time.sleep(0.01)
        assert len(seen) >= 2, "the report ended before its fold processes were seen"
        survivors = kill_and_count_survivors(report, seen)
        assert not survivors, describe(survivors)
    finally:
        if report.poll() is None:
            report.kill()
            report.wait(10)


def _decompressed(path: Path) -> bytes:
    return zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes()) \
        if path.suffix == ".zst" else path.read_bytes()


def _scenario_json() -> str:
    from harness.config.scenario import parse_scenario

    return parse_scenario('name = "mix"\nseed = 3\nduration = "30s"\n[load]\narrival_rate = 2\n'
                          '[[flows]]\nkind = "refund"\n').model_dump_json()
