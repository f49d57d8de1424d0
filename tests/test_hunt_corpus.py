"""The hunt's memory: a corpus of minimal failing scenarios, read as untrusted input, replayed first, kept once.

Reading, choosing and keeping start no process (well under a second each): an entry is a file
that validates as a scenario, read without following a link, bounded, its name shown escaped;
what a hunt cannot replay (an action or replica it leaves out, a schedule the scenario cannot
run, the same schedule twice) is skipped and said so; a minimal scenario is kept under a safe
name, once, never through a planted link. The one real hunt (about 30 s) replays a corpus entry
against a shop with a planted fault before any search trial, with the entry's own seed, finds it
again, and keeps the minimal scenario as a new entry; the link, the broken file and the entry of
an action it does not draw are skipped and journaled.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.atomic_files import PlantedLink
from harness.config.scenario import parse_scenario
from harness.hunt.corpus import (
    ENTRY_BYTES,
    Entry,
    Skipped,
    entry_name,
    read_corpus,
    read_entry,
    replayable,
    save,
    schedule_digest,
)
from harness.hunt.model import Failure, Schedule, chaos_step
from tests.harness_run import ROOT

SHOP = """\
name = "{name}"
seed = {seed}
duration = "{duration}"
time_scale = 60

[target]
replicas = 2
{target}
[load]
arrival_rate = {rate}
routing = "{routing}"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "6s" }}
{rest}"""

RESTART = '[[chaos]]\nat = "1s"\naction = "restart"\nreplica = 2\n'
NETWORK = '[[chaos]]\nat = "1s"\naction = "network"\nfault = "reset"\nwhen = "mid-answer"\nduration = "1s"\n'
FAILURE = Failure("expectation", "rejections{reason='unknown key'}")


def _shop(name: str = "entry", seed: int = 9, duration: str = "3s", rate: float = 3, target: str = "",
          rest: str = "", routing: str = "round-robin") -> str:
    return SHOP.format(name=name, seed=seed, duration=duration, rate=rate, target=target, rest=rest, routing=routing)


def _hunt_of(text: str) -> Any:
    """A hunt of the scenario `text` (nothing started): its `space` and `fits` choose what it replays."""
    from harness.hunt.search import Hunt
    from harness.hunt.trial import Base

    return Hunt(Base(tomllib.loads(text), parse_scenario(text), "hunted.toml"), stream=io.StringIO())


def test_an_entry_is_a_scenario_replayed_as_its_chaos_duration_seed_and_own_rate(tmp_path):
    (tmp_path / "restart.toml").write_text(_shop(seed=41, rest=RESTART))
    (tmp_path / "faster.toml").write_text(_shop(rate=6, rest=RESTART))
    (tmp_path / "notes.txt").write_text("not an entry")
    entries, skipped = read_corpus([tmp_path, tmp_path / "missing"], base_rate=3)
    assert skipped == []
    faster, restart = entries
    assert restart.seed == 41 and restart.schedule.duration == 3.0 and restart.schedule.arrival_rate is None
    assert [step.action for step in restart.schedule.steps] == ["restart"] and restart.path == tmp_path / "restart.toml"
    assert faster.schedule.arrival_rate == 6  # its own rate, where it differs from the hunted scenario's


def test_what_is_no_scenario_file_is_skipped_with_one_line_saying_why(tmp_path):
    outside = tmp_path / "outside.toml"
    outside.write_text(_shop(rest=RESTART))  # valid: refused as a link all the same
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "link.toml").symlink_to(outside)
    (corpus / "broken.toml").write_text("name = [")
    (corpus / "latin1.toml").write_bytes(b'name = "caf\xe9"\n')
    (corpus / "huge.toml").write_text("# " + "x" * ENTRY_BYTES + "\n")
    (corpus / "unknown.toml").write_text(_shop(rest='[[chaos]]\nat = "1s"\naction = "explode"\n'))
    os.mkfifo(corpus / "pipe.toml")  # never blocks the hunt
    (corpus / "\x1b[2Jred\u202e.toml").write_text("name = [")
    (corpus / "calm.toml").write_text(_shop())
    entries, skipped = read_corpus([corpus], base_rate=3)
    why = {entry.name: entry.why for entry in skipped}
    assert entries == []
    assert why["corpus/link.toml"].startswith("a symbolic link: not followed")
    assert why["corpus/broken.toml"].startswith("not a valid scenario: broken.toml: not valid TOML")
    assert why["corpus/latin1.toml"] == "not UTF-8 text"
    assert why["corpus/huge.toml"] == "larger than 256 KiB: not a scenario"
    assert why["corpus/unknown.toml"].startswith("not a valid scenario")
    assert why["corpus/pipe.toml"] == "not a plain file"
    assert why["corpus/calm.toml"].startswith("no [[chaos]] step: what fails in it is its target, flows or load")
    assert "corpus/\\x1b[2Jred\\u202e.toml" in why  # a name is shown escaped, never acted on
    assert all("\x1b" not in entry.name + entry.why for entry in skipped)


@settings(max_examples=150, deadline=None)
@given(content=st.binary(max_size=400) | st.text(max_size=400).map(str.encode)
       | st.sampled_from([_shop(rest=RESTART), _shop(rest=NETWORK)]).map(str.encode))
def test_any_file_in_a_corpus_is_an_entry_or_a_line_saying_why_never_an_exception(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("corpus") / "entry.toml"
    path.write_bytes(content)
    read = read_entry(path, base_rate=3)
    assert isinstance(read, Entry | Skipped)
    if isinstance(read, Skipped):
        assert read.why and "\n" not in read.why


def _entry(name: str, *tables: dict[str, Any], duration: float = 3.0) -> Entry:
    steps = tuple(chaos_step(table) for table in tables)
    return Entry(name, Path(name), Schedule(steps=steps, duration=duration), seed=1)


def test_a_hunt_replays_only_what_it_draws_and_can_run_each_schedule_once():
    hunt = _hunt_of(_shop(name="hunted", rest='[hunt]\nactions = ["restart", "kill"]\nreplicas = [1, 2]\n'))
    restart = {"action": "restart", "at": 1.0, "replica": 2}
    kept, skipped = replayable([_entry("a", restart), _entry("b", restart), _entry("c", {**restart, "replica": 3}),
                                _entry("d", {"action": "network", "at": 1.0, "fault": "down", "duration": 1.0}),
                                _entry("e", {"action": "kill", "at": 9.0})], hunt.space, hunt.fits)
    assert [entry.name for entry in kept] == ["a"]
    assert {entry.name: entry.why for entry in skipped} == {
        "b": "the same schedule as an entry replayed before it",
        "c": "names replica 3, which this hunt leaves out",
        "d": "acts by network, which this hunt does not draw",
        "e": "its schedule does not validate in the hunted scenario"}  # a step after the run's end


def test_a_minimal_scenario_is_kept_once_under_a_safe_name_and_never_through_a_link(tmp_path):
    schedule = Schedule(steps=(chaos_step({"action": "restart", "at": 1.0}),), duration=3.0)
    corpus = tmp_path / "corpus"
    path, new = save(corpus, "text\n", "shop/../../x\x1b", FAILURE, schedule)
    assert new and path.parent == corpus and path.read_text() == "text\n"
    assert path.name == f"shop-x-expectation-rejections-reason-unknown-key-{schedule_digest(schedule)}.toml"
    assert save(corpus, "other\n", "shop/../../x\x1b", FAILURE, schedule) == (path, False)
    assert path.read_text() == "text\n"
    known = _entry("known.toml", {"action": "restart", "at": 1.0})
    assert save(corpus, "text\n", "shop", FAILURE, schedule, [known]) == (known.path, False)  # the corpus replays it

    planted = corpus / entry_name("planted", FAILURE, schedule)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    planted.symlink_to(victim)
    with pytest.raises(PlantedLink):
        save(corpus, "text\n", "planted", FAILURE, schedule)
    assert victim.read_text() == "keep me"


@given(name=st.text(max_size=80), kind=st.sampled_from(["invariant", "unexplained", "expectation"]),
       failure=st.text(max_size=80))
def test_a_kept_entry_s_name_is_letters_digits_and_dashes_whatever_the_names(name, kind, failure):
    schedule = Schedule(steps=(), duration=3.0)
    named = entry_name(name, Failure(kind, failure), schedule)
    assert named.endswith(".toml") and not named.startswith((".", "-"))
    stem = named.removesuffix(".toml")
    assert all(character.isascii() and (character.isalnum() or character in "-_") for character in stem)
    assert len(named) <= 2 * 48 + 2 + 12 + 5


@pytest.mark.timeout(300)
def test_a_hunt_replays_its_corpus_first_with_the_entry_s_seed_and_finds_it_again(tmp_path):
    """A shop with per-process keys behind other-replica routing (every run fails `[expect]`'s `unknown key == 0`),
    hunted for restarts and kills with a corpus holding a restart entry of seed 41, a planted link, a broken file and a
    network entry: trial 1 is the entry's replay, with its seed, and fails; no search trial runs; the shrink's one run
    drops its step (the shop fails under load alone), so the minimal schedule, with no chaos, is not kept (exit 1)."""
    hunted = tmp_path / "hunted.toml"
    hunted.write_text(_shop(name="hunted", duration="10s", target='keyring = "ephemeral"\n', routing="other-replica",
                            rest="[expect]\n\"rejections{reason='unknown key'}\" = \"== 0\"\n"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "known.toml").write_text(_shop(seed=41, rest=RESTART))
    (corpus / "network.toml").write_text(_shop(rest=NETWORK))
    (corpus / "broken.toml").write_text("name = [")
    (corpus / "link.toml").symlink_to(corpus / "known.toml")
    results = tmp_path / "results"
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(hunted), "--actions", "restart,kill",
                           "--trials", "3", "--trial-duration", "3s", "--reruns", "1", "--must-fail", "1",
                           "--shrink-runs", "1", "--reproduce", "0", "--controls", "0", "--expect",
                           "--corpus", str(corpus), "--results",
                           str(results)], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "corpus: replaying 1 of 4 entries first (3 skipped" in done.stderr
    assert "found by replaying the corpus entry corpus/known.toml: a failure seen before" in done.stdout
    [folder] = list(results.iterdir())
    records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    [replay] = [record for record in records if record["type"] == "corpus"]
    assert replay["replayed"] == ["corpus/known.toml"]
    why = {entry["name"]: entry["why"] for entry in replay["skipped"]}
    assert why["corpus/link.toml"].startswith("a symbolic link") and why["corpus/broken.toml"].startswith("not a")
    assert why["corpus/network.toml"] == "acts by network, which this hunt does not draw"
    trials = [record for record in records if record["type"] == "trial"]
    assert trials[0]["seed"] == 41 and trials[0]["outcome"] == "failed"
    assert "search" not in [trial["purpose"] for trial in trials]  # the corpus first; no search needed
    assert "corpus: the minimal schedule has no chaos step, so it is not kept" in done.stderr
    assert sorted(path.name for path in corpus.iterdir()) == ["broken.toml", "known.toml", "link.toml",
                                                              "network.toml"]


def test_the_hand_over_keeps_the_minimal_scenario_in_the_first_corpus_folder(tmp_path):
    """What a hunt that found a failure does with it (nothing started): minimal.toml in its folder, and the same text
    kept in the first corpus folder named, journaled; a second hand-over of the same schedule keeps nothing new."""
    from harness.hunt.model import HuntResult, Trial
    from harness.hunt.search import Hunt, HuntJournal
    from harness.hunt.trial import Base

    text = _shop(name="hunted", rest='[expect]\n"rejections{reason=\'unknown key\'}" = "== 0"\n')
    schedule = Schedule(steps=(chaos_step({"action": "restart", "at": 1.0, "replica": 2}),), duration=3.0)
    kept = []
    for attempt in ("first", "again"):
        folder = tmp_path / attempt
        folder.mkdir()
        hunt = Hunt(Base(tomllib.loads(text), parse_scenario(text), "hunted.toml", text), stream=io.StringIO(),
                    corpus_folders=[tmp_path / "corpus", tmp_path / "other"])
        hunt.folder, hunt.journal = folder, HuntJournal(folder / "hunt.jsonl")
        found = Trial(index=1, seed=7, schedule=schedule, purpose="search", failures=(FAILURE,), exit_code=1)
        hunt.result = HuntResult(scenario="hunted", seed=5, trials=[found], found=found, failure=FAILURE,
                                 minimal=schedule, shrink_stopped_by="done", stopped_by="found")
        hunt._hand_over()
        hunt.journal.close()
        assert hunt.corpus_saved is not None
        kept.append(hunt.corpus_saved)
        record = json.loads((folder / "hunt.jsonl").read_text().splitlines()[-1])
        assert record == {"type": "corpus-saved", "path": str(hunt.corpus_saved[0]), "new": attempt == "first",
                          "t": record["t"]}
    (path, new), (again, new_again) = kept
    assert new and not new_again and again == path and path.parent == tmp_path / "corpus"
    assert path.read_text() == (tmp_path / "first" / "minimal.toml").read_text()
    assert not (tmp_path / "other").exists()
    [entry], _ = read_corpus([tmp_path / "corpus"], base_rate=3)
    assert entry.schedule.steps == schedule.steps and entry.seed == 7  # the next hunt replays it, with its seed
