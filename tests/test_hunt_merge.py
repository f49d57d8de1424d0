"""A search spread over machines: `hunt --trial-range A:B` runs one share of the search's trials, `hunt merge` joins
the shares' folders into one hunt.

Without a process: a share draws and seeds its trials as the whole hunt would (random, swarm, cover); lineage, a bad
range or a corpus are refused; the merge reads the folders as untrusted data (any bytes give a one-line refusal or a
merge, never a traceback; a planted link is refused). With processes: two shares of a shop's hunt merged count the
same trials and coverage as one hunt over the whole range, same seed.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.atomic_files import PlantedLink
from harness.errors import UsageError
from harness.hunt.cli import trial_range
from harness.hunt.draw import trial_seed
from harness.hunt.merge import MergeRefused, merge_hunts, read_share
from harness.hunt.search import Hunt
from harness.hunt.trial import Base
from tests.harness_run import ROOT

SHOP = """\
name = "spread"
seed = 5
duration = "10s"
time_scale = 60

[target]
replicas = 3

[load]
arrival_rate = 3
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "6s" }}

[hunt]
trials = {trials}
controls = 0
trial_duration = "3s"
max_steps = 1
strategy = "{strategy}"
"""


def _scenario(tmp_path: Path, strategy: str = "random", trials: int = 6) -> Path:
    path = tmp_path / "spread.toml"
    path.write_text(SHOP.format(strategy=strategy, trials=trials))
    return path


# --- a share draws as the whole hunt would (no process) -----------------------------------------------------------


@pytest.mark.parametrize("strategy", ["random", "swarm", "cover"])
def test_a_share_draws_and_seeds_its_trials_as_the_whole_hunt_does(tmp_path, strategy):
    base = Base.read(_scenario(tmp_path, strategy))
    whole = Hunt(base, stream=io.StringIO())
    whole._skip_to(7)  # the whole search's six schedules, drawn in order
    expected = [tried.trial.schedule for tried in whole._skipped]
    share = Hunt(base, stream=io.StringIO())
    share.trial_range = (4, 6)
    share._skip_to(4)
    assert share._next_schedule() == expected[3]
    assert share.index + 1 == base.scenario.hunt.controls + 4  # the next trial is numbered, so seeded, as trial 4 is
    assert trial_seed(share.seed, share.index + 1) == trial_seed(whole.seed, 4)


def test_a_range_is_checked_and_lineage_or_a_corpus_refused_in_one_line():
    assert trial_range("3:5", 10, "cover", corpus=False) == (3, 5)
    for text, words in [("3", "is not A:B"), ("a:b", "is not A:B"), ("5:3", "1 <= A <= B <= 10"),
                        ("0:2", "1 <= A <= B"), ("9:11", "B <= 10")]:
        with pytest.raises(UsageError, match=words):
            trial_range(text, 10, "random", corpus=False)
    with pytest.raises(UsageError, match="lineage strategy draws each trial from what the earlier trials showed"):
        trial_range("1:5", 10, "lineage", corpus=False)
    with pytest.raises(UsageError, match="--corpus is replayed before the search, once"):
        trial_range("1:5", 10, "random", corpus=True)


def test_hunt_with_lineage_and_a_range_exits_2_before_anything_starts(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(_scenario(tmp_path, "lineage")),
                           "--trial-range", "1:2", "--results", str(tmp_path / "results")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "lineage strategy draws each trial" in done.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


# --- the merge reads untrusted folders (no process) ---------------------------------------------------------------


def _start(**changed: Any) -> dict[str, Any]:
    start = {"type": "start", "scenario": "spread", "seed": 5, "strategy": "random", "actions": ["restart"],
             "replicas": [1, 2, 3], "property": "no invariant violated", "trial_range": [1, 2],
             "bounds": {"trial_duration": 3.0, "max_steps": 1, "trials": 4, "controls": 0}}
    return {**start, **changed}


def _trial_record(index: int, failed: bool = False) -> dict[str, Any]:
    return {"type": "trial", "index": index, "seed": index, "purpose": "search", "exit_code": 1 if failed else 0,
            "schedule": {"steps": [{"action": "restart", "at": 1.0, "replica": 2}], "duration": 3.0,
                         "arrival_rate": None},
            "outcome": "failed" if failed else "held", "folder": f"trials/t{index}", "seconds": 3.0,
            "failures": [{"kind": "invariant", "name": "no double release"}] if failed else []}


def _end(cells: int = 1) -> dict[str, Any]:
    return {"type": "end", "stopped_by": "trials",
            "coverage": [{"variant": "restart", "target": "r2", "timing": "early", "trials": cells}]}


def _share(folder: Path, records: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    (folder / "hunt.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder


def test_merge_names_the_lowest_failed_trial_sums_coverage_and_bounds_over_every_judged_trial(tmp_path):
    first = _share(tmp_path / "0" / "hunt-spread", [_start(), _trial_record(1), _trial_record(2), _end(2)])
    second = _share(tmp_path / "1" / "hunt-spread", [_start(trial_range=[3, 4]), _trial_record(3),
                                                     _trial_record(4, failed=True), _end(1)])
    merged = merge_hunts([first, second], tmp_path / "merged")
    assert merged.exit_code == 1 and merged.found_in == "1/hunt-spread"
    summary = json.loads((merged.folder / "hunt.json").read_text())
    assert summary["found"]["trial"] == 4 and summary["trial_range"] == [1, 4] and summary["trials"] == {"search": 4}
    assert summary["coverage_cells"] == [{"action": "restart", "variant": "restart", "target": "r2",
                                          "timing": "early", "trials": 3}]
    assert summary["judged"] == 4 and summary["residual_risk"] is None  # a failure found is no bound
    records = [json.loads(line) for line in (merged.folder / "hunt.jsonl").read_text().splitlines()]
    assert [record["type"] for record in records] == ["start"] + ["trial"] * 4 + ["end"]
    assert records[0]["merged_from"] == ["0/hunt-spread", "1/hunt-spread"]
    assert "no double release" in (merged.folder / "hunt.html").read_text()


def test_merge_passes_over_a_find_its_share_set_aside_as_flaky_for_one_that_stood(tmp_path):
    """Share 0's trial 1 failed and was set aside as flaky (its replays failed 0 of 3); share 1's trial 4 failed and
    stood: the merged hunt names trial 4, as one hunt searching on past the fluke would, and lists trial 1 beside it.
    With trial 4 gone, the fluke is the find, marked flaky."""
    flaky = {"type": "flaky", "trial": 1, "failure": {"kind": "invariant", "name": "no double release"},
             "replay": {"failed": 0, "runs": 3}}
    first = _share(tmp_path / "0" / "hunt-spread", [_start(), _trial_record(1, failed=True), flaky,
                                                    _trial_record(2), _end(2)])
    second = _share(tmp_path / "1" / "hunt-spread", [_start(trial_range=[3, 4]), _trial_record(3),
                                                     _trial_record(4, failed=True), _end(1)])
    merged = merge_hunts([first, second], tmp_path / "merged")
    summary = json.loads((merged.folder / "hunt.json").read_text())
    assert summary["found"]["trial"] == 4 and merged.found_in == "1/hunt-spread"
    assert summary["flaky"] == [{"trial": 1, "folder": "0/hunt-spread/trials/t1", "replay": {"failed": 0, "runs": 3}}]
    assert any("set aside as flaky: trial 1" in line for line in merged.lines())

    alone = _share(tmp_path / "2" / "hunt-spread", [_start(trial_range=[3, 4]), _trial_record(3), _trial_record(4),
                                                    _end(1)])
    merged = merge_hunts([first, alone], tmp_path / "merged")
    assert merged.result.found is not None and merged.result.found.index == 1
    assert merged.result.shrink_stopped_by == "flaky" and merged.result.replay == (0, 3) and merged.exit_code == 1


def test_merge_of_healthy_shares_gives_the_residual_risk_of_all_their_trials(tmp_path):
    first = _share(tmp_path / "a", [_start(), _trial_record(1), _trial_record(2), _end()])
    second = _share(tmp_path / "b", [_start(trial_range=[3, 4]), _trial_record(3), _trial_record(4), _end()])
    merged = merge_hunts([first, second], tmp_path / "merged")
    assert merged.exit_code == 0
    assert "0 failures in 4 judged trials" in "\n".join(merged.lines())
    assert json.loads((merged.folder / "hunt.json").read_text())["residual_risk"] == round(1 - 0.05 ** (1 / 4), 6)


@pytest.mark.parametrize(("changed", "words"), [
    ({"seed": 6}, "its seed is 6, not 5"),
    ({"scenario": "other"}, "its scenario is 'other'"),
    ({"strategy": "cover"}, "its strategy is 'cover'"),
    ({"bounds": {"trial_duration": 9.0, "max_steps": 1, "trials": 4, "controls": 0}}, "trial_duration"),
])
def test_merge_refuses_shares_of_another_search_in_one_line_and_writes_nothing(tmp_path, changed, words):
    first = _share(tmp_path / "a", [_start(), _trial_record(1), _end()])
    second = _share(tmp_path / "b", [_start(trial_range=[3, 4], **changed), _trial_record(3), _end()])
    with pytest.raises(MergeRefused, match=words) as refused:
        merge_hunts([first, second], tmp_path / "merged")
    assert "\n" not in str(refused.value) and not (tmp_path / "merged").exists()


def test_merge_refuses_overlapping_ranges(tmp_path):
    first = _share(tmp_path / "a", [_start(), _trial_record(1), _trial_record(2), _end()])
    second = _share(tmp_path / "b", [_start(trial_range=[2, 3]), _trial_record(2), _end()])
    with pytest.raises(MergeRefused, match="search trial 2 ran in both a and b"):
        merge_hunts([first, second], tmp_path / "merged")


def test_a_planted_link_for_the_journal_is_refused_not_followed(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(_start()) + "\n")
    folder = tmp_path / "planted"
    folder.mkdir()
    os.symlink(outside, folder / "hunt.jsonl")
    with pytest.raises(PlantedLink):
        read_share(folder)
    os.symlink(folder, tmp_path / "linked")
    with pytest.raises(PlantedLink):
        read_share(tmp_path / "linked")


@pytest.mark.parametrize("content", [b"[" * 100_000, b"\xff\xfe", b'{"type": "start"}', b"", b'{"type": "trial"}'])
def test_a_damaged_or_hostile_journal_is_refused_in_one_line(tmp_path, content):
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / "hunt.jsonl").write_bytes(content)
    with pytest.raises(MergeRefused) as refused:
        read_share(folder)
    said = str(refused.value)
    assert "\n" not in said and ("is damaged" in said or "has no start record" in said), said


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(st.binary(max_size=80),
                                st.builds(lambda record: json.dumps(record).encode(),
                                          st.sampled_from([_start(), _trial_record(1), _end(), {"type": 3},
                                                           {**_trial_record(2), "index": "x"},
                                                           {**_trial_record(2), "schedule": {"steps": [{}]}}]))),
                      max_size=6))
def test_any_journal_reads_as_a_share_or_a_one_line_refusal(tmp_path, lines):
    folder = tmp_path / "fuzzed"
    folder.mkdir(exist_ok=True)
    (folder / "hunt.jsonl").write_bytes(b"\n".join(lines))
    try:
        share = read_share(folder)
    except MergeRefused as refused:
        assert "\n" not in str(refused)
        return
    assert share.start.scenario == "spread"


# --- two shares of a real hunt, merged (processes) ----------------------------------------------------------------


def _hunt(path: Path, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "hunt", str(path), "--actions", "restart", "--seed", "9",
                           "--results", str(results), *args], cwd=ROOT, capture_output=True, text=True, timeout=240)


@pytest.mark.timeout(600)
def test_two_shares_merged_count_the_trials_and_coverage_of_one_hunt_over_the_whole_range(tmp_path):
    """Three hunts of a healthy shop (about 40 s): trial 1 and trial 2 as two shares, each in its own folder as a
    pod would write it, merged; and the two trials as one hunt. The merged hunt has the same trials (schedules and
    seeds) and the same coverage."""
    path = _scenario(tmp_path, trials=2)
    for index, span in enumerate(("1:1", "2:2")):
        done = _hunt(path, tmp_path / "shares" / str(index), "--trial-range", span)
        assert done.returncode == 0, done.stdout + done.stderr
    whole = _hunt(path, tmp_path / "whole")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    shares = [next((tmp_path / "shares" / str(index)).iterdir()) for index in (0, 1)]
    merged = subprocess.run([sys.executable, "-m", "harness", "hunt", "merge", *map(str, shares), "--results",
                             str(tmp_path / "merged")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "merged 2 hunts of spread (seed 9, strategy random): 2 search trials" in merged.stdout
    [folder] = list((tmp_path / "merged").iterdir())
    [single] = list((tmp_path / "whole").iterdir())
    merged_summary = json.loads((folder / "hunt.json").read_text())
    single_records = [json.loads(line) for line in (single / "hunt.jsonl").read_text().splitlines()]
    merged_records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    assert [(r["index"], r["seed"], r["schedule"]) for r in merged_records if r["type"] == "trial"] == \
        [(r["index"], r["seed"], r["schedule"]) for r in single_records if r["type"] == "trial"]
    assert merged_records[-1]["coverage"] == single_records[-1]["coverage"]
    assert merged_summary["trials"] == {"search": 2} and merged_summary["judged"] == 2
    assert merged_summary["residual_risk"] == single_records[-1]["residual_risk"]
    assert (folder / "hunt.html").read_text().count("<html") == 1
