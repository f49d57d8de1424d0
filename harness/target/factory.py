"""Which target a scenario asks for: the embedded shop, containers, or an external deployment.

Each backend is imported only when chosen, so a run against an external server never
loads the reference server's code (or the docker SDK).
"""

from __future__ import annotations

from pathlib import Path

from harness.scenario import Scenario
from harness.target.base import Target


def build_target(scenario: Scenario, workdir: Path) -> Target:
    if scenario.target.kind == "embedded":
        from harness.target.process import EmbeddedTarget

        return EmbeddedTarget(scenario, workdir)
    if scenario.target.kind == "external":
        from harness.target.external import ExternalTarget

        return ExternalTarget(scenario)
    from harness.target.docker import DockerTarget

    return DockerTarget(scenario, workdir)
