"""`hunt --shares N`: one search as N shares at once on this machine, the others stopped at the first failure, merged.

Without a process: the spans cover the search once; shares the search cannot be split into are refused in one line;
every flag the hunt was given reaches each share as given. With processes: a planted fault that the drawer puts in
the first share's first trial is found there, the other share is stopped long before its trials run out, and the
merged hunt names the find; nothing either started outlives the hunt.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli.main import build_parser
from harness.errors import UsageError
from harness.hunt.cli import overrides
from harness.hunt.search import Hunt
from harness.hunt.shares import check_shares, journal_has_failure, share_arguments, spans
from harness.hunt.trial import Base
from harness.shop.planted import LONG_PAUSE, PLANTED_ENV
from tests.harness_run import ROOT
from tests.test_hunt_search import _below, _left_behind


@pytest.mark.parametrize(("trials", "shares"), [(2, 2), (7, 2), (20, 3), (16, 16)])
def test_the_spans_cover_every_trial_of_the_search_once_in_order(trials: int, shares: int) -> None:
    found = spans(trials, shares)
    assert len(found) == shares and all(first <= last for first, last in found)
    assert [index for first, last in found for index in range(first, last + 1)] == list(range(1, trials + 1))
    assert max(last - first for first, last in found) - min(last - first for first, last in found) <= 1


@pytest.mark.parametrize(("shares", "trials", "strategy", "corpus", "trial_range", "words"), [
    (1, 10, "random", False, None, "want 2 or more"),
    (11, 10, "random", False, None, "more shares than the search's 10 trials"),
    (2, 10, "lineage", False, None, "lineage strategy draws each trial from what the earlier trials showed"),
    (2, 10, "random", True, None, "--corpus is replayed before the search, once"),
    (2, 10, "cover", False, "1:5", "a share is not split again"),
])
def test_shares_the_search_cannot_be_split_into_are_refused_in_one_line(shares, trials, strategy, corpus,
                                                                         trial_range, words) -> None:
    with pytest.raises(UsageError) as refused:
        check_shares(shares, trials, strategy, corpus, trial_range)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_every_flag_the_hunt_was_given_reaches_each_share_as_given(tmp_path: Path) -> None:
    given = ["hunt", "s.toml", "--trials", "12", "--controls", "1", "--no-expect", "--reuse", "--budget", "5m",
             "--trial-duration", "3s", "--strategy", "swarm", "--max-steps", "3", "--actions", "restart,kill",
             "--replicas", "1,3", "--seed", "41", "--reruns", "2", "--must-fail", "1", "--shrink-budget", "2m",
             "--shrink-runs", "7", "--reproduce", "4", "--reproduce-at-least", "0.7", "--from-triage", "t.json",
             "--allow-host", "a.example", "--allow-host", "b.example", "--shares", "3", "--results", "elsewhere"]
    parser = build_parser()
    args = parser.parse_args(given)
    again = parser.parse_args(["hunt", "s.toml", *share_arguments(args)])
    assert overrides(again) == overrides(args) and len(overrides(args)) == 17
    assert (again.from_triage, again.allow_host) == (args.from_triage, args.allow_host)
    assert again.shares is None and again.results == Path("results"), "each share gets its own span and folder"


def test_a_journal_being_written_shows_a_failure_only_once_a_find_replays_or_a_control_fails(tmp_path: Path) -> None:
    """A share's find stops the others once it stands (`must_fail` of its replays failed the same way), not at the
    failed search trial: a find set aside as flaky leaves the other shares searching, as one hunt searches on."""
    journal = tmp_path / "hunt.jsonl"
    start = '{"type": "start", "bounds": {"must_fail": 2}}\n'
    failed = '"failures": [{"kind": "invariant"}]'
    journal.write_text(start + '{"type": "trial", "purpose": "search", "failures": []}\n{"type": "tri')
    assert not journal_has_failure(journal)
    search = f'{{"type": "trial", "purpose": "search", {failed}}}\n'
    replay_failed = f'{{"type": "trial", "purpose": "replay", {failed}}}\n'
    replay_held = '{"type": "trial", "purpose": "replay", "failures": []}\n'
    journal.write_text(start + search + replay_failed + replay_held + replay_held)
    assert not journal_has_failure(journal), "1 of 3 replays: flaky"
    journal.write_text(start + search + replay_failed + replay_held + replay_held + '{"type": "flaky"}\n' + search
                       + replay_failed)
    assert not journal_has_failure(journal), "the fluke's failed replay does not count toward the next find"
    journal.write_text(start + '\x00\xff not json\n[1, 2]\n' + search + replay_failed + replay_failed)
    assert journal_has_failure(journal)
    journal.write_text(start + f'{{"type": "trial", "purpose": "control", {failed}}}\n')
    assert journal_has_failure(journal)
    assert not journal_has_failure(tmp_path / "none.jsonl")


# --- a real hunt in two shares (processes) --------------------------------------------------------------------------

PLANTED = """\
name = "shared"
seed = 5
duration = "10s"
time_scale = 60

[target]
replicas = 2
keyring = "file"

[load]
arrival_rate = 6
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "30s" }}

[expect]
"rejections{{reason='unknown key'}}" = "== 0"

[hunt]
trial_duration = "6s"
trials = 16
controls = 0
expect = true
actions = ["pause"]
replicas = [1]
max_steps = 1
strategy = "random"
seed = {seed}
reruns = 1
must_fail = 1
shrink_runs = 1
reproduce = 0
"""


def _seed_with_the_find_first(tmp_path: Path) -> int:
    """A hunt seed whose trial 1 pauses r1 long enough for the planted `pause-amnesia-r1` (and ends by 4.3 s, load
    left after it) and whose trials 9 to 16, the second share's, pause it briefly (well under the fault's gap)."""
    path = tmp_path / "probe.toml"
    for seed in range(1, 20000):
        path.write_text(PLANTED.format(seed=seed))
        hunt = Hunt(Base.read(path), stream=io.StringIO())
        hunt._skip_to(17)
        steps = [tried.trial.schedule.steps[0] for tried in hunt._skipped]
        first = steps[0]
        if (first.duration >= LONG_PAUSE + 0.2 and first.at + first.duration <= 4.3
                and all(step.duration <= 2.5 for step in steps[8:])):
            return seed
    raise AssertionError("no seed in 20,000 draws the find first: the drawer changed, choose the trials anew")


@pytest.mark.timeout(400)
def test_a_find_in_one_share_stops_the_other_and_the_merged_hunt_names_it(tmp_path: Path) -> None:
    """About a minute: share 1 (trials 1-8) finds the planted fault at its first trial, replays and shrinks it; share
    2 (trials 9-16, none of which can break the shop) is stopped by then, with most of its trials not run."""
    seed = _seed_with_the_find_first(tmp_path)
    path = tmp_path / "shared.toml"
    path.write_text(PLANTED.format(seed=seed))
    results = tmp_path / "results"
    out, err = tmp_path / "out", tmp_path / "err"
    seen: dict[tuple[int, str], str] = {}
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "harness", "hunt", str(path), "--shares", "2", "--results",
                                    str(results)], cwd=ROOT, stdout=stdout, stderr=stderr,
                                   env={**os.environ, PLANTED_ENV: "pause-amnesia-r1"})
        try:
            deadline = time.monotonic() + 360
            while process.poll() is None:
                assert time.monotonic() < deadline, "the shared hunt did not end within 6 minutes"
                seen |= _below(process.pid, seen)
                time.sleep(0.2)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    said = out.read_text() + err.read_text()
    assert process.returncode == 1, said
    assert "hunt: 2 shares at once, trials 1-8, 9-16" in said
    assert "hunt: share 1 found a failure: stopping share 2" in said
    [merged] = list(results.glob("*-hunt-shared-shares/*-hunt-shared-merged"))
    summary = json.loads((merged / "hunt.json").read_text())
    assert summary["stopped_by"] == "found" and summary["found"]["trial"] == 1, summary
    [failure] = summary["found"]["failures"]
    assert failure["name"] == "rejections{reason='unknown key'}" and failure["replicas"] == ["r1"], failure
    [second] = list(results.glob("*-hunt-shared-shares/share-2/*-hunt-shared"))
    records = [json.loads(line) for line in (second / "hunt.jsonl").read_text().splitlines()]
    searched = [record for record in records if record["type"] == "trial" and record["purpose"] == "search"]
    assert len(searched) < 8 and records[-1]["type"] == "end" and records[-1]["stopped_by"] == "interrupted", \
        "stopped at the find, its trial under way rolled back"
    assert "found: trial 1 failed (expectation rejections{reason='unknown key'}" in said and " in share-1/" in said
    assert (merged.parent / summary["found"]["folder"] / "scenario.toml").is_file(), \
        "the merged hunt names the trial's folder from beside it"
    assert any("harness hunt" in command and "--trial-range 1:8" in command for command in seen.values()), \
        "the shares ran as processes of their own"
    assert _left_behind(seen) == [], "nothing a share started outlives the hunt"
