"""A flaky target: the found failure replayed before the shrink, a fluke handed over as one, not "minimal", and a
minimal scenario that carries a seed it failed with and states the rate of its own runs.

No process: the hunt's trials are stood in for (`Hunt.run_schedule`, and `Hunt._run_file`, a run of the
handed-over text) by a script of which runs fail,
since no real target fails on cue 1 run in 10; everything else (the journal, minimal.toml, the page,
the terminal) is the hunt's own. Milliseconds each.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config.scenario import parse_scenario
from harness.hunt.model import Failure, Schedule, Trial, TrialPurpose
from harness.hunt.trial import Base

SHOP = """\
name = "hunted"
seed = 5
duration = "10s"
time_scale = 60

[target]
replicas = 2

[load]
arrival_rate = 3
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = { dist = "constant", value = "6s" }

[hunt]
trials = 3
trial_duration = "3s"
actions = ["restart"]
controls = 0
reruns = 3
must_fail = 2
shrink_runs = 6
reproduce = 2
"""

DOUBLE = Failure("invariant", "no_double_release")

Script = Callable[[Schedule, TrialPurpose, int], bool]
"""Whether the run of this schedule, for this purpose, as the hunt's n-th trial, fails as `DOUBLE`."""


def _hunt(tmp_path: Path, fails: Script) -> tuple[Any, io.StringIO]:
    """A hunt of the shop whose trials fail as `fails` says (every other part of it the hunt's own)."""
    from harness.hunt.search import Hunt

    path = tmp_path / "hunted.toml"
    path.write_text(SHOP)
    said = io.StringIO()
    hunt = Hunt(Base.read(path), results_root=tmp_path / "results", stream=said)

    def run_schedule(schedule: Schedule, purpose: TrialPurpose) -> Trial:
        hunt.index += 1
        failed = fails(schedule, purpose, hunt.index)
        trial = Trial(index=hunt.index, seed=1000 + hunt.index, schedule=schedule, purpose=purpose,
                      failures=(DOUBLE,) if failed else (), exit_code=1 if failed else 0, folder="trials/t")
        hunt.result.trials.append(trial)
        assert hunt.journal is not None
        hunt.journal.write({"type": "trial", "index": trial.index, "purpose": purpose, "seed": trial.seed,
                            "failed": failed})
        return trial

    def run_file(text: str, schedule: Schedule, *, seed: int) -> bool:
        hunt.index += 1
        hunt.files.append((text, seed))
        failed = fails(schedule, "reproduce", hunt.index)
        hunt.result.trials.append(Trial(index=hunt.index, seed=seed, schedule=schedule, purpose="reproduce",
                                        failures=(DOUBLE,) if failed else ()))
        return failed

    hunt.run_schedule, hunt._run_file, hunt.files = run_schedule, run_file, []
    return hunt, said


def _journal(hunt: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (hunt.folder / "hunt.jsonl").read_text().splitlines()]


def test_a_fluke_is_replayed_not_shrunk_and_handed_over_as_flaky_when_nothing_else_breaks(tmp_path):
    """The search's first trial fails once; its schedule's 3 replays (fresh seeds) fail once: 1 of 3, under the 2 the
    shrink needs. The hunt spends nothing on a shrink or reruns, says "flaky: reproduced 1 of 3", sets it aside and
    searches on; its two other trials hold, so the fluke is handed over as found, its header saying so, and the
    journal's shrink outcome is "flaky"."""
    hunt, said = _hunt(tmp_path, lambda schedule, purpose, index: index in (1, 3))

    result = hunt.run()

    assert [trial.purpose for trial in result.trials] == ["search", "replay", "replay", "replay", "search", "search"]
    assert [trial.seed for trial in result.trials[1:4]] == [1002, 1003, 1004]  # a fresh seed each
    assert result.stopped_by == "found" and result.replay == (1, 3) and result.shrink_stopped_by == "flaky"
    assert result.found is not None and result.found.index == 1
    assert "flaky: reproduced 1 of 3" in said.getvalue()
    assert "the first flaky find, trial 1, is handed over as found" in said.getvalue()
    flaky = [record for record in _journal(hunt) if record["type"] == "flaky"]
    assert [(record["trial"], record["replay"]) for record in flaky] == [(1, {"failed": 1, "runs": 3})]
    end = _journal(hunt)[-1]
    assert end["shrink"]["stopped_by"] == "flaky" and end["shrink"]["replay"] == {"failed": 1, "runs": 3}
    assert end["shrink"]["path"] == [] and end["shrink"]["reproduction"] is None
    text = (hunt.folder / "minimal.toml").read_text()
    header = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert "flaky, not shrunk: it failed the same way again in only 1 of 3 replays" in header
    assert "shrunk to" not in header
    assert [step.model_dump(exclude_defaults=True) for step in parse_scenario(text).chaos] == \
        [step.model_dump(exclude_defaults=True) for step in result.found.schedule.steps]
    assert "flaky" in (hunt.folder / "hunt.html").read_text()


def test_a_failure_that_replays_is_shrunk(tmp_path):
    """Every run fails: the 3 replays come first (a fresh seed each), then the shrink, then the reruns."""
    hunt, said = _hunt(tmp_path, lambda schedule, purpose, index: True)

    result = hunt.run()

    purposes = [trial.purpose for trial in result.trials]
    assert purposes[:4] == ["search", "replay", "replay", "replay"] and "shrink" in purposes
    assert result.replay == (3, 3) and result.shrink_stopped_by != "flaky"
    assert "flaky" not in said.getvalue()
    assert _journal(hunt)[-1]["shrink"]["replay"] == {"failed": 3, "runs": 3}


def test_the_minimal_scenario_carries_a_seed_its_schedule_failed_with_and_its_rate_is_its_own(tmp_path):
    """The replays fail 2 of 3 and the shrink's runs every other time (the hunt's odd trials): the smaller schedule
    that is handed over failed with some seeds and not others, and never with the found trial's. minimal.toml carries
    the first seed it failed with and names the others; its rate is of runs of its very text, with that seed."""
    hunt, _ = _hunt(tmp_path, lambda schedule, purpose, index: index != 3 if purpose in ("search", "replay")
                    else purpose != "shrink" or index % 2 == 1)

    result = hunt.run()

    assert result.found is not None and result.minimal is not None and result.minimal != result.found.schedule
    failed_with = [trial.seed for trial in result.trials
                   if trial.schedule == result.minimal and trial.failures and trial.purpose == "shrink"]
    never = [trial.seed for trial in result.trials
             if trial.schedule == result.minimal and not trial.failures and trial.purpose == "shrink"]
    text = (hunt.folder / "minimal.toml").read_text()
    handed = parse_scenario(text)
    assert handed.seed == failed_with[0] and handed.seed != result.found.seed and handed.seed not in never
    header = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert f"this file, as it is (seed {handed.seed}), reproduced it in 2 of 2 runs of `mrtr-harness run " \
           "--reproduce`" in header
    assert [seed for _, seed in hunt.files] == [handed.seed] * 2
    assert all(parse_scenario(ran) == handed for ran, _ in hunt.files)  # the file as handed over, header aside


def test_a_fluke_is_set_aside_and_the_search_goes_on_to_a_failure_that_replays(tmp_path):
    """Trial 1 fails once and its replays do not (0 of 3): set aside. The search goes on; its second trial fails and
    fails again in every run after, so that one is replayed, shrunk and handed over, and the fluke is listed beside
    it: in the journal, hunt.json, the terminal and the page."""
    hunt, said = _hunt(tmp_path, lambda schedule, purpose, index: index == 1 or index >= 5)

    result = hunt.run()

    purposes = [trial.purpose for trial in result.trials]
    assert purposes[:8] == ["search", "replay", "replay", "replay", "search", "replay", "replay", "replay"]
    assert "shrink" in purposes
    assert result.found is not None and result.found.index == 5 and result.replay == (3, 3)
    assert result.shrink_stopped_by != "flaky"
    assert [(flaky.trial.index, flaky.replay) for flaky in result.flaky] == [(1, (0, 3))]
    summary = json.loads((hunt.folder / "hunt.json").read_text())
    assert summary["found"]["trial"] == 5
    assert [(row["trial"], row["replay"]) for row in summary["flaky"]] == [(1, {"failed": 0, "runs": 3})]
    assert "set aside as flaky; the search goes on from trial 2" in said.getvalue()
    assert "set aside as flaky: trial 1" in (hunt.folder / "hunt.html").read_text()


def test_ctrl_c_while_the_search_goes_on_past_a_fluke_still_hands_the_fluke_over(tmp_path):
    """Ctrl-C in the trial after the one set aside: the hunt ends interrupted, and what it saw break (the fluke) is
    still handed over as found, flaky, not lost with the search that was cut short."""
    def fails(schedule: Schedule, purpose: TrialPurpose, index: int) -> bool:
        if index == 5:
            raise KeyboardInterrupt
        return index == 1

    hunt, said = _hunt(tmp_path, fails)

    result = hunt.run()

    assert result.stopped_by == "interrupted"
    assert result.found is not None and result.found.index == 1 and result.shrink_stopped_by == "flaky"
    assert (hunt.folder / "minimal.toml").is_file()
    assert json.loads((hunt.folder / "hunt.json").read_text())["found"]["trial"] == 1
