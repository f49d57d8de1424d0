"""The `mrtr-harness` command line: one entry point, a subcommand per job.

Heavy imports happen inside each handler: `run` must let Locust patch gevent before
anything else opens sockets or threads, and `validate` must stay instant. `--help`,
`validate`, `report` and `compare` load no server code (the shop's, uvicorn, Starlette, the
SDK's server side): the shop's subcommands and `mcp` import it when they are used.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import harness
from harness import foreign_text
from harness.assistant import cli as assistant_cli
from harness.capacity import cli as capacity_cli
from harness.cli import shop as shop_cli
from harness.compare import cli as compare_cli
from harness.config.remote import add_allow_host
from harness.config.thresholds import Judged
from harness.errors import ExitCode, UsageError, exit_code_of
from harness.exit_codes import epilog
from harness.hunt import cli as hunt_cli
from harness.init import cli as init_cli
from harness.load import DEFAULT_MASTER_PORT
from harness.run import load_processes
from harness.secrets import scrub
from harness.triage import cli as triage_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mrtr-harness",
        description="Load and chaos testing for MCP servers that ask the user mid-call "
                    "(Multi Round-Trip Requests, MCP 2026-07-28).",
        epilog=epilog(),
    )
    parser.add_argument("--version", action="version", version=f"mrtr-harness {harness.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    init_cli.add_parser(commands)
    _add_run(commands)
    _add_validate(commands)
    _add_schema(commands)
    _add_report(commands)
    _add_worker(commands)
    shop_cli.add_parser(commands)
    triage_cli.add_parser(commands)
    capacity_cli.add_parser(commands)
    hunt_cli.add_parser(commands)
    compare_cli.add_parser(commands)
    compare_cli.add_history_parser(commands)
    assistant_cli.add_parser(commands)
    return parser


def _add_run(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="run a scenario: target, load, chaos, reasons, invariants, verdict",
                              description="Run one scenario file and end with results and an exit code.",
                              epilog=epilog("run"))
    run.add_argument("scenario", type=Path, nargs="?",
                     help="scenario file (TOML), e.g. scenarios/smoke.toml (with --worker: taken from the master)")
    run.add_argument("--results", type=Path, default=Path("results"),
                     help="folder under which the run's results folder is made (default results/)")
    run.add_argument("--duration", help="override the scenario's duration, e.g. 20s")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    spread = load_processes.add_options(run)
    spread.add_argument("--worker", action="store_true",
                        help="be a worker of a master elsewhere (same as `mrtr-harness worker`)")
    spread.add_argument("--master-host", default="127.0.0.1", help="with --worker: the master's address")
    spread.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT,
                        help=f"with --worker: the master's port (default {DEFAULT_MASTER_PORT})")
    run.add_argument("--metrics-port", type=int, default=None,
                     help="serve the run's Prometheus metrics on 127.0.0.1:PORT while it runs")
    run.add_argument("--metrics-host", default="127.0.0.1",
                     help="address the metrics endpoint listens on (default 127.0.0.1; 0.0.0.0 in a container "
                          "that Prometheus scrapes from another)")
    run.add_argument("--metrics-linger", default="0",
                     help="with --metrics-port: keep serving the final metrics this long after the run "
                          "(e.g. 15s, so Prometheus scrapes the last counts)")
    run.add_argument("--prometheus-targets", type=Path, default=None,
                     help="with --metrics-port: write this run's file_sd files (harness.json, replicas.json, "
                          "labelled with the run id) into this folder, e.g. dashboards/targets")
    run.add_argument("--web", metavar="[HOST:]PORT", default=None,
                     help="serve Locust's web UI for the run with an MRTR tab (rejections by reason and replica, "
                          "rounds per call, flows waiting on leads, request state sizes, chaos, reconciliation), "
                          "e.g. 8089; the scenario drives the run: STOP stops it as Ctrl-C does (from the page "
                          "itself, or with the run's control token, printed with the URL), the other controls are "
                          "off. Off loopback (e.g. 0.0.0.0:8089) every request needs HTTP Basic with the password "
                          "in MRTR_WEB_PASSWORD (any user name; set it, or the run exits 2)")
    run.add_argument("--web-linger", default="0",
                     help="with --web: keep serving the final counts this long after the run (e.g. 30s)")
    run.add_argument("--otlp", metavar="URL", default=None,
                     help="export OpenTelemetry spans (a CLIENT span per round, its traceparent in params._meta; a "
                          "span per flow, every failed flow and OTEL_TRACES_SAMPLER_ARG's share of the rest, "
                          "default 0.01; the run with its chaos) and metrics (mcp.client.operation.duration) over "
                          "OTLP http/protobuf to URL, e.g. http://127.0.0.1:4318; sets OTEL_EXPORTER_OTLP_ENDPOINT "
                          "for the run and every process it starts. Without it, OpenTelemetry's own variables turn "
                          "export on: OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / "
                          "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT for one signal (OTEL_SDK_DISABLED=true or "
                          "OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER=none turn it off); OTEL_SERVICE_NAME "
                          "(default mrtr-harness), OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS are read "
                          "as the SDK reads them")
    run.add_argument("--save-figures-every", default="60s",
                     help="how often the figures folded so far are saved beside the journal (figures.json), so "
                          "`report` on a run killed later reads only what came after (default 60s)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    add_allow_host(run)
    run.add_argument("--reproduce", action="store_true",
                     help="judge the scenario's [reproduces] table (the failure it reproduces) instead of its "
                          "[expect] (the healthy outcome): exit 0 means the failure reproduced, 1 that it did not "
                          "(exit 2 if the scenario has no [reproduces])")
    baseline = run.add_argument_group("comparing with a baseline run (as `mrtr-harness compare`)")
    baseline.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                          help="a results folder of the same scenario: at the end, compare this run with it, write "
                               "compare.json, compare-junit.xml and compare.html into the results, add a `compare` "
                               "key to summary.json, and exit 1 on a regression (checked before anything starts: "
                               "exit 2 if it is missing or not a results folder of this scenario; never skipped)")
    baseline.add_argument("--first-baseline", action="store_true",
                          help="no baseline yet: this run becomes it. With --baseline DIR where DIR does not exist "
                               "yet (or is empty): the run is not compared, and if it passes its results folder is "
                               "copied to DIR for the next run's --baseline DIR to compare with (exit 2 if DIR "
                               "already holds a run: drop the flag to compare with it)")
    compare_cli.add_tolerance_options(baseline)
    run.set_defaults(handler=_run)


def _add_worker(commands: argparse._SubParsersAction) -> None:
    worker = commands.add_parser(
        "worker", help="one Locust worker of a run whose master is `run --master` (or `run --workers N`)",
        description="Connect to a run's master, take the scenario and the replica URLs from it, run this "
                    "worker's share of the flows and ship its journal back. Nothing is shared on disk, so "
                    "the worker can be on another machine. Needs MRTR_CLUSTER_SECRET, the master's value: "
                    "master and worker each prove they hold it before the master sends anything, and a "
                    "master that cannot is not obeyed. Exits 0 once the master acknowledged everything it "
                    "journaled.",
        epilog=epilog("worker"))
    worker.add_argument("--master-host", default="127.0.0.1", help="the master's address (default 127.0.0.1)")
    worker.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT,
                        help=f"the master's port (default {DEFAULT_MASTER_PORT})")
    worker.add_argument("--spool", type=Path, default=None,
                        help="folder for the journal spool (default: the system's temp folder); kept only if "
                             "the master went away before it was shipped")
    worker.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    import locust  # noqa: F401 - its import patches gevent, which must come before any socket or thread

    from harness.load.distributed import run_worker

    return run_worker(args.master_host, args.master_port, getattr(args, "spool", None))


def _add_report(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="rebuild a results folder's summary.json, junit.xml and report.html from its journal",
        description="Rebuild summary.json, junit.xml and report.html of a results folder from its journal "
                    "(also a run killed with SIGKILL: status interrupted, figures up to its last record), "
                    "print the closing table, and exit with the code the run's verdict gives (a comparison "
                    "`run --baseline` made is kept, its regression folded in).",
        epilog=epilog("report"))
    report.add_argument("folder", type=Path, help="a run's results folder, e.g. results/20261201T061500Z-smoke")
    report.add_argument("--judge", choices=[judged.value for judged in Judged], default=None,
                        help="the table to judge the figures by: expect (the healthy outcome) or reproduces (the "
                             "failure, as `run --reproduce`); default: the one the run judged (its journal says)")
    report.add_argument("--lenient", action="store_true",
                        help="exit as the rebuilt verdict says even when journal lines could not be read (they are "
                             "still counted in summary.json's journal.unreadable); without it such a verdict is not "
                             "trusted: exit 4")
    report.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    from harness.compare.cli import fold_comparison, recorded_comparison
    from harness.report import rebuild_results
    from harness.report.terminal import render_thresholds

    comparison = recorded_comparison(args.folder)
    judged = Judged(args.judge) if args.judge is not None else None
    verdict = rebuild_results(args.folder, judged)  # NotResults, UnreadableJournal, no such table: exit 2
    print(render_thresholds(verdict))
    print(f"rebuilt summary.json, junit.xml and report.html in {args.folder}", file=sys.stderr)
    code = int(verdict.exit_code)
    if comparison is not None:
        print(f"kept the comparison with {comparison.get('baseline')} (regressed: {comparison.get('regressed')})",
              file=sys.stderr)
        code = fold_comparison(args.folder, comparison, code)
    if not verdict.unreadable:
        return code
    if verdict.forged is not None:
        print(f"mrtr-harness report: {verdict.forged} (exit 4, --lenient or not)", file=sys.stderr)
        return ExitCode.HARNESS
    lines = f"{verdict.unreadable} journal line{'s' * (verdict.unreadable != 1)}"
    if args.lenient:
        print(f"mrtr-harness report: warning: the journal is damaged: {lines} could not be read; --lenient: the "
              f"verdict above, decided without them, stands (exit {code})", file=sys.stderr)
        return code
    print(f"mrtr-harness report: the journal is damaged: {lines} could not be read, so the verdict above is not "
          f"trusted (exit 4; --lenient exits as it says)", file=sys.stderr)
    return ExitCode.HARNESS


def _add_validate(commands: argparse._SubParsersAction) -> None:
    validate = commands.add_parser("validate", help="check a scenario file without running it",
                                   epilog=epilog("validate"))
    validate.add_argument("scenario", type=Path, nargs="+", help="scenario file(s)")
    validate.add_argument("--results", type=Path, default=Path("results"),
                          help="the folder `run --results` will be given (default results/): warn when the "
                               "journal may need more disk than its filesystem has free")
    add_allow_host(validate)
    validate.set_defaults(handler=_validate)


def _add_schema(commands: argparse._SubParsersAction) -> None:
    schema = commands.add_parser(
        "schema", help="print the scenario file's JSON Schema, for editors that check TOML as it is typed",
        description="Print the JSON Schema (draft 2020-12) of a scenario file, generated from the models `validate` "
                    "reads it with: keys, types, descriptions, defaults, enums and ranges. An editor that knows it "
                    "(VS Code with Even Better TOML, JetBrains, any Taplo-based one) completes keys and marks an "
                    "unknown key, a wrong type or a value out of range as it is typed. The project keeps it as "
                    "docs/scenario.schema.json; point a file at it with a first line `#:schema PATH` "
                    "(docs/scenario.md). It checks structure only: `validate` still has the last word.",
        epilog=epilog("schema"))
    schema.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from harness.config.scenario_schema import json_schema_text

    sys.stdout.write(json_schema_text())
    return 0


def _load(path: Path, args: argparse.Namespace | None = None):
    from harness.config.scenario import load_scenario

    overrides = {}
    if args is not None and getattr(args, "duration", None):
        overrides["duration"] = args.duration
    if args is not None and getattr(args, "seed", None) is not None:
        overrides["seed"] = args.seed
    return load_scenario(path, overrides)


def _validate(args: argparse.Namespace) -> int:
    from harness.config import remote
    from harness.config.cautions import cautions
    from harness.config.disk import disk_caution
    from harness.config.strict import ScenarioError

    code = ExitCode.PASSED
    for path in args.scenario:
        try:
            scenario = _load(path)
        except ScenarioError as exc:
            print(f"mrtr-harness validate: {exc}", file=sys.stderr)
            code = ExitCode.USAGE
            continue
        try:
            remote_lines = remote.check(scenario, args.allow_host, str(path))
        except ScenarioError as exc:
            print(f"mrtr-harness validate: {exc}", file=sys.stderr)
            code = ExitCode.USAGE
            continue
        print(f"{path}: ok ({scenario.name}: {scenario.target.kind} target, {scenario.load.model} model, "
              f"{len(scenario.flows)} flow kinds, {len(scenario.chaos)} chaos steps, "
              f"{len(scenario.expect)} thresholds{_reproduces_count(scenario)})")
        for line in remote_lines:
            print(f"{path}: remote: {line}")
        for caution in [*cautions(scenario), disk_caution(scenario, args.results)]:
            if caution is not None:
                print(f"{path}: warning: {caution}", file=sys.stderr)
        if scenario.target.auth is not None:
            from harness.auth.token_sources import missing_secret

            missing = missing_secret(scenario.target)
            if missing:
                print(f"{path}: warning: {missing}; `mrtr-harness run` exits 2 until it is", file=sys.stderr)
    return code


def _reproduces_count(scenario) -> str:
    """What `validate` says of a [reproduces] table: how many thresholds the failure is stated in."""
    return "" if scenario.reproduces is None else f", {len(scenario.reproduces)} in [reproduces]"


def _run(args: argparse.Namespace) -> int:
    if args.worker:
        if args.scenario is not None:
            print("mrtr-harness run --worker: the scenario comes from the master; the file given is not read",
                  file=sys.stderr)
        return _worker(args)
    if args.scenario is None:
        raise UsageError("a scenario file is needed (only --worker takes it from the master)")
    import gc

    gc.disable()  # start-up makes many objects and little garbage: no collections until the load starts (Run._drive)
    import locust  # noqa: F401 - its import patches gevent, which must come before any socket or thread

    from harness.config.durations import parse_duration_option
    from harness.config.remote import say_remote
    from harness.run.run import Run, RunOptions

    scenario = _load(args.scenario, args)  # ScenarioError: exit 2, nothing started
    judged = Judged.REPRODUCES if args.reproduce else Judged.EXPECT
    scenario.judged_table(judged)  # --reproduce on a scenario with no [reproduces]: exit 2, nothing started
    say_remote(scenario, args.allow_host, str(args.scenario))  # chaos, fuzzing, secrets off this machine: exit 2
    if scenario.target.auth is not None:
        from harness.auth.token_sources import check

        check(scenario.target)  # a secret's variable unset (not embedded), a token file with no token: exit 2
    linger = parse_duration_option("--metrics-linger", args.metrics_linger)
    web_linger = parse_duration_option("--web-linger", args.web_linger)
    web = _web_address(args.web)
    web_password = _web_password(web)
    save_every = parse_duration_option("--save-figures-every", args.save_figures_every)
    if save_every <= 0:
        raise UsageError("--save-figures-every must be more than 0, e.g. 60s")
    spread = load_processes.options(args)
    if scenario.target.kind == "stdio" and (spread["workers"] or spread["remote_workers"]):
        raise UsageError("a stdio target's servers are children of the process that drives them: its load runs in "
                         "this process (no --workers or --master)")
    if args.prometheus_targets is not None and args.metrics_port is None:
        raise UsageError("--prometheus-targets needs --metrics-port")
    problem = compare_cli.check_baseline_options(args, scenario)
    if problem is not None:
        raise UsageError(problem)
    if args.otlp is not None:
        _turn_on_otlp(args.otlp)  # before anything starts: every child process inherits the variables
    options = RunOptions(results_root=args.results, progress=not args.quiet, metrics_port=args.metrics_port,
                         metrics_host=args.metrics_host,
                         metrics_linger=linger, prometheus_targets=args.prometheus_targets,
                         web=web, web_linger=web_linger, web_password=web_password,
                         save_figures_every=save_every, judged=judged, **spread)
    run = Run(scenario, args.scenario.read_text(), options)
    code = run.execute()
    if args.baseline is None:
        return code
    if args.first_baseline:
        return compare_cli.keep_first_baseline(run.folder, args.baseline, code)
    return compare_cli.compare_after_run(args.baseline, run.folder, code, args)


def _turn_on_otlp(url: str) -> None:
    """`--otlp URL`: an http(s) URL with a host, else exit 2; then OpenTelemetry's own variables, for this process and
    its children (`harness.telemetry.switch.turn_on`)."""
    from urllib.parse import urlsplit

    from harness.telemetry import switch

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--otlp needs an http(s) URL of an OTLP receiver, e.g. http://127.0.0.1:4318 (got {url!r})")
    switch.turn_on(url)


LOG_LEVEL_ENV = "MRTR_LOG_LEVEL"
"""The harness's diagnostics (module loggers under `harness`) at this level and above reach stderr; default WARNING."""


class ScrubbingFormatter(logging.Formatter):
    """A log line (its traceback too) through the harness's one scrubber, and shown as text (`foreign_text.block`):
    a message may quote a server or command."""

    def format(self, record: logging.LogRecord) -> str:
        return foreign_text.block(scrub(super().format(record)))


def configure_logging() -> None:
    """The harness's module loggers write to stderr, apart from the terminal UI (progress line, closing table).

    The shop's processes (`mrtr-harness shop ...`) keep the logging the shop sets up: their
    lines are what the run's log collector reads.
    """
    logger = logging.getLogger("harness")
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ScrubbingFormatter("mrtr-harness: %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(os.environ.get(LOG_LEVEL_ENV, "WARNING").upper())
    logger.propagate = False


def _web_address(text: str | None) -> tuple[str, int] | None:
    """`--web [HOST:]PORT`; a bad one is a usage error before anything starts."""
    if text is None:
        return None
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--web: {text!r} is not [HOST:]PORT (e.g. 8089, or 0.0.0.0:8089)")
    return host or "127.0.0.1", int(port)


def _web_password(web: tuple[str, int] | None) -> str | None:
    """The live page's password when it listens off loopback (`MRTR_WEB_PASSWORD`, unset: exit 2, nothing started);
    None on loopback, where its control token and origin check suffice."""
    from harness.config.urls import is_loopback
    from harness.run.page_guard import WEB_PASSWORD_ENV
    from harness.secrets import env_secret

    if web is None:
        return None
    host, port = web
    if is_loopback(f"http://{f'[{host}]' if ':' in host else host}:{port}/"):
        return None
    return env_secret(WEB_PASSWORD_ENV, throwaway=False,
                      what=f"the password of the page --web serves on {host}:{port} (off this machine, every request "
                           "needs it: HTTP Basic, any user name)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "shop":
        configure_logging()
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the one place where an error becomes an exit code
        code = exit_code_of(exc)
        if code == ExitCode.HARNESS:  # a bug of the harness: the traceback, then one line, never exit 1
            import traceback

            print(foreign_text.block(scrub(traceback.format_exc())), end="", file=sys.stderr)
            print(foreign_text.block(scrub(f"mrtr-harness: harness error: {type(exc).__name__}: {exc}")),
                  file=sys.stderr)
        else:  # an error's text may quote a server, a log or a file: shown as text, never as terminal codes
            print(foreign_text.block(scrub(f"mrtr-harness {args.command}: {exc}")), file=sys.stderr)
        return code
