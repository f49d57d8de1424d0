"""`mrtr-harness mcp`: serve the harness's jobs as MCP tools over standard input and output.

Only argparse at module level: the server (the SDK's server side) is imported when the
command runs, so `--help`, `validate`, `report` and `compare` load none of it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.exit_codes import epilog

DEFAULT_MAX_DURATION = "10m"

DESCRIPTION = """\
Serve the harness as an MCP server over standard input and output (the SDK's own server),
for an assistant's client to start: tools to validate a scenario, run one (bounded by
--max-duration, with progress notifications), rebuild or read a run's report, compare two
runs, and triage a log. Each answers with structured content: the verdict, the exit code
and the paths it wrote. A run is a child process (`mrtr-harness run ... --quiet`), so the
server stays free while it goes.

Before a run executes a command ([target.commands], a `command` chaos step, a token or
log command), reaches anything but the embedded shop (an external target, loopback URLs
too; Docker; a tokens file; a client secret's endpoint), or breaks (chaos or fuzzing) a
host that is not this machine and that the scenario's [target] allow does not name, the run
tool asks the user in the call itself (MRTR elicitation: "Start SCENARIO? It would reach
beyond the embedded shop: ..."), naming each command as the scenario writes it; anything
but a yes refuses the run with nothing started, and a yes passes the remote hosts as
--allow-host. Every path a tool is given (scenario, results folder, log) must be inside the
workspace (--workspace, default the folder the server starts in) or --results. Register it
with a client as the command `mrtr-harness mcp` (docs/running.md); --config prints that
registration with absolute paths (the command in this installation's venv, the results
folder and the workspace), as a client that starts it without your shell's PATH needs.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `mcp` to the `mrtr-harness` subcommands."""
    mcp = commands.add_parser("mcp", help="serve the harness to an assistant as an MCP server over stdio",
                              description=DESCRIPTION, epilog=epilog("mcp"),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    mcp.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                     help="folder under which the run tool makes each run's results folder (default results/)")
    mcp.add_argument("--max-duration", default=DEFAULT_MAX_DURATION, metavar="DURATION",
                     help="the longest load a run tool call may ask for, its scenario's duration or the one given "
                          f"(default {DEFAULT_MAX_DURATION}); a longer one is refused with nothing started")
    mcp.add_argument("--workspace", type=Path, default=Path(), metavar="DIR",
                     help="the folder every path a tool is given must be inside, symbolic links followed (beside "
                          "--results; default: the folder the server starts in)")
    mcp.add_argument("--config", action="store_true",
                     help="print the client's registration of this server as JSON (mcpServers), every path "
                          "absolute (the command as this installation runs it, --results, --workspace as cwd), "
                          "and exit: a client starts the command without your shell's PATH or an activated venv")
    mcp.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    """Serve until the client closes standard input (or, with --config, print the client's registration)."""
    from harness.config.durations import parse_duration_option

    max_duration = parse_duration_option("--max-duration", args.max_duration)
    if max_duration <= 0:
        raise UsageError("--max-duration must be more than 0, e.g. 10m")
    if not args.workspace.is_dir():
        raise UsageError(f"--workspace {args.workspace}: not a folder")
    if getattr(args, "config", False):
        print(json.dumps(client_config(args.results, args.max_duration, args.workspace), indent=2))
        return 0
    from harness.assistant.plan import ServerSettings
    from harness.assistant.server import serve_stdio

    serve_stdio(ServerSettings(results=args.results, max_duration=max_duration, workspace=args.workspace))
    return 0


def client_config(results: Path, max_duration: str, workspace: Path) -> dict[str, Any]:
    """The `mcpServers` entry a client (Claude Desktop, Cursor; VS Code names the table `servers`) starts this server
    with: the console script beside this interpreter (a venv's bin/, never resolved out of it), or the interpreter
    with `-m harness`, and the folders made absolute, as a client started from anywhere needs them."""
    interpreter = Path(os.path.abspath(sys.executable))
    script = interpreter.parent / "mrtr-harness"
    command, head = (str(script), []) if script.is_file() else (str(interpreter), ["-m", "harness"])
    return {"mcpServers": {"mrtr-harness": {
        "command": command,
        "args": [*head, "mcp", "--results", os.path.abspath(results), "--max-duration", max_duration],
        "cwd": os.path.abspath(workspace)}}}
