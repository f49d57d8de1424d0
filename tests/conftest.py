"""Fixtures shared by the test suite: real shop deployments on 127.0.0.1, stopped by PID."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from harness.targets.local_deployment import LocalDeployment, ReplicaOptions


@pytest.fixture(scope="module")
def deploy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LocalDeployment]]:
    """Start shop deployments for a test module; every process is stopped when the module ends."""
    started: list[LocalDeployment] = []

    def start(options: Sequence[ReplicaOptions] | None = None, *, replicas: int = 2, **kwargs) -> LocalDeployment:
        workdir: Path = tmp_path_factory.mktemp("shop")
        deployment = LocalDeployment(workdir, replicas=replicas, **kwargs)
        started.append(deployment)
        deployment.start(options)
        return deployment

    yield start
    for deployment in started:
        deployment.stop()


LONGEST_FIRST = (
    "test_hunt_search", "test_run", "test_docker_backend", "test_catalogue", "test_network_faults",
    "test_compose_stack", "test_compare", "test_auth", "test_catalogue_deployments", "test_hunt_from_triage",
    "test_hunt_lineage", "test_catalogue_tokens", "test_chaos_commands", "test_catalogue_hosts",
    "test_scenario_validation", "test_distributed", "test_leak_gate", "test_fuzz", "test_init", "test_shop_auth",
    "test_cluster_auth", "test_hunt_reuse", "test_stdio_target", "test_web_ui",
)
"""The modules that take longest, longest first, as a whole suite's `--durations=0` summed them per file (the
order only: no timing is asserted anywhere). CI runs `--dist loadfile`, which hands whole files to workers in
collection order: the long ones first keeps the suite from ending on one worker still in a long file while the
others idle. A module not named here keeps its place after them."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Collect the longest modules first (`LONGEST_FIRST`); every module's own tests keep their order."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))
