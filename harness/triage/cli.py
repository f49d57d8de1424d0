"""`mrtr-harness triage`: options, checked once at the edge, then a session, a display and an exit code.

Only argparse is imported at module level: `harness.cli.main` builds every subcommand's
parser on each start, and the heavy parts (sources, prometheus-client, docker) load only
when triage runs.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ExitCode, UsageError
from harness.exit_codes import epilog

if TYPE_CHECKING:
    from harness.config.logs import LabelledFile
    from harness.triage.counts import Snapshot

PROG = "mrtr-harness triage"
TICK_SECONDS = 0.5
"""How often unfinished rich records are checked for staleness (and counted), whatever the redraw interval."""

DESCRIPTION = """\
Read a running deployment's logs and break every -32602 "Invalid or expired requestState"
down by the reason the replica logged (the client never sees it), per replica, over the
last window and the whole run, with the likely cause and the next step for each reason.

Recognises the Python SDK's rejection line in plain logs, in the SDK's own rich console output
(wrapped and padded) and in JSON logs, and other servers' by their reason adapter (--adapter
typescript-sdk, or a user's adapter in TOML; without --adapter, told from the lines and said
when it is not the Python SDK's), and a user's adapter's [unasked] line, a -32021 refusal
(counted apart: neither SDK logs one); everything else is skipped. A line's replica is the
one its source names (a container, a file given as PATH@LABEL), else its `kubectl --prefix`
or `docker compose logs` prefix, else its own `replica=` or JSON replica/pod/host field,
else the base name of its file (logs/r1.log, r1.log.1 and r1.log.2.gz are all r1).

Read once (--once), files may be gzipped (rotated logs), the same file given twice is
read once, and the last window is the end of the logs by the lines' own time.
--since/--until keep the lines written in between (by their own time; a rejection whose
line has no time is then left out, and counted as undated).

examples:
  mrtr-harness triage --file logs/r1.log@r1 --file logs/r2.log@r2
  mrtr-harness triage --kubernetes mrtr:app.kubernetes.io/name=mcp
  mrtr-harness triage --command "kubectl logs -f -l app=shop --prefix --tail=0 --max-log-requests=20"
  journalctl -f -o json -u shop | mrtr-harness triage --stdin
  mrtr-harness triage --docker-service replica1 replica2 replica3 --docker-project mrtr --metrics-port 9465
  mrtr-harness triage --once --json --file results/run/logs/r1.log > rejections.json
  mrtr-harness triage --once --adapter typescript-sdk --file /var/log/mcp-ts/r1.log@r1
  mrtr-harness triage --once --since 2026-11-30T05:00Z --until 2026-11-30T06:00Z --file logs/r1.log*
"""

def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `triage` to the `mrtr-harness` subcommands."""
    triage = commands.add_parser("triage", help="break -32602 down by the reason replicas logged, live, from their "
                                                "logs", description=DESCRIPTION, epilog=epilog("triage"),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sources = triage.add_argument_group("sources (at least one; any mix)")
    sources.add_argument("--file", action="extend", nargs="+", default=[], metavar="PATH[@LABEL]",
                         help="log files, followed like tail -F (rotation included), or read once with --once "
                              "(gzipped ones too); @LABEL names its replica, as in a scenario's logs = "
                              "[\"file:PATH@LABEL\"], else lines name it or the file's base name does "
                              "(repeatable; LABEL=PATH, the older form, is still read but deprecated)")
    sources.add_argument("--command", action="append", default=[], metavar="CMD",
                         help="a command whose output is a log stream, e.g. \"kubectl logs -f ...\" or "
                              "\"journalctl -f ...\" (split like a shell would, run without one; repeatable)")
    sources.add_argument("--kubernetes", action="append", default=[], metavar="[NAMESPACE:]SELECTOR",
                         help="every pod a label selector finds, followed as pods are replaced (a watch, and one "
                              "kubectl log stream per pod, each its own replica by pod name), e.g. "
                              "mrtr:app.kubernetes.io/name=mcp; live only (repeatable)")
    sources.add_argument("--stdin", action="store_true", help="read standard input until it ends")
    sources.add_argument("--docker-service", action="extend", nargs="+", default=[], metavar="NAME",
                         help="every container of these compose services (label com.docker.compose.service), "
                              "each its own replica by container name (repeatable: the shipped stack's are "
                              "replica1 replica2 replica3)")
    sources.add_argument("--docker-project", metavar="P",
                         help="with --docker-service: only this compose project (label com.docker.compose.project)")
    triage.add_argument("bare", nargs="*", help=argparse.SUPPRESS)  # a log named without --file: hinted, not taken
    triage.add_argument("--adapter", metavar="NAME|PATH",
                        help="how the server logs a rejection: a built-in adapter (python-sdk, typescript-sdk) or "
                             "the path of a user's adapter in TOML (docs/your-deployment.md); default: told from "
                             "the lines themselves and said in one line")
    output = triage.add_argument_group("output")
    output.add_argument("--once", action="store_true",
                        help="read every source to its end, print a summary and exit (files from their start, "
                             "containers' whole logs, a command until it exits: leave out its -f)")
    output.add_argument("--json", action="store_true",
                        help="print the counts by reason and replica as JSON at the end instead of tables")
    output.add_argument("--since", metavar="TIME",
                        help="count only lines written at or after TIME, by their own time: an ISO 8601 time "
                             "(2026-11-30T05:00:00Z; without a zone, local time) or a duration ago (15m)")
    output.add_argument("--until", metavar="TIME", help="count only lines written at or before TIME (as --since)")
    output.add_argument("--window", default="60s",
                        help="the recent window the live table sets against the whole run (default 60s)")
    output.add_argument("--interval", default=None,
                        help="how often the live table is redrawn (default 1s on a terminal, 10s otherwise)")
    output.add_argument("--metrics-port", type=int, default=None, metavar="P",
                        help="serve mrtr_request_state_rejections_total{replica,reason} (every reason at 0 for "
                             "every known replica) on HOST:P/metrics while triage runs")
    output.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="address the metrics endpoint listens on (default 127.0.0.1)")
    triage.set_defaults(handler=main)


@dataclass
class Options:
    files: list[tuple[str | None, Path]] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    kubernetes: list[tuple[str | None, str]] = field(default_factory=list)
    """(namespace or None, selector) of each `--kubernetes`."""
    stdin: bool = False
    docker_services: list[str] = field(default_factory=list)
    docker_project: str | None = None
    once: bool = False
    json: bool = False
    window: float = 60.0
    interval: float | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    since: float | None = None
    until: float | None = None
    notices: list[str] = field(default_factory=list)
    """What the user should change though triage runs: a deprecated form."""
    adapter: Any = None
    """The reason adapter (`harness.logs.adapters.Adapter`) named by `--adapter`; None: detected."""


def parse_options(args: argparse.Namespace) -> Options:
    bare = getattr(args, "bare", None)
    if bare:
        raise UsageError(f"{bare[0]!r} is not an option: name a log with --file, e.g. mrtr-harness triage --once "
                         f"--file {shlex.join(bare)} (--once: read it to its end and exit)")
    options = Options(stdin=args.stdin, once=args.once, json=args.json, metrics_host=args.metrics_host)
    if getattr(args, "adapter", None) is not None:
        from harness.logs.adapters import AdapterError, adapter_named

        try:
            options.adapter = adapter_named(args.adapter)
        except AdapterError as exc:
            raise UsageError(f"--adapter: {exc}") from None
    for value in args.file:
        given = _file_argument(value)
        if given.old_form:
            options.notices.append(f"--file {value}: LABEL=PATH is deprecated; write {given.new_form}, the form a "
                                   "scenario's logs entries use")
        options.files.append((given.label, given.path))
    for command in args.command:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise UsageError(f"--command {command!r}: {exc}") from None
        if not argv:
            raise UsageError("--command: empty command")
        options.commands.append(command)
    for entry in args.kubernetes:
        options.kubernetes.append(_selector(entry, once=args.once))
    if args.docker_project is not None and not args.docker_service:
        raise UsageError("--docker-project needs --docker-service")
    if any(not service.strip() for service in args.docker_service):
        raise UsageError("--docker-service: empty service name")
    options.docker_services = list(dict.fromkeys(args.docker_service))
    options.docker_project = args.docker_project
    if not (options.files or options.commands or options.stdin or options.docker_services or options.kubernetes):
        raise UsageError("no source: give --file, --command, --kubernetes, --stdin or --docker-service")
    options.window = _duration("--window", args.window, minimum=1.0)
    now = time.time()
    options.since = None if args.since is None else _moment("--since", args.since, now)
    options.until = None if args.until is None else _moment("--until", args.until, now)
    if options.since is not None and options.until is not None and options.since > options.until:
        raise UsageError(f"--since {args.since} is after --until {args.until}: no line could count")
    if args.interval is not None:
        options.interval = _duration("--interval", args.interval, minimum=0.05)
    if args.metrics_port is not None:
        if not 0 < args.metrics_port < 65536:
            raise UsageError(f"--metrics-port: {args.metrics_port} is not a TCP port (1-65535)")
        if options.once:
            raise UsageError("--metrics-port serves live counts; it cannot be combined with --once")
        options.metrics_port = args.metrics_port
    return options


def _file_argument(value: str) -> LabelledFile:
    from harness.config.logs import parse_labelled_file

    try:
        return parse_labelled_file(value)
    except ValueError as exc:
        raise UsageError(f"--file: {exc}") from None


def _selector(entry: str, *, once: bool) -> tuple[str | None, str]:
    from harness.config.logs import kubernetes_selector

    if once:
        raise UsageError("--kubernetes follows pods as they come and go; it cannot be read --once (read a "
                         "command's output instead: --command \"kubectl logs -l ... --prefix\")")
    try:
        return kubernetes_selector(entry)
    except ValueError as exc:
        raise UsageError(f"--kubernetes: {exc}") from None


def _duration(option: str, text: str, *, minimum: float) -> float:
    from harness.config.durations import parse_duration_option

    try:
        seconds = parse_duration_option(option, text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if seconds < minimum:
        raise UsageError(f"{option}: {text!r} is shorter than {minimum:g}s")
    return seconds


def _moment(option: str, text: str, now: float) -> float:
    """Epoch seconds of an ISO 8601 time (without a zone: local time, as log stamps are read) or `now` minus
    a duration."""
    from datetime import datetime

    from harness.config.durations import parse_duration

    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise UsageError(f"{option}: {text!r} is neither a time (2026-11-30T05:00:00Z) nor a duration ago "
                         "(15m)") from None


def base_label(path: Path) -> str | None:
    """The replica a file's name stands for: its base name without log, rotation and compression suffixes
    (logs/r1.log, r1.log.1, r1.log.2.gz, r1.jsonl: r1)."""
    name = path.name
    for suffix in (".gz",):
        name = name.removesuffix(suffix)
    name = re.sub(r"\.\d+$", "", name)
    name = re.sub(r"\.(log|txt|json|jsonl|out)$", "", name)
    label = "".join(ch for ch in name if ch.isprintable() and not ch.isspace())[:64]
    return label or None


def main(args: argparse.Namespace) -> int:
    try:
        options = parse_options(args)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    return run(options)


def run(options: Options) -> int:
    """Open every source, read them into one count while showing it, and return the exit code."""
    from harness.logs.sources import SourceError
    from harness.processes.children import sigterm_as_ctrl_c
    from harness.triage import display
    from harness.triage.counts import LiveCounts
    from harness.triage.session import Session

    for warning in [*options.notices, *_drop_duplicate_files(options)]:
        print(f"{PROG}: {warning}", file=sys.stderr)
    sources = _sources(options)
    try:
        for notice in _open_all(sources):
            print(f"{PROG}: {notice}", file=sys.stderr)
    except SourceError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return _source_error_code(exc)
    hooks: dict[str, Any] = {}
    server = None
    if options.metrics_port is not None:
        try:
            server, hooks = _serve_metrics(options.metrics_host, options.metrics_port)
        except OSError as exc:
            for source in sources:
                source.close()
            print(f"{PROG}: --metrics-port: cannot listen on {options.metrics_host}:{options.metrics_port}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return ExitCode.USAGE
    counts = LiveCounts(options.window, by_line_time=options.once, since=options.since, until=options.until, **hooks)
    session = Session(sources, counts, options.adapter)
    names = [source.name for source in sources]
    screen = None if options.once or options.json else display.Screen()
    session.start()
    try:
        with sigterm_as_ctrl_c():  # SIGTERM (systemd, kubernetes, `timeout`) ends triage like Ctrl-C: with the summary
            interval = options.interval or (1.0 if screen is None or screen.terminal else 10.0)
            shown = time.monotonic()
            if screen is not None:
                screen.show(display.render_live(counts.snapshot(), sources=names))
            while not session.wait(min(interval, TICK_SECONDS)):
                session.tick()
                if screen is not None and time.monotonic() - shown >= interval:
                    shown = time.monotonic()
                    screen.show(display.render_live(counts.snapshot(), sources=names))
    except KeyboardInterrupt:
        pass
    finally:
        session.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
    snapshot = counts.snapshot()
    for line in [*session.formats, *session.failures]:
        print(f"{PROG}: {line}", file=sys.stderr)
    code = _exit_code(snapshot, session.failures)
    if options.json:
        sys.stdout.write(display.render_json(snapshot, exit_code=code))
    else:
        sys.stdout.write(display.render_summary(snapshot, sources=names))
    sys.stdout.flush()
    return code


@dataclass(frozen=True)
class OnceRead:
    """What reading every source once to its end gave: the counts (None when a source could not be opened), the
    exit code, and what the command line would have said on stderr (notices, a source's error or failures)."""

    snapshot: Snapshot | None
    code: int
    said: list[str]


def read_once(options: Options) -> OnceRead:
    """`--once` without a screen or a stream to write on: every source read to its end into one count.

    What `mrtr-harness mcp`'s triage tool answers with; the same sources, parsers, counts and
    exit code as `run`, which prints them instead.
    """
    from harness.logs.sources import SourceError
    from harness.triage.counts import LiveCounts
    from harness.triage.session import Session

    options.once = True
    said = [*options.notices, *_drop_duplicate_files(options)]
    sources = _sources(options)
    try:
        said += _open_all(sources)
    except SourceError as exc:
        return OnceRead(None, _source_error_code(exc), [*said, str(exc)])
    counts = LiveCounts(options.window, by_line_time=True, since=options.since, until=options.until)
    session = Session(sources, counts, options.adapter)
    session.start()
    try:
        while not session.wait(TICK_SECONDS):
            session.tick()
    finally:
        session.stop()
    snapshot = counts.snapshot()
    return OnceRead(snapshot, _exit_code(snapshot, session.failures), [*said, *session.formats, *session.failures])


def _open_all(sources: list[Any]) -> list[str]:
    """Open every source; the notices they gave. On a SourceError every source is closed and it is raised."""
    from harness.logs.sources import SourceError

    notices = []
    try:
        for source in sources:
            notice = source.open()
            if notice:
                notices.append(notice)
    except SourceError:
        for source in sources:
            source.close()
        raise
    return notices


def _source_error_code(exc: Exception) -> int:
    """A source that could not be opened: a file that is no log is the user's (2), anything else the source's (3)."""
    from harness.logs.sources import NotALog

    return ExitCode.USAGE if isinstance(exc, NotALog) else ExitCode.TARGET


def _exit_code(snapshot: Snapshot, failures: list[str]) -> int:
    """1 for a reason that means tampering or a client bug, else 3 when a source failed, else 0."""
    return ExitCode.FAILED if snapshot.tampering_or_client_bug() else \
        ExitCode.TARGET if failures else ExitCode.PASSED


def _drop_duplicate_files(options: Options) -> list[str]:
    """Keep each file once (the same inode, or the same resolved path for one not there yet); say which went."""
    kept: dict[tuple[int, int] | Path, Path] = {}
    files: list[tuple[str | None, Path]] = []
    warnings = []
    for label, path in options.files:
        try:
            stat = path.stat()
            identity: tuple[int, int] | Path = (stat.st_dev, stat.st_ino)
        except OSError:
            identity = path.resolve()
        if identity in kept:
            warnings.append(f"{path} is the same file as {kept[identity]}: read once")
            continue
        kept[identity] = path
        files.append((label, path))
    options.files = files
    return warnings


def _sources(options: Options) -> list[Any]:
    from harness.logs.sources import CommandSource, ComposeServiceSource, FileSource, StdinSource

    follow = not options.once
    sources: list[Any] = []
    for label, path in options.files:
        source = FileSource(path, label, follow=follow)
        source.fallback_replica = base_label(path)
        sources.append(source)
    sources += [CommandSource(command) for command in options.commands]
    if options.stdin:
        sources.append(StdinSource())
    since = time.time()
    sources += [ComposeServiceSource(service, options.docker_project, follow=follow, since=since)
                for service in options.docker_services]
    if options.kubernetes:
        from harness.logs.kubernetes import KubernetesSource

        sources += [KubernetesSource(selector, namespace, since=since, pass_env=None)
                    for namespace, selector in options.kubernetes]
    return sources


def _serve_metrics(host: str, port: int) -> tuple[Any, dict[str, Any]]:
    """Serve the rejection counter of `harness.metrics` (the one the dashboards read), and only it."""
    from prometheus_client import CollectorRegistry, start_http_server

    from harness.metrics.registry import RunMetrics

    run_metrics = RunMetrics()
    exported = CollectorRegistry()
    exported.register(run_metrics.rejections)
    server, _ = start_http_server(port, addr=host, registry=exported)
    hooks = {"on_count": run_metrics.rejection,
             "on_replica": lambda replica: run_metrics.preset(replicas=[replica])}
    return server, hooks
