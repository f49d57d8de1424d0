"""A round whose replica is down goes to another, and the journal says where it was meant to go.

Real parts: a shop deployment of three replicas on per-process keys (so a state that
reaches another replica than its minter's is refused, `unknown key`), a real
`mrtr-harness run` against their three URLs as an external target, reading their log
files, and replica r3 stopped by the test while the run goes on: once r3 has asked a lead
(a round 1 answered `input_required`, journaled), while that lead thinks (4 s). The calls
stay on their replica (same-replica), so that lead's answer is routed to r3, which is down:
it moves to r1, which cannot open r3's state. At least one moved round crossed and was
refused, whatever the timing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from harness.journal.writer import read_journal
from harness.targets.local_deployment import ReplicaOptions
from tests.harness_run import ROOT, Finished
from tests.services import sigint_default

SCENARIO = """
name = "one-replica-down"
seed = 9
duration = "8s"
time_scale = 60
grace = "5s"

[target]
kind = "external"
urls = [{urls}]
api = "{api}"
logs = [{logs}]

[load]
arrival_rate = 6
routing = "same-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "240s" }}
decline = 0.0
cancel = 0.0
abandon = 0.0
"""
WAIT_SECONDS = 60.0


def asked_on_r3(results: Path) -> bool:
    """Whether the journal has a round 1 on r3 that asked a lead (its answer, 4 s later, goes to r3 again)."""
    journals = sorted(results.glob("*/journal.jsonl"))
    return bool(journals) and any(record["type"] == "round" and record["replica"] == "r3" and record["round"] == 1
                                  and record["outcome"] == "input_required" for record in read_journal(journals[-1]))


def test_rounds_sent_on_from_a_replica_that_is_down_carry_their_origin(deploy, tmp_path: Path):
    deployment = deploy([ReplicaOptions(keyring="ephemeral")] * 3, replicas=3)
    assert deployment.api is not None
    logs = ", ".join(f'"file:{replica.log_path}@{replica.label}"' for replica in deployment.replicas)
    scenario = tmp_path / "down.toml"
    scenario.write_text(SCENARIO.format(urls=", ".join(f'"{url}"' for url in deployment.replica_urls),
                                        api=deployment.api.base_url, logs=logs))
    results = tmp_path / "results"
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results),
                            "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                           preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not asked_on_r3(results):
            assert run.poll() is None and time.monotonic() < deadline, "r3 never asked a lead"
            time.sleep(0.1)
        deployment.replicas[2].stop()  # r3 is down from here on, its lead still thinking: nothing accepts a
        # connection at its URL
        output, _ = run.communicate(timeout=WAIT_SECONDS)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    finished = Finished(run.returncode, output, sorted(path for path in results.iterdir() if path.is_dir())[-1])
    rounds = [record for record in finished.journal() if record["type"] == "round"]
    moved = [record for record in rounds if "redispatched_from" in record]
    assert moved, output
    assert {record["redispatched_from"] for record in moved} == {"r3"}
    assert "r3" not in {record["replica"] for record in moved}  # journaled under the replica that served it
    assert not [record for record in rounds if record["replica"] == "r3" and record["t"] > moved[-1]["t"]]
    # On per-process keys the replica a round moved to cannot open another's state: every moved round
    # whose state crossed replicas is refused, and one that opened its call (no state) is not. The lead
    # r3 asked answered after r3 was down: at least that round crossed and was refused.
    crossed = [record for record in moved if record.get("crossed")]
    assert crossed and all(record["outcome"] == "invalid_state" for record in crossed), moved
    assert all(record["outcome"] != "invalid_state" for record in moved if record["round"] == 1), moved
    rejected = sum(record["outcome"] == "invalid_state" for record in moved)
    summary = finished.summary
    assert summary["status"] == "completed", output
    assert summary["redispatched_rounds"] == len(moved)
    assert summary["reconciliation"]["from_redispatched_rounds"] == rejected
    assert f"{rejected} of the client rejections came from re-dispatched rounds" in output
