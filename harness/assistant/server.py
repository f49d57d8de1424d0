"""The harness's MCP server: the SDK's own `MCPServer`, over stdio, with a tool per job of the command line.

- `validate(scenario)`: `mrtr-harness validate`, its lines and exit code.
- `run(scenario, duration?, seed?)`: `mrtr-harness run ... --quiet` as a child process, bounded
  (`harness.assistant.plan`), with a progress notification every second while it goes;
  before it runs a command, reaches beyond the embedded shop or breaks a remote host nobody
  allowed, it asks the user, naming what would run (`harness.assistant.consent`).
- `report(folder, rebuild?)`: `mrtr-harness report DIR`, or the folder's summary.json as it is.
- `compare(baseline, current, ...)`: `mrtr-harness compare`.
- `triage(path | text)`: triage's `--once` count (`harness.triage.cli.read_once`), in a thread.

Each answers with its model of `harness.assistant.results` as structured content. Paths are
read from the server's working folder, as the command line reads them, and must stay inside its
workspace (that folder or `--workspace`, and `--results`); a file it reads must be a regular
file (a FIFO is refused, never opened).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

import harness
from harness.assistant.children import harness_argv, run_child
from harness.assistant.consent import Consent, Hosts, agreed, refusal, settings_of
from harness.assistant.plan import Refused, ServerSettings, inside_workspace, plan_run, regular_file
from harness.assistant.results import (
    CompareResult,
    ReportResult,
    RunResult,
    TriageResult,
    ValidateResult,
    compare_files,
    judged_by,
    not_judged,
    read_verdict,
    run_files,
    tail,
)
from harness.errors import ExitCode

INSTRUCTIONS = """\
mrtr-harness: load and chaos testing for MCP servers that ask the user mid-call (MRTR).
validate checks a scenario file; run starts one (bounded, progress while it goes) and answers
with its verdict, exit code and results folder; report rebuilds or reads a results folder;
compare judges a run against a baseline; triage breaks a log's -32602 rejections down by
reason. A run that would execute a command (chaos by command, a token or log command), reach
anything but the embedded shop, or break (chaos, fuzzing) a host that is not this machine asks
the user first, naming what would run, and starts nothing without a yes. Paths stay inside the
server's workspace."""

RESULTS_LINE = re.compile(r"^results: (.+)$", re.MULTILINE)
"""The line a run says as it makes its results folder (`harness.run.run.Run._begin`)."""


def build_server(settings: ServerSettings) -> MCPServer[ServerSettings]:
    """The server, its tools registered; `settings` reach every request through its lifespan."""

    @asynccontextmanager
    async def lifespan(_server: MCPServer[ServerSettings]) -> AsyncIterator[ServerSettings]:
        yield settings

    server: MCPServer[ServerSettings] = MCPServer("mrtr-harness", version=harness.__version__,
                                                  instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING")
    for tool in (validate, run, report, compare, triage):
        server.add_tool(tool)
    return server


def serve_stdio(settings: ServerSettings) -> None:
    """Serve over this process's standard input and output until the client closes them."""
    build_server(settings).run("stdio")


async def validate(scenario: str, ctx: Context) -> ValidateResult:
    """Check a scenario file without running it (`mrtr-harness validate`): whether it is valid, the lines validate
    said (which rules of remote targets apply), and its errors and warnings."""
    settings = settings_of(ctx)
    try:
        regular_file(scenario, settings, "scenario")
    except Refused as exc:
        return ValidateResult(valid=False, exit_code=ExitCode.USAGE, lines=[], messages=[str(exc)])
    finished = await run_child(harness_argv("validate", _path(scenario), "--results", str(settings.results)))
    return ValidateResult(valid=finished.code == 0, exit_code=finished.code, lines=finished.stdout.splitlines(),
                          messages=finished.stderr.splitlines())


async def run(scenario: str, ctx: Context, breaking: Hosts, consent: Consent, duration: str | None = None,
              seed: int | None = None) -> RunResult:
    """Run a scenario file (`mrtr-harness run --quiet`) to its verdict: the status, the exit code, the problems and
    the files written (results folder, summary.json, report.html, junit.xml). `duration` (e.g. "20s") shortens
    the scenario's; a load longer than the server allows is refused. Progress is notified every second. A
    scenario with chaos or fuzzing against a host that is not this machine asks the user first, and starts
    nothing without a yes."""
    settings = settings_of(ctx)
    try:
        plan = plan_run(scenario, duration, seed, settings)
    except Refused as exc:
        return RunResult(started=False, refused=str(exc), exit_code=ExitCode.USAGE)
    if breaking.asks and not agreed(consent):
        return RunResult(started=False, refused=refusal(breaking, consent), exit_code=ExitCode.USAGE)
    if (tuple(plan.reaches), tuple(plan.unallowed)) != (breaking.reaches, breaking.hosts):
        return RunResult(started=False, exit_code=ExitCode.USAGE,
                         refused=f"not started: {scenario} changed while it was asked about; ask again")
    allowed = list(breaking.hosts)
    argv = ["run", _path(scenario), "--quiet", "--results", str(settings.results)]
    argv += ["--duration", duration] if duration else []
    argv += ["--seed", str(seed)] if seed is not None else []
    for host in allowed:
        argv += ["--allow-host", host]
    load = plan.scenario.duration

    async def progress(elapsed: float) -> None:
        await ctx.report_progress(round(elapsed, 1), plan.deadline,
                                  f"{plan.scenario.name}: {elapsed:.0f}s in, its load runs {load:g}s")

    finished = await run_child(harness_argv(*argv), deadline=plan.deadline, on_tick=progress)
    folder = _results_folder(finished.stderr)
    verdict = judged_by(read_verdict(folder)[0], finished.code)
    output = tail(finished.output)
    if finished.stopped:
        output += "\nresults written as Ctrl-C would"
    return RunResult(started=True, exit_code=finished.code, allowed_hosts=allowed, output=output,
                     **verdict.model_dump(), **run_files(folder).model_dump())


def _path(text: str) -> str:
    """A path as a child's command line reads it: one that starts with "-" is not taken for an option."""
    return f"./{text}" if text.startswith("-") else text


def _results_folder(stderr: str) -> Path | None:
    found = RESULTS_LINE.search(stderr)
    return Path(found.group(1).strip()).absolute() if found else None


async def report(folder: str, ctx: Context, rebuild: bool = True) -> ReportResult:
    """A run's results folder: with `rebuild` (the default) summary.json, junit.xml and report.html rebuilt from
    its journal (`mrtr-harness report DIR`, also for a killed run), else its summary.json as it stands. Answers
    the verdict, the exit code it gives and the files."""
    try:
        path = inside_workspace(folder, settings_of(ctx)).absolute()
    except Refused as exc:
        return ReportResult(rebuilt=False, exit_code=ExitCode.USAGE, output=str(exc),
                            **not_judged(str(exc)).model_dump())
    if not rebuild:
        verdict, code = read_verdict(path)
        if code is None:
            return ReportResult(rebuilt=False, exit_code=ExitCode.USAGE, **verdict.model_dump(),
                                output=f"{folder}: no readable summary.json: rebuild it from the journal "
                                       "(rebuild = true)", folder=str(path))
        return ReportResult(rebuilt=False, exit_code=code, **verdict.model_dump(), **run_files(path).model_dump())
    finished = await run_child(harness_argv("report", _path(folder)))
    output = tail(finished.output)
    if _REBUILT.format(folder=Path(_path(folder))) not in finished.stderr.splitlines():
        said = finished.stderr.strip().splitlines()[-1:] or [f"exit {finished.code}"]
        return ReportResult(rebuilt=False, exit_code=finished.code, output=output, folder=str(path),
                            **not_judged(f"nothing was rebuilt, so no verdict: {said[0]}").model_dump())
    verdict = judged_by(read_verdict(path)[0], finished.code)
    return ReportResult(rebuilt=True, exit_code=finished.code, output=output, **verdict.model_dump(),
                        **run_files(path).model_dump())


_REBUILT = "rebuilt summary.json, junit.xml and report.html in {folder}"
"""The line `report DIR` says once it has written the rebuilt verdict (`harness.cli.main._report`)."""


async def compare(baseline: str, current: str, ctx: Context, tolerances: list[str] | None = None,
                  output: str | None = None) -> CompareResult:
    """Compare a run with a baseline run (`mrtr-harness compare BASELINE CURRENT`): the regressions, the exit code
    and the files written (compare.json, compare.html, compare-junit.xml, into `output` or CURRENT). `tolerances`
    override the [compare] table, e.g. ["round_duration.p95=20%"]. The runs and `output` must be inside the
    server's workspace or results folder: an agent's path makes no folder anywhere else."""
    try:
        for folder in (baseline, current, *([output] if output else [])):
            inside_workspace(folder, settings_of(ctx))
    except Refused as exc:
        return _no_comparison(ExitCode.USAGE, f"{exc}; nothing was written")
    argv = ["compare", _path(baseline), _path(current)]
    for tolerance in tolerances or []:
        argv += ["--tolerance", tolerance]
    argv += ["--output", _path(output)] if output else []
    finished = await run_child(harness_argv(*argv))
    if finished.code not in (0, 1):  # no comparison was made: nothing regressed or held
        return _no_comparison(finished.code, tail(finished.output))
    written = compare_files(Path(output or current).absolute())
    return CompareResult(exit_code=finished.code, output=tail(finished.output), regressed=finished.code == 1,
                         **written)


def _no_comparison(code: int, why: str) -> CompareResult:
    return CompareResult(exit_code=code, output=why, regressed=None, regressions=[], warnings=[], compare_json=None,
                         compare_html=None, compare_junit=None)


async def triage(ctx: Context, path: str | None = None, text: str | None = None) -> TriageResult:
    """Break a log's -32602 rejections down by the reason its replicas logged (`mrtr-harness triage --once
    --json`), with the likely cause and next step for each: give a log file's `path` (gzipped too), or its
    `text`. A line names its replica, else the file's base name does (`text` for given text)."""
    if (path is None) == (text is None):
        raise ToolError("give either a log file's path or the log's text")
    if text is None:
        assert path is not None
        try:
            return await _triage_file(regular_file(path, settings_of(ctx), "log file"))
        except Refused as exc:
            return TriageResult(exit_code=ExitCode.TARGET, lines=0, rejections=0, by_reason={},
                                tampering_or_client_bug=[], said=[str(exc)], counts=None)
    with tempfile.TemporaryDirectory(prefix="mrtr-triage-") as folder:
        given = Path(folder) / "text.log"
        given.write_text(text, encoding="utf-8")
        return await _triage_file(given)


async def _triage_file(path: Path) -> TriageResult:
    from harness.triage.cli import Options, read_once
    from harness.triage.display import as_json

    read = await anyio.to_thread.run_sync(read_once, Options(files=[(None, path)], once=True, json=True))
    snapshot = read.snapshot
    if snapshot is None:
        return TriageResult(exit_code=read.code, lines=0, rejections=0, by_reason={}, tampering_or_client_bug=[],
                            said=read.said, counts=None)
    return TriageResult(exit_code=read.code, lines=snapshot.lines, rejections=snapshot.rejections,
                        by_reason=snapshot.by_reason(), tampering_or_client_bug=snapshot.tampering_or_client_bug(),
                        said=read.said, counts=as_json(snapshot, exit_code=read.code))
