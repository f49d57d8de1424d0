"""A hunt spread over machines as a Kubernetes Indexed Job (`deploy/kubernetes/hunt/`), checked without a cluster.

Each object is validated against the Kubernetes API's schemas (strict), as the harness's own manifests are; what ties
them together is checked as a user would before applying (the scenario the pods mount is one this harness hunts, the
volume every pod writes is one all nodes can); the pods' own command is run by a real shell for every index (their
trial ranges cover the search once); and the Job is simulated here: the pod command of two indexes run as processes
against the embedded shop, their shares merged by the guide's `hunt merge`. The guide's lines parse (bash -n, and
kubectl's own flag parser).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from harness.config.scenario import parse_scenario
from tests.harness_run import ROOT
from tests.services import require_binary
from tests.test_kubernetes_harness import container, objects, one, option

HUNT = ROOT / "deploy" / "kubernetes" / "hunt"
GUIDE = ROOT / "docs" / "hunt.md"


def _job() -> dict:
    return one("Job", "mrtr-hunt", HUNT)


def _env() -> dict[str, str]:
    return {env["name"]: env["value"] for env in container(_job())["env"] if "value" in env}


def _script() -> str:
    hunt = container(_job())
    assert hunt["command"] == ["sh", "-c"]
    [script] = hunt["args"]
    return script


@pytest.mark.parametrize("manifest", objects(HUNT), ids=lambda doc: f"{doc['kind']}/{doc['metadata'].get('name')}")
def test_every_hunt_manifest_is_valid_against_the_kubernetes_api_schema(manifest):
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    assert manifest["metadata"]["namespace"] == "mrtr"


def test_the_job_is_indexed_each_index_runs_once_and_its_trials_are_its_pods_shares():
    job = _job()
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    assert spec["backoffLimitPerIndex"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
    assert job["metadata"]["generateName"] == "mrtr-hunt-" and spec["ttlSecondsAfterFinished"] > 0
    env = _env()
    assert int(env["TRIALS"]) == spec["completions"] * int(env["TRIALS_PER_POD"])
    [named] = [variable for variable in container(job)["env"] if variable["name"] == "JOB_NAME"]
    assert named["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['batch.kubernetes.io/job-name']"


def test_the_pods_hunt_the_scenario_the_config_map_holds_and_write_to_a_volume_every_node_can():
    job = _job()
    pod = job["spec"]["template"]["spec"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container(job)["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    scenario_path = Path(_env()["SCENARIO"])
    assert str(scenario_path.parent) == mounts["scenario"]
    config = one("ConfigMap", volumes["scenario"]["configMap"]["name"], HUNT)
    scenario = parse_scenario(config["data"][scenario_path.name], scenario_path.name)
    assert scenario.target.kind == "embedded" and scenario.hunt is not None
    assert scenario.hunt.strategy != "lineage"  # a share cannot draw lineage's trials alone
    assert _env()["RESULTS"] == mounts["results"]
    claim = one("PersistentVolumeClaim", volumes["results"]["persistentVolumeClaim"]["claimName"], HUNT)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # pods on several nodes write it at once
    assert pod["securityContext"]["fsGroup"] == 65534  # the image's user (nobody) writes it
    reader = one("Pod", "mrtr-hunt-results-reader", HUNT)
    assert reader["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"],
                                                                       "readOnly": True}


def _stub(folder: Path, body: str) -> Path:
    """A `mrtr-harness` on PATH: `body` runs with the words the pod's command gives it."""
    folder.mkdir(exist_ok=True)
    stub = folder / "mrtr-harness"
    stub.write_text(f"#!/bin/sh\n{body}\n")
    stub.chmod(0o755)
    return folder


def _pod(index: int, tools: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The pod's own command, by a real shell, as index `index` of job `mrtr-hunt-test`."""
    variables = {**os.environ, **_env(), "JOB_COMPLETION_INDEX": str(index), "JOB_NAME": "mrtr-hunt-test", **env,
                 "PATH": f"{tools}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", _script()], env=variables, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_each_index_runs_its_own_range_and_together_they_cover_the_search_once(tmp_path):
    tools = _stub(tmp_path / "echo", 'printf "%s\\n" "$@"')
    spans = []
    for index in range(_job()["spec"]["completions"]):
        words = _pod(index, tools).stdout.splitlines()
        assert words[:2] == ["hunt", _env()["SCENARIO"]]
        assert option(words, "--seed") == _env()["HUNT_SEED"] and option(words, "--trials") == _env()["TRIALS"]
        assert option(words, "--results") == f"/results/mrtr-hunt-test/{index}"  # no two pods write one folder
        first, last = map(int, option(words, "--trial-range").split(":"))
        spans += list(range(first, last + 1))
    assert spans == list(range(1, int(_env()["TRIALS"]) + 1))


@pytest.mark.timeout(600)
def test_the_job_simulated_here_two_pods_shares_merge_into_one_hunt(tmp_path):
    """Two indexes of the Job as processes (about 40 s): each pod's own command, the ConfigMap's scenario (its trials
    shortened), one trial each; then the guide's merge of what they wrote."""
    config = one("ConfigMap", "mrtr-hunt-scenario", HUNT)
    scenario = tmp_path / "hunt.toml"
    scenario.write_text(config["data"]["hunt.toml"].replace('trial_duration = "6s"', 'trial_duration = "3s"'))
    tools = _stub(tmp_path / "tools", f'exec {shlex.quote(sys.executable)} -m harness "$@"')
    results = tmp_path / "results"
    for index in (0, 1):
        done = _pod(index, tools, SCENARIO=str(scenario), TRIALS="2", TRIALS_PER_POD="1", RESULTS=str(results))
        assert done.returncode == 0, done.stdout + done.stderr
    shares = sorted((results / "mrtr-hunt-test").glob("*/*-hunt-spread-hunt"))
    assert [share.parent.name for share in shares] == ["0", "1"]
    merged = subprocess.run([sys.executable, "-m", "harness", "hunt", "merge", *map(str, shares), "--results",
                             str(tmp_path / "merged")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    [folder] = list((tmp_path / "merged").iterdir())
    summary = json.loads((folder / "hunt.json").read_text())
    assert summary["trials"] == {"control": 2, "search": 2} and summary["trial_range"] == [1, 2]
    assert [Path(name).name for name in summary["merged_from"]] == [share.name for share in shares]
    cells = [json.loads(line)["coverage"] for share in shares
             for line in (share / "hunt.jsonl").read_text().splitlines() if json.loads(line)["type"] == "end"]
    assert sum(cell["trials"] for cell in summary["coverage_cells"]) == \
        sum(cell["trials"] for share_cells in cells for cell in share_cells)


# --- the guide --------------------------------------------------------------------------------------------------


def guide_lines() -> list[str]:
    """The ```sh lines of docs/hunt.md's "Over many machines"."""
    section = GUIDE.read_text(encoding="utf-8").split("## Over many machines", 1)[1].split("\n## ", 1)[0]
    return [line for block in re.findall(r"```sh\n(.*?)```", section, re.S) for line in block.splitlines()
            if line.strip()]


def test_the_guide_creates_the_job_copies_the_shares_out_and_merges_them():
    lines = guide_lines()
    check = subprocess.run(["bash", "-n"], input="\n".join(lines), text=True, capture_output=True, check=False)
    assert check.returncode == 0, check.stderr
    kubectl = [shlex.split(command, comments=True) for line in lines for command in re.findall(r"kubectl\b[^;&|)]*",
                                                                                                line)]
    assert any("create" in argv and option(argv, "-f") == "deploy/kubernetes/hunt/indexed-job.yaml" for argv in kubectl)
    for argv in kubectl:
        assert option(argv, "-n") == "mrtr", argv
        if "-f" in argv:
            assert (ROOT / option(argv, "-f")).exists(), argv
    assert any(line.startswith("mrtr-harness hunt merge ") for line in lines)
    binary = require_binary("kubectl")
    for argv in kubectl:
        result = subprocess.run([binary, *argv[1:], "--help"], capture_output=True, text=True, timeout=60,
                                check=False, env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/dev/null",
                                                  "HOME": "/nonexistent"})
        assert result.returncode == 0, (argv, result.stderr)
