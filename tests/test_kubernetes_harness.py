"""The harness's own manifests (`deploy/kubernetes/harness/`): a master Job and workers, checked without a cluster.

Each object is validated against the Kubernetes API's schemas (strict), and what ties them
together is checked as a user would before applying: the workers find the master's Service,
the master waits for as many workers as the Deployment runs, its scenario is one this
harness reads with URLs the cluster's Services answer, and its ServiceAccount may do what the
scenario's kubectl commands do.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from harness.config.scenario import parse_scenario
from tests.harness_run import ROOT

FOLDER = ROOT / "deploy" / "kubernetes"
HARNESS = FOLDER / "harness"


def objects(folder: Path) -> list[dict[str, Any]]:
    return [doc for path in sorted(folder.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def one(kind: str, name: str, folder: Path = HARNESS) -> dict[str, Any]:
    [found] = [doc for doc in objects(folder) if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return found


def container(workload: dict[str, Any]) -> dict[str, Any]:
    [only] = workload["spec"]["template"]["spec"]["containers"]
    return only


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("manifest", objects(HARNESS), ids=lambda doc: f"{doc['kind']}/{doc['metadata']['name']}")
def test_every_harness_manifest_is_valid_against_the_kubernetes_api_schema(manifest):
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    assert manifest["metadata"]["namespace"] == "mrtr"  # beside the deployment under test


def test_the_workers_reach_the_master_and_the_master_waits_for_every_one_of_them():
    master, workers = one("Job", "mrtr-harness-master"), one("Deployment", "mrtr-harness-worker")
    service = one("Service", "mrtr-harness-master")
    master_args, worker_args = container(master)["args"], container(workers)["args"]
    assert worker_args[0] == "worker" and master_args[:2] == ["run", "/scenario/in-cluster.toml"]
    assert option(worker_args, "--master-host") == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
    ports = {port["name"]: port["containerPort"] for port in container(master)["ports"]}
    served = {port["targetPort"]: port["port"] for port in service["spec"]["ports"]}
    assert served["locust-master"] == int(option(worker_args, "--master-port")) == \
        ports["locust-master"] == int(option(master_args, "--master-bind-port"))
    assert int(option(master_args, "--expect-workers")) == workers["spec"]["replicas"]
    assert option(master_args, "--master-bind-host") == "0.0.0.0"
    assert master["spec"]["backoffLimit"] == 0  # a failed run is a verdict, not something to retry


def test_the_results_outlive_the_job_on_a_volume():
    master = one("Job", "mrtr-harness-master")
    spec = master["spec"]["template"]["spec"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container(master)["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert option(container(master)["args"], "--results") == mounts["results"]
    claim = volumes["results"]["persistentVolumeClaim"]["claimName"]
    assert spec["securityContext"]["fsGroup"] == 65534  # the image's user (nobody) writes the volume
    assert one("PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_the_master_s_scenario_is_valid_and_names_services_the_cluster_has():
    config = one("ConfigMap", "mrtr-harness-scenario")
    master = one("Job", "mrtr-harness-master")
    scenario_path = Path(container(master)["args"][1])
    mounts = {mount["name"]: mount["mountPath"] for mount in container(master)["volumeMounts"]}
    assert str(scenario_path.parent) == mounts["scenario"]
    scenario = parse_scenario(config["data"][scenario_path.name], "in-cluster.toml")
    services = {doc["metadata"]["name"]: doc for doc in objects(FOLDER) if doc["kind"] == "Service"}
    for url in [*scenario.target.urls, scenario.target.api or ""]:
        host, _, port = re.match(r"http://([^/:]+)(:(\d+))?", url).groups()  # type: ignore[union-attr]
        assert host in services, url
        assert int(port or 80) in {p["port"] for p in services[host]["spec"]["ports"]}, url


def test_the_service_account_may_do_what_the_scenario_s_kubectl_commands_do():
    master = one("Job", "mrtr-harness-master")
    account = master["spec"]["template"]["spec"]["serviceAccountName"]
    binding = one("RoleBinding", account)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "mrtr"}]
    rules = one("Role", binding["roleRef"]["name"])["rules"]

    def allowed(resource: str, verb: str) -> bool:
        return any(resource in rule["resources"] and verb in rule["verbs"] for rule in rules)

    scenario = parse_scenario(one("ConfigMap", "mrtr-harness-scenario")["data"]["in-cluster.toml"])
    text = " ".join([*scenario.target.logs, *(" ".join(argv) for argv in scenario.target.commands.values())])
    needs = [("pods/log", "get", "logs -f"), ("pods", "delete", "delete"), ("secrets", "patch", "secret"),
             ("deployments", "patch", "set env"), ("deployments/scale", "patch", "scale deploy")]
    for resource, verb, sign in needs:
        if sign in text:
            assert allowed(resource, verb), (resource, verb)
    image_path = re.search(r"PATH=(\S+)", (ROOT / "Dockerfile").read_text()).group(1)  # type: ignore[union-attr]
    [path] = [env["value"] for env in container(master)["env"] if env["name"] == "PATH"]
    assert path == f"/tools:{image_path}"  # kubectl beside the image's own PATH (its venv first)
    assert any(volume.get("emptyDir") == {} and volume["name"] == "tools"
               for volume in master["spec"]["template"]["spec"]["volumes"])  # where kubectl is copied to
