"""`report DIR` takes the figures a run saved only while they match its journal; hostile ones: test_snapshot_hostile."""

from __future__ import annotations

import json
import time

from harness.config.scenario import parse_scenario
from harness.folding.read import read_run, read_saved
from harness.folding.snapshot import SNAPSHOT
from harness.processes.children import descendants
from harness.report import journal_parts, rebuild_results, write_results
from tests.test_lifeline import kill_and_count_survivors, start, wait_for_line
from tests.test_report import T0, write_run

SCENARIO = ('name = "nightly-refunds"\nseed = 7\nduration = "30s"\n[load]\narrival_rate = 2\n'
            '[[flows]]\nkind = "refund"\n[[flows]]\nkind = "return"\n')


def _folder(tmp_path):
    folder = tmp_path / "run-0007"
    folder.mkdir()
    scenario = parse_scenario(SCENARIO)
    (folder / "scenario.json").write_text(scenario.model_dump_json())
    write_run(folder / "journal.jsonl")
    return folder, scenario


def _summary(folder) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_a_rebuild_from_the_saved_figures_equals_one_from_the_journal(tmp_path):
    folder, scenario = _folder(tmp_path)
    streamed = rebuild_results(folder)  # no snapshot yet: one pass over the journal, then saved
    assert (folder / SNAPSHOT).is_file()
    from_journal = _summary(folder)
    (folder / "summary.json").unlink()
    assert read_saved(folder, journal_parts(folder)) is not None  # the snapshot is taken, not refolded
    saved = rebuild_results(folder)
    assert _summary(folder) == from_journal and saved.exit_code == streamed.exit_code


def test_saved_figures_that_no_longer_match_the_journal_are_ignored(tmp_path):
    folder, scenario = _folder(tmp_path)
    parts = journal_parts(folder)
    write_results(folder, scenario, parts, [], live=read_run(parts), save=True)
    before = _summary(folder)["flows"]["total"]
    with open(folder / "journal.jsonl", "a") as journal:  # a flow the saved figures have not seen
        journal.write(json.dumps({"type": "flow", "t": T0 + 29, "flow": "refund", "flow_id": "late-1",
                                  "outcome": "completed", "rounds": 2}) + "\n")
    rebuild_results(folder)
    assert _summary(folder)["flows"]["total"] == before + 1


def _cut_in_half(folder) -> bytes:
    """Cut the journal after its middle line; the rest (whole lines) is returned to be appended later."""
    journal = folder / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[: len(lines) // 2]))
    return b"".join(lines[len(lines) // 2:])


def test_figures_saved_mid_run_are_brought_up_to_the_journals_end(tmp_path):
    """A run saves its figures every minute; killed later, its report folds only the records after them."""
    folder, scenario = _folder(tmp_path)
    rebuild_results(folder)
    from_journal = _summary(folder)
    (folder / SNAPSHOT).unlink()
    rest = _cut_in_half(folder)
    parts = journal_parts(folder)
    write_results(folder, scenario, parts, [], live=read_run(parts), save=True)  # the snapshot of half a run
    with open(folder / "journal.jsonl", "ab") as journal:
        journal.write(rest)
    rebuild_results(folder)
    assert _summary(folder) == from_journal


def test_lines_after_the_saved_figures_that_are_no_record_are_counted_as_damage(tmp_path):
    folder, scenario = _folder(tmp_path)
    parts = journal_parts(folder)
    write_results(folder, scenario, parts, [], live=read_run(parts), save=True)
    with open(folder / "journal.jsonl", "ab") as journal:
        journal.write(b"\x00" * 40 + b"\n" + b'{"type": "flow", "t": 17' + b"\n" + b'{"type": "fl')  # 2 damaged, 1 torn
    verdict = rebuild_results(folder)
    assert verdict.unreadable == 2
    assert (_summary(folder)["journal"]["unreadable"], _summary(folder)["journal"]["torn"]) == (2, 1)


def test_figures_saved_for_other_bytes_of_the_same_length_are_ignored(tmp_path):
    folder, scenario = _folder(tmp_path)
    rest = _cut_in_half(folder)
    parts = journal_parts(folder)
    write_results(folder, scenario, parts, [], live=read_run(parts), save=True)
    journal = folder / "journal.jsonl"
    first_half = journal.read_bytes()  # the same length, its last line another flow's
    *head, last = first_half.splitlines(keepends=True)
    other = json.dumps({"type": "flow", "t": T0 + 14, "flow": "return", "flow_id": "other", "outcome": "cancelled"})
    other = other[:-1] + " " * (len(last) - len(other) - 1) + "}\n"
    changed = b"".join(head) + other.encode()
    assert len(changed) == len(first_half) and changed != first_half
    journal.write_bytes(changed + rest)
    rebuild_results(folder)
    from_snapshot = _summary(folder)
    (folder / SNAPSHOT).unlink()
    rebuild_results(folder)
    assert from_snapshot == _summary(folder)


def test_a_run_killed_after_saving_its_figures_is_reported_from_them_and_the_records_after(tmp_path):
    """A real run saves its figures every second and is SIGKILLed; records then follow the last save by
    construction (copies of its own last flow, new ids): the report takes the saved figures, folds those
    records after them, and reaches the verdict one pass over the whole journal reaches."""
    scenario = tmp_path / "killed.toml"
    scenario.write_text('name = "killed"\nseed = 3\nduration = "60s"\ntime_scale = 60\n[target]\nreplicas = 2\n'
                        '[load]\narrival_rate = 8\n[[flows]]\nkind = "refund"\n'
                        '[leads]\nthink = { dist = "constant", value = "10s" }\n')
    output = tmp_path / "output.txt"
    process = start(["run", str(scenario), "--results", str(tmp_path / "results"), "--save-figures-every", "1s"],
                    output)
    below: set[int] = set()
    try:
        wait_for_line(process, output, "results:", timeout=60)
        (folder,) = (tmp_path / "results").iterdir()
        deadline = time.monotonic() + 60
        while not (folder / SNAPSHOT).is_file() or _flows_in(folder) < 10:
            assert process.poll() is None and time.monotonic() < deadline, output.read_text()
            below |= descendants(process.pid)
            time.sleep(0.2)
        below |= descendants(process.pid)
    finally:
        assert not kill_and_count_survivors(process, below)  # the fold too: no save after this point
    parts = journal_parts(folder)
    assert read_saved(folder, parts) is not None, "the figures saved before the kill continue the journal"
    flows = _flows_in(folder)
    late = _append_flows_after_the_last_save(folder, 5)
    assert rebuild_results(folder).status.value == "interrupted"
    from_snapshot = _summary(folder)
    (folder / SNAPSHOT).unlink()
    rebuild_results(folder)
    from_journal = _summary(folder)
    assert from_snapshot == from_journal and from_snapshot["flows"]["total"] == flows + late


def _append_flows_after_the_last_save(folder, count: int) -> int:
    """Copies of the journal's last flow record, under new ids, after its end (a torn last line is closed
    first, and counted as damage by both reads alike); how many."""
    journal = folder / "journal.jsonl"
    text = journal.read_bytes()
    last = json.loads(next(line for line in reversed(text.splitlines(keepends=True))
                           if b'"type":"flow"' in line and line.endswith(b"\n")))
    with open(journal, "ab") as file:
        if not text.endswith(b"\n"):
            file.write(b"\n")
        for n in range(count):
            record = {**last, "flow_id": f"after-the-kill-{n}"}
            file.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    return count


def _flows_in(folder) -> int:
    """The flow records among the journal's whole lines (a line the kill cut short is none)."""
    lines = (folder / "journal.jsonl").read_bytes().splitlines(keepends=True)
    return sum(1 for line in lines if b'"type":"flow"' in line and line.endswith(b"\n"))


def test_the_saved_figures_carry_the_reconciliation_and_what_it_settled_early(tmp_path):
    folder, _ = _folder(tmp_path)
    with open(folder / "journal.jsonl", "a") as journal:  # a later reconciliation, past the matching's bound
        journal.write(json.dumps({"type": "reconciliation", "t": T0 + 35, "client_rejections": 30_000, "logged": 29_000,
                                  "matched": 28_000, "unexplained": 2_000, "unmatched_logged": 1_000,
                                  "examples": {"unexplained": ["f1 round 2 on replica-1"], "unmatched_logged": []},
                                  "settled_early": 7}) + "\n")
    rebuild_results(folder)
    from_journal = _summary(folder)
    saved = json.loads((folder / SNAPSHOT).read_bytes())["folded"]["checks"]["reconciliation"]
    assert (saved["unexplained"], saved["settled_early"]) == (2_000, 7)
    (folder / "summary.json").unlink()
    assert read_saved(folder, journal_parts(folder)) is not None
    rebuild_results(folder)
    assert _summary(folder) == from_journal and from_journal["reconciliation"]["settled_early"] == 7
