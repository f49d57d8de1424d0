"""The target a scenario asks for: the one place the run learns which backend it drives.

Each backend is imported only when a scenario asks for it, so a run against an external
deployment never loads the reference server (the shop) or the Docker client.
"""

from __future__ import annotations

from pathlib import Path

from harness.config.scenario import Scenario
from harness.targets.interface import Target


def build_target(scenario: Scenario, workdir: Path) -> Target:
    """The scenario's target, not started yet; `workdir` holds whatever files it makes (logs, stores, rings)."""
    if scenario.target.kind == "embedded":
        from harness.targets.embedded import EmbeddedTarget

        return EmbeddedTarget(scenario, workdir)
    if scenario.target.kind == "stdio":
        from harness.targets.stdio import StdioTarget

        return StdioTarget(scenario, workdir)
    if scenario.target.kind == "external":
        from harness.targets.external import ExternalTarget

        return ExternalTarget(scenario)
    from harness.targets.docker import DockerTarget

    return DockerTarget(scenario, workdir)
