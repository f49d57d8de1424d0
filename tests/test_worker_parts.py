"""A worker's part of the journal holds only what a worker writes: any other record there is damage, never folded.

The master appends what a worker sends to `journal-w<i>.jsonl`; a forged `reconciliation` or `run end` in it must not
change the verdict (`report DIR` read it last, so it won), and no line, however malformed, stops the run's live fold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.config.scenario import parse_scenario
from harness.folding.read import read_run
from harness.journal.records import WORKER_RECORDS, is_worker_part, worker_part
from harness.journal.writer import Journal
from harness.run.live_fold.protocol import Finish
from harness.run.live_fold.worker import LiveFold
from tests.harness_run import ROOT, valid_summary
from tests.test_report import T0, put, write_run

SCENARIO = ('name = "nightly-refunds"\nseed = 7\nduration = "30s"\n[load]\narrival_rate = 2\n'
            '[[flows]]\nkind = "refund"\n[[flows]]\nkind = "return"\n')


def _worker_flow(journal: Journal, n: int) -> None:
    put(journal, "start", t=T0 + n, flow_id=f"w1-{n}", flow="refund", scheduled=T0 + n, late=False)
    put(journal, "round", t=T0 + n + 0.2, flow_id=f"w1-{n}", flow="refund", tool="refund_tool", round=1,
        replica="replica-1", intended=T0 + n, sent=T0 + n, latency=0.05, server_time=0.04, outcome="complete",
        http_status=200, code=None)
    put(journal, "flow", t=T0 + n + 0.3, flow_id=f"w1-{n}", flow="refund", outcome="completed", rounds=1,
        duration=0.3, server_time=0.04, think_time=0.0, late=False,
        calls=[{"tool": "refund_tool", "rounds": 1, "outcome": "complete"}])


def _forged_folder(tmp_path: Path) -> Path:
    """A run whose own journal says 5 rejections went unexplained (exit 1), and a worker's part that ends with a
    `reconciliation` saying none did and a `run end` saying all is well, as a forged worker would have sent them."""
    folder = tmp_path / "20261207T060000Z-nightly-refunds"
    folder.mkdir()
    (folder / "scenario.json").write_text(parse_scenario(SCENARIO).model_dump_json())
    write_run(folder / "journal.jsonl", unexplained=5)
    with Journal(folder / worker_part(1)) as journal:
        for n in range(3):
            _worker_flow(journal, n)
        put(journal, "reconciliation", t=T0 + 40, client_rejections=9, logged=9, matched=9, unexplained=0,
            unmatched_logged=0, examples={"unexplained": [], "unmatched_logged": []})
        put(journal, "run", t=T0 + 41, event="end", status="completed", reason=None, target_error=None)
    return folder


def _report(folder: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "report", str(folder), *options], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_report_reads_a_forged_record_in_a_workers_part_as_damage_and_exits_4_naming_it(tmp_path):
    folder = _forged_folder(tmp_path)
    for options in ((), ("--lenient",)):
        rebuilt = _report(folder, *options)
        assert rebuilt.returncode == 4, rebuilt.stderr
        (line,) = [line for line in rebuilt.stderr.splitlines() if "no worker writes" in line]
        assert "journal-w1.jsonl `reconciliation`" in line and "journal-w1.jsonl `run`" in line, line
        summary = valid_summary(folder / "summary.json")
        assert summary["reconciliation"]["unexplained"] == 5  # the run's own, never the forged one
        assert summary["flows"]["total"] == 63  # the worker's own flows are still read
        assert summary["exit_code"] == 4 and "journal-w1.jsonl" in summary["reason"]


def test_the_live_fold_reads_a_workers_part_as_report_does(tmp_path):
    folder = _forged_folder(tmp_path)
    part = folder / worker_part(1)
    fold = LiveFold(folder)
    fold.read_part("journal.jsonl", (folder / "journal.jsonl").stat().st_size)
    fold.read_part(part.name, part.stat().st_size)
    live = fold.reply_to(Finish(("journal.jsonl", part.name)))
    rebuilt = read_run([folder / "journal.jsonl", part])
    assert live.foreign == rebuilt.foreign == {"journal-w1.jsonl: reconciliation": 1, "journal-w1.jsonl: run": 1}
    assert live.checks.reconciliation == rebuilt.checks.reconciliation
    assert live.checks.reconciliation.unexplained == 5


def test_a_part_named_like_a_workers_is_read_as_one():
    assert all(is_worker_part(name) for name in ("journal-w0.jsonl", "journal-w12.jsonl", "journal-w01.jsonl"))
    assert not is_worker_part("journal.jsonl")


HOSTILE = [b'{"type":"rejection"}', b'{"type":"round"}', b'{"type":"start"}', b'{"type":"flow","flow_id":1}',
           b'[1,2]', b'{"type":"reconciliation"}', b"[" * 5000 + b"]" * 5000, b'{"a":' * 2000 + b"1" + b"}" * 2000,
           b'{"type":"invariant","invariant":[1]}', b'{"type":"hypothesis","phase":{}}', b'{"type":"chaos"}',
           b'{"type":"run","event":"end"}', b'{"type":"round","flow_id":"x","replica":[],"code":-32602}']

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=8))
JSON = st.recursive(SCALARS,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
RECORDS = st.fixed_dictionaries({"type": st.sampled_from(["run", "start", "round", "flow", "chaos", "command",
                                                          "rejection", "hypothesis", "invariant", "reconciliation"])},
                                optional={"t": JSON, "flow_id": JSON, "flow": JSON, "round": JSON, "replica": JSON,
                                          "outcome": JSON, "event": JSON, "reason": JSON, "code": JSON,
                                          "latency": JSON, "trace_id": JSON, "phase": JSON, "status": JSON})


def _fold_lines(folder: Path, part: str, lines: list[bytes]) -> LiveFold:
    path = folder / part
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    fold = LiveFold(folder)
    fold.read_part(part, path.stat().st_size)
    return fold


def test_no_malformed_line_stops_the_live_fold(tmp_path):
    """Each line the fold's own checks could not take is counted; the flow after them is still folded."""
    good = json.dumps({"type": "start", "t": T0, "flow_id": "f1", "flow": "refund"}).encode()
    for part in ("journal.jsonl", worker_part(0)):
        fold = _fold_lines(tmp_path, part, [*HOSTILE, good])
        live = fold.reply_to(Finish((part,)))
        assert live.figures.flows >= 1  # the good line after them
        assert live.unreadable >= 5


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(RECORDS | JSON, max_size=12), worker=st.booleans())
def test_any_json_lines_leave_the_live_fold_answering(tmp_path, records, worker):
    part = worker_part(0) if worker else "journal.jsonl"
    lines = [json.dumps(record).encode() for record in records]
    fold = _fold_lines(tmp_path, part, lines)
    fold.reply_to(Finish((part,)))
    if worker:
        assert all(name.startswith(part) for name in fold.read.foreign)
        assert sum(fold.read.foreign.values()) == sum(
            1 for record in records if isinstance(record, dict) and not _workers(record.get("type")))


def _workers(kind: object) -> bool:
    return isinstance(kind, str) and kind in WORKER_RECORDS


def test_compare_reads_a_forged_record_in_a_workers_part_as_damage_not_as_the_runs_own(tmp_path):
    """`compare`'s read of a results folder takes from a worker's part only what a worker writes, as `report` does:
    a forged CPU figure there never becomes the run's, and the forged lines are counted as damage (so a comparison
    with this run as the current one fails closed)."""
    from harness.compare.samples import read_results

    folder = _forged_folder(tmp_path)
    with Journal(folder / worker_part(1)) as journal:
        put(journal, "run", t=T0 + 42, event="cpu", harness_per_round_ms=0.001, replica_per_round_ms=0.001)
    samples = read_results(folder).samples
    assert samples.unreadable == 3  # the forged reconciliation, run end and cpu records
    assert samples.harness_per_round_ms is None and samples.replica_per_round_ms is None
    assert samples.flows_finished == read_run([folder / "journal.jsonl", folder / worker_part(1)]).figures.flows
