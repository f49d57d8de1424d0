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

