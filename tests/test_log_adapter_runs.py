"""A run reads a second server implementation's rejections end to end, by its reason adapter.

The shop's replicas, started as a deployment would (each with its own per-process key, so a round sent to the other
replica is refused `unknown key`), write their rejection lines as the TypeScript SDK's server does
(`--log-format typescript`). With `[target] log_adapter = "typescript-sdk"` the run explains every -32602 by its
reason; with the default adapter none is explained, and the run says why: "no adapter for this server".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.harness_run import ROOT, run_harness
from tests.test_chaos_commands import Replicas, toml_list

SCENARIO = """
name = "typescript-format"
seed = 5
duration = "3s"
grace = "8s"

[target]
kind = "external"
urls = {urls}
api = "{api}"
logs = {logs}
{adapter}

[load]
arrival_rate = 4
routing = "other-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "0s" }}
decline = 0
cancel = 0
abandon = 0
"""


@pytest.fixture
def replicas(tmp_path) -> Iterator[Replicas]:
    started = Replicas(tmp_path / "replicas")
    try:
        yield started
    finally:
        started.stop()


def _typescript_shop(replicas: Replicas) -> tuple[str, list[str]]:
    """The shop's API and two replicas logging as the TypeScript SDK does, up and answering: their URLs."""
    folder = replicas.folder
    api = replicas.start("api", "harness", "shop", "api", "--store", f"sqlite:{folder / 'shop.db'}")
    urls = [replicas.start(name, "harness", "shop", "replica", "--api", api.removesuffix("/mcp"),
                           "--store", f"sqlite:{folder / 'shop.db'}", "--replica-id", name,
                           "--log-format", "typescript")
            for name in ("r1", "r2")]
    replicas.wait_ready()
    return api, urls


def test_a_shop_logging_as_the_typescript_sdk_is_explained_by_its_adapter_and_unexplained_for_want_of_one(
        replicas: Replicas, tmp_path):
    api, urls = _typescript_shop(replicas)
    logs = [f"file:{replicas.log(name)}@{name}" for name in ("r1", "r2")]
    summaries = {}
    for adapter in ('log_adapter = "typescript-sdk"', ""):
        scenario = tmp_path / "run.toml"
        scenario.write_text(SCENARIO.format(urls=toml_list(urls), logs=toml_list(logs), api=api.removesuffix("/mcp"),
                                            adapter=adapter))
        finished = run_harness(scenario, tmp_path / f"results-{bool(adapter)}")
        assert finished.folder is not None, finished.output
        summaries[bool(adapter)] = (finished, json.loads((finished.folder / "summary.json").read_text()))

    # The replicas really wrote the TypeScript SDK's line, never the Python SDK's.
    written = replicas.log("r1").read_text() + replicas.log("r2").read_text()
    assert re.search(r"^Error: requestState verification rejected tools/call: unknown key$", written, re.MULTILINE)
    assert "requestState rejected on" not in written

    finished, summary = summaries[True]
    seen = summary["reconciliation"]
    assert finished.code == 0, finished.output
    assert seen["client_rejections"] > 0
    assert (seen["unexplained"], seen["no_adapter"], seen["matched"]) == (0, 0, seen["client_rejections"])
    logged = {(r["replica"], r["reason"]) for r in finished.journal() if r["type"] == "rejection"}
    assert logged == {("r1", "unknown key"), ("r2", "unknown key")}

    # triage of the same logs, by the adapter, counts what the clients of both runs saw, by reason and replica.
    seen_by_clients: dict[str, int] = {}
    for finished_run, _ in summaries.values():
        for record in finished_run.journal():
            if record["type"] == "round" and record.get("outcome") == "invalid_state":
                seen_by_clients[record["replica"]] = seen_by_clients.get(record["replica"], 0) + 1
    triaged = subprocess.run([sys.executable, "-m", "harness", "triage", "--once", "--json", "--adapter",
                              "typescript-sdk", *(f"--file={replicas.log(name)}@{name}" for name in ("r1", "r2"))],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert json.loads(triaged.stdout)["by_reason_and_replica"] == {"unknown key": seen_by_clients}, triaged.stderr

    finished, summary = summaries[False]
    seen = summary["reconciliation"]
    assert finished.code == 1, finished.output
    assert seen["client_rejections"] > 0 and seen["logged"] == 0
    assert seen["unexplained"] == seen["no_adapter"] == seen["client_rejections"]
    assert "unexplained (no adapter for this server)" in finished.output


UNASKED_SCENARIO = """
name = "unasked-lines"
seed = 5
duration = "4s"
grace = "8s"
time_scale = 60

[target]
kind = "external"
urls = {urls}
api = "{api}"
logs = {logs}
log_adapter = "{adapter}"

[load]
arrival_rate = 4

[[flows]]
kind = "payout"

[leads]
think = {{ dist = "constant", value = "10s" }}
url_completion = {{ dist = "constant", value = "5s" }}

[[hosts]]
name = "desktop"

[[hosts]]
name = "kiosk"
elicitation = ["form"]
"""

SHOP_ADAPTER = """name = "shop-ts"
mark = "requestState verification rejected "
pattern = '''requestState verification rejected (?P<method>[\\w/]{1,64}): (?P<reason>[^\\r\\n]{1,200})'''
reasons = { mac = "seal", malformed = "malformed", expired = "expired", bind = "principal" }

[unasked]
mark = "input request refused on "
pattern = '''input request refused on (?P<method>\\S{1,40}): the client did not declare (?P<capability>[\\w-]{1,20})'''
"""


def test_a_32021_the_clients_saw_is_explained_by_the_line_its_replica_logged_for_it(replicas: Replicas, tmp_path):
    """The shop's replicas log their own line when they refuse with -32021 (a forms-only host asked in URL mode);
    a user's adapter's [unasked] reads it, and reconciliation pairs each -32021 with its replica's line."""
    api, urls = _typescript_shop(replicas)
    (tmp_path / "shop-ts.toml").write_text(SHOP_ADAPTER)
    scenario = tmp_path / "run.toml"
    scenario.write_text(UNASKED_SCENARIO.format(
        urls=toml_list(urls), api=api.removesuffix("/mcp"), adapter="shop-ts.toml",
        logs=toml_list([f"file:{replicas.log(name)}@{name}" for name in ("r1", "r2")])))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.folder is not None, finished.output
    summary = json.loads((finished.folder / "summary.json").read_text())
    refused = summary["hosts"]["kiosk"]["errors_by_code"].get("-32021", 0)
    assert refused > 0, summary["hosts"]
    unasked = summary["reconciliation"]["unasked"]
    assert (unasked["client"], unasked["matched"], unasked["unexplained"]) == (refused, refused, 0), unasked
    lines = [record for record in finished.journal() if record["type"] == "unasked"]
    assert {record["capability"] for record in lines} == {"url-mode"}
    # the -32602s (a round sent to the replica whose key did not seal it) are their own lines, none a -32021 one
    assert {record["reason"] for record in finished.journal() if record["type"] == "rejection"} <= {"unknown key"}
    assert summary["reconciliation"]["unexplained"] == 0 and finished.code == 0, finished.output

    # triage of the same logs by the same adapter counts the -32021s apart, by replica, as the clients saw them
    seen: dict[str, int] = {}
    for record in finished.journal():
        if record["type"] == "round" and record.get("outcome") == "missing_capability":
            seen[record["replica"]] = seen.get(record["replica"], 0) + 1
    triaged = subprocess.run([sys.executable, "-m", "harness", "triage", "--once", "--json", "--adapter",
                              str(tmp_path / "shop-ts.toml"),
                              *(f"--file={replicas.log(name)}@{name}" for name in ("r1", "r2"))],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    counted = json.loads(triaged.stdout)
    assert counted["unasked_by_replica"] == seen, triaged.stderr
    assert set(counted["by_reason_and_replica"]) <= {"unknown key"}
