"""The compose stack as a file: every service the harness expects, every mounted file in the repository.

Quick checks of the files themselves; tests/test_compose_stack.py brings the stack up (with
stand-ins for its public images, and without Grafana) and runs its scenario.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
REPLICAS = ["replica1", "replica2", "replica3"]


def test_the_stack_has_every_service_the_harness_expects():
    assert {"redis", "api", *REPLICAS, "balancer", "prometheus", "grafana", "harness"} <= set(SERVICES)


def test_replicas_share_one_key_ring_one_name_and_one_store():
    commands = [SERVICES[name]["command"] for name in REPLICAS]
    for command in commands:
        assert command[:2] == ["shop", "replica"], "every replica starts with the one replica command"
        options = dict(zip(command[2::2], command[3::2], strict=True))
        assert options["--keyring"] == "file:/keys/ring"
        assert options["--name"] == "shop"
        assert options["--store"].startswith("redis://redis:")
    assert len({dict(zip(c[2::2], c[3::2], strict=True))["--replica-id"] for c in commands}) == 3


def test_the_balancer_balances_every_request_across_all_replicas():
    config = (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert re.search(r"^\s*balance\s+roundrobin", config, re.M)
    assert re.search(r"^\s*http-reuse\s+never", config, re.M), "no server-side reuse that could pin a retry"
    directives = "\n".join(line.split("#")[0] for line in config.splitlines())
    assert not re.search(r"^\s*(stick|cookie|appsession|balance\s+source)", directives, re.M), "no stickiness"
    for name in REPLICAS:
        assert re.search(rf"^\s*server\s+{name}\s+{name}:8101", config, re.M)


def test_every_mounted_file_exists_in_the_repository():
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repository"


def test_prometheus_in_the_stack_scrapes_the_harness_and_every_replica():
    import json

    targets = ROOT / "deploy" / "prometheus-targets"
    harness = json.loads((targets / "harness.json").read_text())
    replicas = json.loads((targets / "replicas.json").read_text())
    assert harness[0]["targets"] == ["harness:9464"]
    assert sorted(t for entry in replicas for t in entry["targets"]) == [f"{r}:8101" for r in REPLICAS]
    command = SERVICES["harness"]["command"]
    assert command[0] == "run" and "--metrics-port" in command and "0.0.0.0" in command


def test_grafana_gets_the_shipped_provisioning_and_the_prometheus_url():
    grafana = SERVICES["grafana"]
    assert grafana["environment"]["MRTR_PROMETHEUS_URL"] == "http://prometheus:9090"
    assert any(v.startswith("./dashboards/grafana/provisioning:") for v in grafana["volumes"])


def test_the_dockerfile_builds_on_a_public_base_that_a_build_argument_can_swap():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", dockerfile, re.M)
    assert 'ENTRYPOINT ["mrtr-harness"]' in dockerfile
