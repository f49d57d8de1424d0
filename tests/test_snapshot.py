"""`report DIR` takes the figures a run saved only while they match its journal, and never runs what a file says."""

from __future__ import annotations

import json
import pickle

from harness.config.scenario import parse_scenario
from harness.report import journal_parts, read_run, rebuild_results, write_results
from harness.report.snapshot import SNAPSHOT
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


def test_a_snapshot_that_would_call_a_function_is_refused_and_the_journal_read(tmp_path):
    folder, _ = _folder(tmp_path)
    rebuild_results(folder)
    expected = _summary(folder)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    state = pickle.loads((folder / SNAPSHOT).read_bytes())
    state["folded"] = Payload()
    (folder / SNAPSHOT).write_bytes(pickle.dumps(state))
    rebuild_results(folder)
    assert not marker.exists() and _summary(folder) == expected
