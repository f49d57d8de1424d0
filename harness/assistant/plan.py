"""What a run tool call would start: the scenario read, its length checked against the server's cap, its deadline.

The server refuses, with nothing started, a scenario that does not load (exit 2, as `run`
would) and a load longer than `mrtr-harness mcp --max-duration`: an assistant's call must
end, and a soak of hours is not one. Every run is then bounded twice: by its own duration
(and the chaos overrun and grace its scenario allows) and by a deadline past them, when the
server stops it as Ctrl-C would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import remote
from harness.config.durations import format_duration
from harness.config.scenario import Scenario, load_scenario
from harness.config.strict import ScenarioError

START_AND_RESULTS_SECONDS = 120.0
"""Beyond the load, its chaos overrun and its grace: time to start the target and to write the results."""


@dataclass(frozen=True)
class ServerSettings:
    """What `mrtr-harness mcp` was started with: where runs go, and the longest load a call may ask for."""

    results: Path
    max_duration: float


class Refused(Exception):
    """A run the server will not start; the message says why and what to change."""


@dataclass(frozen=True)
class RunPlan:
    """A run the server may start: its scenario as the run will read it, and what it would break off this machine."""

    path: Path
    scenario: Scenario
    breaking: str
    """"chaos", "fuzzing", "chaos and fuzzing", or "" (`harness.config.remote.breaking`)."""
    unallowed: list[str]
    """Remote hosts it would break that neither [target] allow names nor anyone has allowed yet."""

    @property
    def deadline(self) -> float:
        """Seconds after which the server stops the run (SIGTERM: results still written)."""
        scenario = self.scenario
        return scenario.duration + scenario.chaos_overrun + scenario.grace + START_AND_RESULTS_SECONDS


def plan_run(scenario: str, duration: str | None, seed: int | None, max_duration: float) -> RunPlan:
    """The run a call asks for, read as `mrtr-harness run` reads it; Refused when it will not be started."""
    path = Path(scenario)
    overrides: dict[str, Any] = {}
    if duration:
        overrides["duration"] = duration
    if seed is not None:
        overrides["seed"] = seed
    try:
        loaded = load_scenario(path, overrides)
    except ScenarioError as exc:
        raise Refused(str(exc)) from None
    if loaded.duration > max_duration:
        raise Refused(f"{path}: its load runs {format_duration(loaded.duration)}, longer than this server allows "
                      f"({format_duration(max_duration)}, `mrtr-harness mcp --max-duration`): give a shorter "
                      f"duration, e.g. \"{format_duration(min(max_duration, 30.0))}\"")
    return RunPlan(path, loaded, remote.breaking(loaded), remote.unallowed_hosts(loaded))
