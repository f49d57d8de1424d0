"""What a run tool call would start: the scenario read, its length checked against the server's cap, its deadline,
and everything it would run or reach beyond the embedded shop.

The server refuses, with nothing started, a path outside its workspace (the folder it was
started in, or `--workspace`, and its `--results`) or not a regular file, a scenario that
does not load (exit 2, as `run` would) and a load longer than `mrtr-harness mcp
--max-duration`: an assistant's call must end, and a soak of hours is not one. Every run is
then bounded twice: by its own duration (and the chaos overrun and grace its scenario allows)
and by a deadline past them, when the server stops it as Ctrl-C would.

`reaches` names, exactly as the scenario writes them, the commands a run would execute and
whatever it would touch that is not the embedded shop the harness starts itself: the
question the user answers before the run starts (`harness.assistant.consent`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import remote
from harness.config.chaos import CommandAction
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
    workspace: Path = Path()
    """The folder the assistant's paths must stay inside (with `results`): where the server was started, or
    `--workspace`."""

    def roots(self) -> tuple[Path, ...]:
        """The folders a path the assistant gives may be in, symbolic links resolved."""
        return tuple(dict.fromkeys(folder.resolve() for folder in (self.workspace, self.results)))


class Refused(Exception):
    """A run the server will not start; the message says why and what to change."""


@dataclass(frozen=True)
class RunPlan:
    """A run the server may start: its scenario as the run will read it, what it would break off this machine, and
    what it would run or touch beyond the embedded shop."""

    path: Path
    scenario: Scenario
    breaking: str
    """"chaos", "fuzzing", "chaos and fuzzing", or "" (`harness.config.remote.breaking`)."""
    reaches: list[str]
    """What it would run or touch beyond the embedded shop, one line each (`beyond_the_shop`); none: it asks
    nothing."""
    unallowed: list[str]
    """Remote hosts it would break that neither [target] allow names nor anyone has allowed yet."""

    @property
    def deadline(self) -> float:
        """Seconds after which the server stops the run (SIGTERM: results still written)."""
        scenario = self.scenario
        return scenario.duration + scenario.chaos_overrun + scenario.grace + START_AND_RESULTS_SECONDS


def plan_run(scenario: str, duration: str | None, seed: int | None, settings: ServerSettings) -> RunPlan:
    """The run a call asks for, read as `mrtr-harness run` reads it; Refused when it will not be started."""
    path = regular_file(scenario, settings, "scenario")
    max_duration = settings.max_duration
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
    return RunPlan(path, loaded, remote.breaking(loaded), beyond_the_shop(loaded), remote.unallowed_hosts(loaded))


def inside_workspace(given: str, settings: ServerSettings) -> Path:
    """The path an assistant gave, read from the server's folder; Refused when it leads (a symbolic link followed)
    outside the workspace and the results folder."""
    path = Path(given)
    resolved = path.resolve()
    roots = settings.roots()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise Refused(f"{given}: outside this server's workspace ({', '.join(map(str, roots))}): give a path inside "
                      "it, or start `mrtr-harness mcp` with --workspace")
    return path


def regular_file(given: str, settings: ServerSettings, what: str) -> Path:
    """A file inside the workspace that is a regular file, checked without opening it (a FIFO would block the
    reader, a device never end); Refused naming what it is otherwise. One that cannot be looked at (none there)
    is its reader's to name."""
    path = inside_workspace(given, settings)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path  # its reader says what is wrong (no such file, no permission)
    if not stat.S_ISREG(mode):
        raise Refused(f"{given}: not a regular file ({_file_kind(mode)}): the {what} must be one")
    return path


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def beyond_the_shop(scenario: Scenario) -> list[str]:
    """Every command the run would execute and everything it would touch that is not the embedded shop, one line
    each, the commands' argv as the scenario writes them (placeholders filled at run time): none for the
    embedded shop alone."""
    target = scenario.target
    found: list[str] = []
    if target.kind == "external":
        found.append(f"load to the external target at {_quoted(target.urls)}")
        if target.api is not None:
            found.append(f"ledger reads from {_quoted(target.api)}")
    elif target.kind == "docker":
        found.append(f"Docker: the shop started from image {_quoted(target.image)} ({target.replicas} containers)"
                     if target.image is not None else
                     f"Docker: the running compose project {_quoted(target.compose_project)}"
                     + (f" (service {_quoted(target.compose_service)})" if target.compose_service else ""))
    elif target.kind == "stdio" and target.stdio_command:
        times = "once per flow" if target.stdio_processes == "per-client" else f"{target.replicas} processes"
        found.append(f"run the stdio server command {_quoted(target.stdio_command)} ({times})")
    found += [f"run [target.commands] {name} = {_quoted(argv)}" for name, argv in target.commands.items()]
    for number, step in enumerate(scenario.chaos, 1):
        if isinstance(step, CommandAction):
            found.append(f"run [[chaos]] {number} command = {_quoted(step.command)}")
            if step.rollback is not None:
                found.append(f"run [[chaos]] {number} rollback = {_quoted(step.rollback)}")
    found += _auth_reaches(scenario)
    for entry in target.logs:
        kind, _, rest = entry.partition(":")
        found.append(f"run the log source command {_quoted(rest)}" if kind == "command" else
                     f"read the log source {_quoted(entry)}")
    return found


def _auth_reaches(scenario: Scenario) -> list[str]:
    auth = scenario.target.auth
    if auth is None or scenario.target.kind == "embedded":
        return []  # the embedded shop's own authorization server
    if auth.kind == "command":
        return [f"run [target.auth] command = {_quoted(auth.command)} (once per lead: its token)"]
    if auth.kind == "tokens":
        return [f"read the tokens in {_quoted(auth.file)} and send them to the target"]
    where = (_quoted(auth.token_url) if auth.token_url else
             f"the token endpoint of issuer {_quoted(auth.issuer)} (pinned), found by OAuth discovery"
             if auth.issuer else "the token endpoint the target's OAuth discovery names (no issuer pinned)")
    return [f"send the client secret (${auth.client_secret_env}) to {where}"]


def _quoted(value: str | list[str] | None) -> str:
    """A value as the scenario writes it, quoted (an argv a JSON and TOML array): every control or non-ASCII
    character escaped, so what the user reads is what runs."""
    return json.dumps(value)
