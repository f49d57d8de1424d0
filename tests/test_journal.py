"""The journal: typed records written as JSON lines, on disk even when nothing follows them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import typing
from pathlib import Path

from harness.journal.records import RECORDS, FlowStarted, RecordType, RunEvent, RunStarted, advance_time_zero
from harness.journal.writer import Journal, read_journal
from tests.harness_run import ROOT


def test_records_reach_the_disk_even_when_nothing_follows_them(tmp_path: Path) -> None:
    """Leads think for minutes: the last records before a quiet stretch must not wait in memory for the next one."""
    journal = Journal(tmp_path / "journal.jsonl")
    journal.write(RunStarted(type=RecordType.RUN, event=RunEvent.START, t=time.time(), run_id="r", scenario="s",
                             seed=1, duration=1.0))
    journal.write(FlowStarted(type=RecordType.START, t=time.time(), flow_id="w0-000001", flow="refund",
                              scheduled=None, late=False))
    on_disk = _lines_once_written(tmp_path / "journal.jsonl", 2)  # quiet: no record follows, nor a close
    journal.close()
    assert [json.loads(line)["type"] for line in on_disk] == ["run", "start"]


def _lines_once_written(path: Path, count: int) -> list[bytes]:
    """The file's lines once it holds `count` (or after a minute: what it holds then). Polled, not slept on:
    the flusher's delay is the code's, a busy machine may stretch it, and only "without a next record" counts."""
    deadline = time.monotonic() + 60
    while len(lines := path.read_bytes().splitlines() if path.exists() else []) < count \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return lines


def test_in_a_load_process_too_records_reach_the_disk_when_nothing_follows_them(tmp_path: Path) -> None:
    """Under gevent's patching (a run, a worker) the batch is written by a timer on gevent's loop, not a thread:
    the same promise, in a fresh interpreter patched the way a run is."""
    probe = ("import json, sys, time\nfrom pathlib import Path\n"
             "import locust\n"
             "from harness.journal.writer import Journal\nfrom harness.journal.records import FlowStarted, RecordType\n"
             "path = Path(sys.argv[1])\njournal = Journal(path)\n"
             "for n in range(3):\n"
             "    journal.write(FlowStarted(type=RecordType.START, t=time.time(), flow_id=f'f{n}', flow='call', "
             "scheduled=None, late=False))\n"
             "deadline = time.monotonic() + 60  # quiet: no record follows; gevent's sleep here\n"
             "while len(path.read_bytes().splitlines()) < 3 and time.monotonic() < deadline:\n"
             "    time.sleep(0.05)\n"
             "print(len(path.read_bytes().splitlines()))\n"
             "journal.write(FlowStarted(type=RecordType.START, t=time.time(), flow_id='f3', flow='call', "
             "scheduled=None, late=False))\njournal.close()\nprint(len(path.read_bytes().splitlines()))\n")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "journal.jsonl")], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "4"]


def test_a_closed_journal_holds_every_record_in_order(tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.jsonl") as journal:
        journal.write_many(FlowStarted(type=RecordType.START, t=float(n), flow_id=f"f{n}", flow="call",
                                       scheduled=None, late=False) for n in range(5000))
    assert [record["flow_id"] for record in read_journal(tmp_path / "journal.jsonl")] == [f"f{n}" for n in range(5000)]


def test_time_zero_is_the_load_start_once_known_else_the_run_start() -> None:
    zero = None
    for record in ({"type": "run", "event": "start", "t": 10.0}, {"type": "round", "t": 11.0},
                   {"type": "run", "event": "load-started", "t": 14.0}, {"type": "run", "event": "end", "t": 20.0}):
        zero = advance_time_zero(zero, record)
        if record["t"] == 10.0:
            assert zero == 10.0
    assert zero == 14.0


def test_every_record_type_says_its_type_and_time() -> None:
    for record_type in RECORDS:
        hints = typing.get_type_hints(record_type)
        assert {"type", "t"} <= set(hints), record_type.__name__
        assert typing.get_args(hints["type"])[0] in set(RecordType), record_type.__name__
