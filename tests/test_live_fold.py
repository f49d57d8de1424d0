"""The live fold in a process of its own: the run's results equal a rebuild from the journal, whatever the
batches, and a fold that stops reading or dies never stalls the load nor passes a run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gevent

from harness.config.scenario import parse_scenario
from harness.folding.invariants import INVARIANTS, InvariantResult
from harness.folding.over_time import Timeline
from harness.folding.read import JournalRead, read_run
from harness.folding.snapshot import SNAPSHOT, read_snapshot
from harness.journal.records import RecordType
from harness.journal.writer import Journal
from harness.processes.children import alive, descendants
from harness.report import write_results
from harness.run.live_fold import protocol
from harness.run.live_fold.client import FoldProcess
from harness.run.live_fold.protocol import (
    Ask,
    Echo,
    Figures,
    Finish,
    Invariants,
    OpenWindow,
    ProgressCounts,
    Reconcile,
    ReplicaRounds,
    SoFar,
    StateSizes,
    Tell,
    TracedReasons,
    WindowFigures,
)
from harness.run.live_fold.worker import LiveFold
from tests.harness_run import ROOT, SCENARIOS, run_harness
from tests.test_lifeline import _cmdline, sigint_default
from tests.test_report import T0, write_run

RUN_FILES = {"scenario.toml", "scenario.json", "journal.jsonl", "summary.json", "junit.xml", "report.html",
             "locust_stats.json", "metrics.prom", SNAPSHOT, "target"}
"""What a run leaves in its results folder (a harness error adds `harness-error.txt`, its traceback)."""
SCENARIO = parse_scenario('name = "nightly-refunds"\nseed = 7\nduration = "30s"\n[load]\narrival_rate = 2\n'
                          '[[flows]]\nkind = "refund"\n[[flows]]\nkind = "return"\n')


@contextmanager
def _fold_of(tmp_path: Path) -> Iterator[tuple[FoldProcess, Journal]]:
    """A live fold process told of every batch of a journal in `tmp_path` (written when flushed, or asked)."""
    fold = FoldProcess(tmp_path, save_every=3600)
    journal = Journal(tmp_path / "journal.jsonl", on_flush=fold.grown, flush_delay=3600)
    fold.flush = journal.flush
    fold.start()
    try:
        yield fold, journal
    finally:
        if fold.pid is not None and alive(fold.pid):
            os.kill(fold.pid, signal.SIGCONT)
        fold.close()
        journal.close()


def _flow(journal: Journal, n: int, t: float = T0) -> None:
    journal.write({"type": "flow", "t": t, "flow": "refund", "flow_id": f"f{n}",  # type: ignore[arg-type]
                   "outcome": "completed", "duration": 1.0})


def _until_waiting(fold: FoldProcess, count: int) -> None:
    """Switch greenlets until `count` askers have sent their request and wait for its reply."""
    for _ in range(100_000):
        if len(fold._waiting) >= count:
            return
        gevent.sleep(0)
    raise AssertionError(f"{len(fold._waiting)} askers waiting, not {count}")


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def _written(folder: Path, journal: Path, read) -> dict:
    folder.mkdir()
    write_results(folder, SCENARIO, [journal], [], live=read)
    return _summary(folder)


def test_a_fold_fed_in_any_batches_equals_one_pass_over_the_journal(tmp_path):
    """Batches cut anywhere, mid-line included: the same figures, checks and damage counts as `report DIR`."""
    journal = write_run(tmp_path / "journal.jsonl", ended=False, torn=True)
    data = journal.read_bytes()
    fold = LiveFold(tmp_path)
    cuts = sorted(random.Random(3).sample(range(1, len(data)), 40)) + [len(data)]
    for size in cuts:
        fold.read_part("journal.jsonl", size)
    live = fold.reply_to(Finish(("journal.jsonl",)))
    assert live.torn == 1 and live.records > 100
    assert _written(tmp_path / "live", journal, live) == _written(tmp_path / "read", journal, read_run([journal]))


def test_a_line_whose_type_is_no_string_is_counted_and_the_fold_goes_on(tmp_path):
    """A part's line whose `type` is a list or an object (a worker's part is written from what a worker sent) is one
    record the figures could not take, as `report DIR` counts it; the fold neither stops nor loses the lines after."""
    journal = write_run(tmp_path / "journal.jsonl", ended=True)
    hostile = b'{"type":["round"],"t":1}\n{"type":{"a":1}}\n[1,2]\n"text"\n'
    data = journal.read_bytes()
    middle = data.index(b"\n", len(data) // 2) + 1
    journal.write_bytes(data[:middle] + hostile + data[middle:])
    fold = LiveFold(tmp_path)
    fold.read_part("journal.jsonl", journal.stat().st_size)
    live = fold.reply_to(Finish(("journal.jsonl",)))
    rebuilt = read_run([journal])
    assert live.unreadable == rebuilt.unreadable == 4
    assert live.records == rebuilt.records and live.figures.flows == rebuilt.figures.flows > 0


def test_the_checks_the_fold_keeps_are_the_journals(tmp_path):
    """One flow started and never ended, one ended twice: `one_outcome_per_flow` names both, from the fold."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        for flow_id in ("f1", "f2", "f3"):
            journal.write({"type": "start", "t": T0, "flow": "refund", "flow_id": flow_id})  # type: ignore[arg-type]
        for flow_id in ("f1", "f1", "f2"):
            journal.write({"type": "flow", "t": T0 + 1, "flow": "refund", "flow_id": flow_id,  # type: ignore[arg-type]
                           "outcome": "completed"})
    fold = LiveFold(tmp_path)
    fold.read_part("journal.jsonl", path.stat().st_size)
    (one_outcome,) = [tally for tally in fold.reply_to(Invariants(None, None)) if tally.name == "one_outcome_per_flow"]
    assert one_outcome.violations == 2
    assert sorted(one_outcome.examples) == ["f1: started 0 times, ended 1 times", "f3: started 1 times, ended 0 times"]


def test_every_query_of_the_protocol_is_answered_through_the_pipe_with_its_reply_type(tmp_path):
    """One of each query the protocol declares, asked of a real fold process: each answer is of the reply type the
    query names, so the run and the fold agree on one interface (a query added without its case fails here)."""
    queries: list[Ask[Any] | Tell] = [
        Figures(), OpenWindow("during", T0), WindowFigures("during"), ProgressCounts(), ReplicaRounds(),
        Reconcile(("replica-1",)), TracedReasons(("replica-1",)), Invariants(None, None), Echo(("back", 1))]
    declared = {kind for kind in vars(protocol).values() if isinstance(kind, type) and kind not in (Ask, Tell)
                and issubclass(kind, Ask | Tell)}
    assert declared == {type(query) for query in queries} | {Finish, StateSizes, SoFar}
    with _fold_of(tmp_path) as (fold, journal):
        _flow(journal, 1)
        answers = {}
        for query in queries:
            if isinstance(query, Tell):
                fold.tell(query)
            else:
                answers[type(query)] = fold.ask(query)
        journal.write({"type": "round", "t": T0 + 2, "flow": "refund", "flow_id": "f2",  # type: ignore[arg-type]
                       "tool": "issue_refund", "round": 1, "replica": "r1", "latency": 0.01, "outcome":
                       "input_required", "code": None, "state_bytes": 321})  # after the others: theirs stay as were
        sizes, (figures, timeline) = fold.ask(StateSizes()), fold.ask(SoFar())
        journal.close()
        read = fold.ask(Finish((journal.path.name,)))
    assert answers[Figures].flows == 1 and answers[WindowFigures].flows == 0  # the flow came before the window
    assert answers[ProgressCounts] == (1, [])
    assert answers[ReplicaRounds] == {} and answers[Echo] == ("back", 1)
    assert answers[Reconcile]["type"] == RecordType.RECONCILIATION and answers[Reconcile]["unexplained"] == 0
    assert answers[TracedReasons] == []
    assert [result.name for result in answers[Invariants]] == list(INVARIANTS)
    assert all(isinstance(result, InvariantResult) for result in answers[Invariants])
    assert isinstance(read, JournalRead) and read.figures.flows == 1
    assert {key: counts.items() for key, counts in sizes.items()} == {("refund", "issue_refund", 1): [(321, 1)]}
    assert (figures.flows, figures.rounds, figures.state_bytes.keys()) == (1, 1, sizes.keys())
    assert isinstance(timeline, Timeline) and timeline.bins().count >= 1


def test_a_paused_fold_process_never_stalls_the_writer_and_catches_up(tmp_path):
    """The fold stopped (SIGSTOP) while the journal grows past what the pipe holds: every write returns, what the
    pipe did not take waits in order, and once the fold runs again it answers with every record."""
    with _fold_of(tmp_path) as (fold, journal):
        os.kill(fold.pid, signal.SIGSTOP)
        for n in range(6000):  # a batch each: more frames than a pipe holds
            _flow(journal, n, T0 + n)
            journal.flush()
        assert fold._pending, "the pipe took every frame: the fold was not behind"
        os.kill(fold.pid, signal.SIGCONT)
        finished, _ = fold.ask(ProgressCounts())
        assert finished == 6000 and not fold._pending
        journal.close()
        read = fold.finish([journal.path])
        assert read.figures.flows == 6000 and fold.process.poll() == 0
        assert (tmp_path / SNAPSHOT).is_file()


def test_a_hypothesis_window_holds_the_flows_journaled_after_it_opened(tmp_path):
    """A window opens where it stands among the journal's batches: flows that ended before it are not in it, flows
    after it are (and a late record of an earlier time is left out by its time), and the window it closes stops."""
    with _fold_of(tmp_path) as (fold, journal):
        def flows(first: int, count: int, t: float) -> None:
            for n in range(first, first + count):
                _flow(journal, n, t)

        flows(0, 30, T0)
        flows(30, 7, T0 + 15)  # stamped after the window's start, but journaled before it opened: not the window's
        fold.tell(OpenWindow("during", T0 + 10))
        flows(37, 20, T0 + 11)
        flows(57, 5, T0 + 9)  # journaled late, ended before the window opened
        fold.tell(OpenWindow("after", T0 + 20, closing="during"))
        flows(62, 12, T0 + 21)
        during, after = fold.ask(WindowFigures("during")), fold.ask(WindowFigures("after"))
        assert (during.flows, after.flows, fold.ask(Figures()).flows) == (20, 12, 74)


def test_an_asker_stopped_before_its_reply_leaves_that_reply_to_no_one(tmp_path):
    """The reported desync: `progress()` killed while it waits; the next request, `replica_rounds()`, gets its own
    answer (a dict), not the progress tuple, and the orphaned reply is dropped."""
    with _fold_of(tmp_path) as (fold, journal):
        _flow(journal, 1)
        os.kill(fold.pid, signal.SIGSTOP)  # no reply can come while the asker is stopped
        progress = gevent.spawn(fold.ask, ProgressCounts())
        _until_waiting(fold, 1)
        progress.kill()
        os.kill(fold.pid, signal.SIGCONT)
        assert fold.ask(ReplicaRounds()) == {}
        assert fold.dropped == 1 and fold.ask(ProgressCounts())[0] == 1 and fold.lost is None


def test_askers_stopped_anywhere_across_thousands_of_requests_each_get_only_their_own_answer(tmp_path):
    """Rounds of concurrent askers, each echoing a value of its own (some far larger than the pipe, so their replies
    take many reads), between journal batches. In each round a seeded quarter is killed while it waits, another
    quarter at a seeded random point (before sending, while waiting, mid-reply, or answered but not yet resumed),
    the rest not at all: every answer anyone got is its own, every asker not killed got one, no slot is left,
    every orphaned reply is dropped, and the fold still answers and counts every flow."""
    rng = random.Random(30)
    answers: dict[int, Any] = {}
    values: dict[int, Any] = {}
    spared: list[int] = []
    killed_waiting = 0

    with _fold_of(tmp_path) as (fold, journal):
        def ask(n: int) -> None:
            answers[n] = fold.ask(Echo(values[n]))

        for round_ in range(30):
            for n in range(round_ * 10, round_ * 10 + 10):
                _flow(journal, n)
            os.kill(fold.pid, signal.SIGSTOP)
            askers: dict[int, gevent.Greenlet] = {}
            for n in range(round_ * 100, round_ * 100 + 100):
                values[n] = (n, b"x" * (200_000 if rng.random() < 0.05 else rng.randrange(64)))
                askers[n] = gevent.spawn(ask, n)
            _until_waiting(fold, len(askers))
            plans = {n: rng.choice(("waiting", "anywhere", "spared", "spared")) for n in askers}
            for n, plan in plans.items():
                if plan == "waiting":
                    askers[n].kill()
                    killed_waiting += 1
            os.kill(fold.pid, signal.SIGCONT)
            killers = [gevent.spawn(_kill_after, askers[n], rng.randrange(200)) for n, plan in plans.items()
                       if plan == "anywhere"]
            spared += [n for n, plan in plans.items() if plan == "spared"]
            gevent.joinall([*askers.values(), *killers], raise_error=True)

        assert fold.ask(Echo("last")) == "last"  # its reply came after every earlier one: each was read and handed on
        wrong = [n for n, answer in answers.items() if answer != values[n]]
        assert wrong == [] and set(spared) <= set(answers)
        assert fold._waiting == {} and fold.dropped >= killed_waiting > 0
        assert fold.lost is None and fold.ask(ProgressCounts())[0] == 300


def _kill_after(greenlet: gevent.Greenlet, switches: int) -> None:
    for _ in range(switches):
        gevent.sleep(0)
    greenlet.kill()


def test_a_run_whose_fold_process_dies_is_a_harness_error_with_results_from_the_journal(tmp_path):
    """Killing the fold mid-run: exit 4, the cause said once, the status errored, and summary.json still holds
    every flow of the journal (read from it, as `report DIR` would)."""
    output = tmp_path / "output.txt"
    with open(output, "wb") as sink:
        process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(SCENARIOS / "smoke.toml"),
                                    "--duration", "12s", "--results", str(tmp_path / "results")],
                                   stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                   preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 90
        while not any(b'"type":"flow"' in part.read_bytes() for part in (tmp_path / "results").glob("*/journal.jsonl")):
            assert process.poll() is None and time.monotonic() < deadline, output.read_text(errors="replace")
            time.sleep(0.2)  # until a flow has ended: the summary must hold some, read from the journal
        (fold,) = [pid for pid in descendants(process.pid) if b"harness.run.live_fold" in _cmdline(pid)]
        os.kill(fold, signal.SIGKILL)
        assert process.wait(120) == 4, output.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    text = output.read_text()
    said = [line for line in text.splitlines() if line.startswith("harness error:")]
    assert len(said) == 1 and "FoldLost: the live fold process exited with code -9" in said[0], text
    (folder,) = (tmp_path / "results").iterdir()
    assert {path.name for path in folder.iterdir()} == RUN_FILES | {"harness-error.txt"}
    journal = folder / "journal.jsonl"
    journal_flows = journal.read_bytes().count(b'"type":"flow"')
    summary = _summary(folder)
    assert summary["status"] == "errored" and summary["exit_code"] == 4
    assert summary["flows"]["total"] == journal_flows > 0
    assert summary["journal"]["unreadable"] == summary["journal"]["torn"] == 0
    junit = ElementTree.parse(folder / "junit.xml")
    properties = {item.get("name"): item.get("value") for item in junit.iter("property")}
    assert (properties["status"], properties["exit_code"]) == ("errored", "4")
    assert ">errored</span>" in (folder / "report.html").read_text()
    saved = read_snapshot(folder, [journal], JournalRead)
    assert saved is not None and saved.figures.flows == journal_flows
    assert json.loads((folder / "locust_stats.json").read_text())
    assert b"mrtr_flows" in (folder / "metrics.prom").read_bytes()


def test_a_runs_own_results_equal_a_rebuild_from_its_journal_alone(tmp_path):
    """What the fold gave the run is what one pass over the journal gives, to the last figure."""
    finished = run_harness(SCENARIOS / "smoke.toml", tmp_path, "--duration", "8s")
    assert finished.code == 0, finished.output
    assert {path.name for path in finished.folder.iterdir()} == RUN_FILES
    live = _summary(finished.folder)
    (finished.folder / SNAPSHOT).unlink()
    rebuilt = subprocess.run([sys.executable, "-m", "harness", "report", str(finished.folder)], capture_output=True,
                             text=True, cwd=ROOT, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _summary(finished.folder) == live
