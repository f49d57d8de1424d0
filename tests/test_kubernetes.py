"""The Kubernetes manifests (`deploy/kubernetes/`) and `scenarios/kubernetes.toml`, checked without a cluster.

No cluster can run here, so each object is validated against the Kubernetes API's own
schemas (bundled by `kubernetes-validate`, strict: an unknown field is an error), and what
ties the parts together is checked as a user would before applying: the Services select
the pods they are for, the replicas mount the ring Secret where their `--keyring` reads it,
and the scenario's kubectl commands name objects the manifests define.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from harness.config.scenario import load_scenario
from tests.harness_run import ROOT

MANIFESTS = ROOT / "deploy" / "kubernetes"


def objects() -> list[tuple[Path, dict[str, Any]]]:
    found = [(path, doc) for path in sorted(MANIFESTS.glob("*.yaml"))
             for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert found, "no manifests in deploy/kubernetes"
    return found


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in objects() if doc["kind"] == kind}


@pytest.mark.parametrize(("path", "manifest"), objects(),
                         ids=[f"{path.name}:{doc['kind']}/{doc['metadata']['name']}" for path, doc in objects()])
def test_every_manifest_is_valid_against_the_kubernetes_api_schema(path, manifest):
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_the_services_select_the_pods_of_their_deployments_on_their_ports():
    deployments = by_kind("Deployment")
    services = by_kind("Service")
    assert set(services) == {"mcp", "shop-api", "redis"} and set(deployments) == {"mcp", "shop-api", "redis"}
    for name, service in services.items():
        pod = deployments[name]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), name
        ports = {port["name"] for container in pod["spec"]["containers"] for port in container["ports"]}
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports, name


def test_the_replicas_share_one_ring_from_the_secret_mounted_where_their_keyring_reads_it():
    replica = by_kind("Deployment")["mcp"]["spec"]
    assert replica["replicas"] > 1
    [container] = replica["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["shop", "replica"]
    keyring = args[args.index("--keyring") + 1]
    assert keyring == "file:/ring/keys"
    [mount] = container["volumeMounts"]
    [volume] = [v for v in replica["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert mount["mountPath"] == "/ring" and volume["secret"]["secretName"] == "mcp-keyring"
    assert args[args.index("--api") + 1] == "http://shop-api:8100"
    assert args[args.index("--store") + 1] == "redis://redis:6379/0"
    assert args[args.index("--allowed-host") + 1] == "*"
    env = {item["name"] for item in container["env"]}
    assert {"MCP_TTL", "MCP_NAME", "MCP_CLOCK_OFFSET", "POD_NAME"} <= env


def test_the_kubernetes_scenario_drives_those_objects_through_kubectl():
    scenario = load_scenario(ROOT / "scenarios" / "kubernetes.toml")
    commands = {name: " ".join(argv) for name, argv in scenario.target.commands.items()}
    assert {"restart", "add-key", "promote-key", "retire-key", "scale"} <= set(commands)
    labels = by_kind("Deployment")["mcp"]["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{key}={value}" for key, value in labels.items())
    assert selector in commands["restart"] and "{index}" in commands["restart"]
    for step in ("add-key", "promote-key", "retire-key"):
        assert "secret generic mcp-keyring --from-file=keys=" in commands[step] and "{key_file}" in commands[step]
    assert "deploy/mcp --replicas={replicas}" in commands["scale"]
    for variable in ("MCP_TTL", "MCP_NAME", "MCP_CLOCK_OFFSET"):
        assert f"set env deploy/mcp {variable}=" in " ".join(commands.values())
    assert [step.action for step in scenario.chaos] == ["restart", "rotate-keys"]
