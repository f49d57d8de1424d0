"""A round whose replica is down goes to another, and the journal says where it was meant to go.

Real parts: a shop deployment of three replicas on per-process keys (so a state that
reaches another replica than its minter's is refused, `unknown key`), a real
`mrtr-harness run` against their three URLs as an external target, reading their log
files, and replica r3 stopped by the test while the run goes on.
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
routing = "round-robin"

[[flows]]
kind = "refund"

[leads]
think = {{ dist = "constant", value = "30s" }}
decline = 0.0
cancel = 0.0
abandon = 0.0
"""
WAIT_SECONDS = 60.0


def journal_rounds(results: Path) -> int:
    journals = sorted(results.glob("*/journal.jsonl"))
    return sum(1 for record in read_journal(journals[-1]) if record["type"] == "round") if journals else 0


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
        while journal_rounds(results) < 10:
            assert run.poll() is None and time.monotonic() < deadline, "the run never sent its first rounds"
            time.sleep(0.1)
        deployment.replicas[2].stop()  # r3 is down from here on: nothing accepts a connection at its URL
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
    # whose state crossed replicas is refused, and one that opened its call (no state) is not.
    assert all(record["outcome"] == "invalid_state" for record in moved if record.get("crossed")), moved
    assert all(record["outcome"] != "invalid_state" for record in moved if record["round"] == 1), moved
    rejected = sum(record["outcome"] == "invalid_state" for record in moved)
    summary = finished.summary
    assert summary["status"] == "completed", output
    assert summary["redispatched_rounds"] == len(moved)
    assert summary["reconciliation"]["from_redispatched_rounds"] == rejected
    # How many moved rounds carried a crossed state depends on where round-robin sent them; the line
    # is printed exactly when there was one.
    assert (f"{rejected} of the client rejections came from re-dispatched rounds" in output) == (rejected > 0)
