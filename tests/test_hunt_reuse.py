"""A hunt's trials share the replicas' zygote (`[hunt] reuse`) and nothing else: proven on the shop itself.

Two embedded shops started one after the other inside one `lent_zygote` block (as two trials of a hunt are,
about 3 s): both fork their replicas from the one zygote, which outlives the first shop and ends with the block;
each has its own replica processes, its own sealing key and an empty ledger; a state the first shop sealed is
refused by the second as sealed with an unknown key; a replica killed in the first is up in the second. Then a
real hunt (about 15 s) whose chaos kills replicas: its trials fork from the hunt's zygote (its log is in the hunt's
folder, none in a trial's), each with new replica PIDs and a new sealing key, and every trial after a kill is
judged and holds; with `--no-reuse` every trial has a zygote of its own. A hunt killed with SIGKILL in its second
trial leaves no process behind.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from harness.config.scenario import parse_scenario
from harness.processes.children import alive, parent_of
from harness.targets.embedded import EmbeddedTarget
from harness.targets.zygote import lent_zygote
from tests.harness_run import ROOT
from tests.test_hunt_search import _below, _left_behind
from tests.test_rejection_reasons import first_round, retry_on

SHOP = """\
name = "reused"
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
"""


def _sealing_key(log: Path) -> str:
    found = re.search(r"sealing-key=(\w+)", log.read_text())
    assert found, f"{log} names no sealing key"
    return found[1]


def test_two_shops_in_one_lent_block_share_the_zygote_and_nothing_of_each_other(tmp_path):
    scenario = parse_scenario(SHOP, "reused")
    with lent_zygote(tmp_path / "zygote.log") as zygote:
        assert zygote is not None
        first = EmbeddedTarget(scenario, tmp_path / "t1")
        first.start()
        try:
            assert first.deployment is not None
            arguments, state = first_round(first.deployment, 0)
            assert first.ledger_check().read().refunds  # the quote is in the first shop's ledger
            first_pids = {replica.pid for replica in first.deployment.replicas}
            assert {parent_of(pid) for pid in first_pids if pid} == {zygote.process.pid}
            first.deployment.replicas[1].kill()  # what a trial's `kill` leaves behind
        finally:
            first.stop()
        assert zygote.process.poll() is None, "the lent zygote ended with the first shop"
        assert not any(pid and alive(pid) for pid in first_pids)
        second = EmbeddedTarget(scenario, tmp_path / "t2")
        second.start()
        try:
            assert second.deployment is not None
            second_pids = {replica.pid for replica in second.deployment.replicas}
            assert {parent_of(pid) for pid in second_pids if pid} == {zygote.process.pid}
            assert not second_pids & first_pids and second.replicas_up() == 2
            assert second.ledger_check().read().refunds == []  # the second shop's ledger starts empty
            keys = {_sealing_key(tmp_path / run / "logs" / "r1.log") for run in ("t1", "t2")}
            assert len(keys) == 2  # a new ring each time
            retry_on(second.deployment, 0, arguments, state, "unknown key")
        finally:
            second.stop()
    assert not alive(zygote.process.pid)
    assert not (tmp_path / "t1" / "logs" / "zygote.log").exists()


def _hunt(path: Path, results: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(path), "--actions", "kill", "--seed", "3",
                           "--results", str(results), *flags], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    [folder] = list(results.iterdir())
    return done, folder


def test_a_hunt_forks_every_trial_from_its_one_zygote_and_a_kill_leaves_the_next_trial_whole(tmp_path):
    path = tmp_path / "reused.toml"
    path.write_text(SHOP + '\n[hunt]\ntrials = 3\ncontrols = 0\ntrial_duration = "3s"\nmax_steps = 1\n')
    done, folder = _hunt(path, tmp_path / "reuse")
    assert "reuse: the replicas' zygote, started once for the hunt" in done.stderr
    records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    trials = [record for record in records if record["type"] == "trial"]
    assert len(trials) == 3 and all(record["outcome"] == "held" for record in trials)
    assert all(step["action"] == "kill" for record in trials for step in record["schedule"]["steps"])
    assert (folder / "zygote.log").exists()
    logs = [folder / record["folder"] / "target" / "logs" for record in trials]
    assert not any((log / "zygote.log").exists() for log in logs)
    started = [re.findall(r"Started server process \[(\d+)\]", (log / "r1.log").read_text())[0] for log in logs]
    assert len(set(started)) == 3  # each trial's own replica processes
    assert len({_sealing_key(log / "r1.log") for log in logs}) == 3  # and its own keys

    path.write_text(path.read_text().replace("trials = 3", "trials = 2"))
    done, folder = _hunt(path, tmp_path / "fresh", "--no-reuse")
    assert "reuse: off" in done.stderr and not (folder / "zygote.log").exists()
    records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    assert all((folder / record["folder"] / "target" / "logs" / "zygote.log").exists() for record in records
               if record["type"] == "trial")


def test_a_hunt_killed_with_sigkill_in_its_second_trial_leaves_no_process_behind(tmp_path):
    """SIGKILL once the second trial's chaos started (the lent zygote has served two trials; about 12 s): the
    kernel ends the zygote, its replicas and the trial's API with the hunt (their lifelines)."""
    path = tmp_path / "reused.toml"
    path.write_text(SHOP + '\n[hunt]\ntrials = 3\ncontrols = 0\ntrial_duration = "3s"\nmax_steps = 1\n'
                           'actions = ["pause"]\n')
    results = tmp_path / "results"
    process = subprocess.Popen([sys.executable, "-m", "harness", "hunt", str(path), "--results", str(results)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    seen: dict[tuple[int, str], str] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and _chaos_started(results) < 2 and process.poll() is None:
            seen |= _below(process.pid, seen)
            time.sleep(0.1)
        seen |= _below(process.pid, seen)
        assert _chaos_started(results) == 2, "the second trial's chaos never started"
        process.kill()
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    forked = [line for line in seen.values() if line.endswith("-m harness.targets.zygote ")]
    # a replica forked keeps its zygote's command line: the zygote and the second trial's 2 replicas were alive when
    # its chaos started (the first trial's may end between two looks at /proc on a busy machine)
    assert len(forked) >= 3, seen
    assert _left_behind(seen) == [], "a process the hunt started outlived its SIGKILL"


def _chaos_started(results: Path) -> int:
    """How many trials' journals say their chaos started."""
    return sum('"type":"chaos","phase":"start"' in journal.read_text(errors="replace")
               for journal in results.glob("*-hunt-reused/trials/*/journal.jsonl"))
