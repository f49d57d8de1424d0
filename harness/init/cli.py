"""`mrtr-harness init URL [URL...] [-o FILE]`: a first scenario for your own server, from its tool list.

    mrtr-harness init http://127.0.0.1:8000/mcp -o scenario.toml
    mrtr-harness init https://a.example/mcp https://b.example/mcp -o mine.toml --client-id harness \
        --client-secret-env MCP_CLIENT_SECRET

Without -o the scenario goes to standard output. An existing file is kept unless --force;
nothing is written when any URL fails. Imports stay inside the handler: `--help` loads
neither the SDK nor its HTTP client.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.atomic_files import refuse_link, write_atomically
from harness.errors import UsageError
from harness.exit_codes import epilog


def add_parser(commands: argparse._SubParsersAction) -> None:
    init = commands.add_parser(
        "init", help="write a first scenario for your server from its tools (discovery, tools/list)",
        description="Discover the MCP server at each URL with the SDK's client (server/discover, else initialize), "
                    "list its tools, and write a commented scenario: an external target over every URL, a `call` "
                    "flow per tool with arguments drawn from its input schema (a `# PIN:` line marks where real "
                    "values go), leads that answer whatever the server asks, a light open load, thresholds that "
                    "hold for any healthy server, and [target.auth] when the server answers 401. The file "
                    "validates and runs as written; its first lines say what to change.",
        epilog=epilog("init"))
    init.add_argument("urls", nargs="+", metavar="URL",
                      help="the server's MCP endpoint, e.g. http://127.0.0.1:8000/mcp; several: the replicas of one "
                           "deployment (the scenario spreads rounds over them)")
    init.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                      help="write the scenario to this file (default: standard output)")
    init.add_argument("--force", action="store_true", help="with -o: replace a file that already exists")
    init.add_argument("--client-id", default=None,
                      help="for a server that answers 401: the OAuth client (client-credentials grant) init lists "
                           "tools with, written into [target.auth]")
    init.add_argument("--client-secret-env", default="MCP_CLIENT_SECRET", metavar="NAME",
                      help="the environment variable holding that client's secret (default MCP_CLIENT_SECRET); "
                           "the scenario names the variable, never the secret")
    init.set_defaults(handler=run_init)


def run_init(args: argparse.Namespace) -> int:
    """Survey every URL, then write the scenario (or print it); UsageError or TargetDown before anything is written."""
    from harness.config.urls import check_url
    from harness.init.survey import Client, survey
    from harness.init.writer import scenario_text

    output: Path | None = args.output
    if output is not None:
        refuse_link(output)  # PlantedLink: exit 2 before any URL is tried
    if output is not None and output.exists() and not args.force:
        raise UsageError(f"-o {output}: the file exists; give --force to replace it (nothing was written)")
    if output is not None and not output.parent.is_dir():
        raise UsageError(f"-o {output}: no folder {output.parent} to write it in")
    for url in args.urls:
        try:
            check_url(url)
        except ValueError as problem:
            raise UsageError(str(problem)) from None
    client = Client(args.client_id, args.client_secret_env) if args.client_id else None
    servers = survey(args.urls, client)
    text = scenario_text(servers, client, _command(args), Path.cwd() if output is None else output.parent)
    if output is None:
        sys.stdout.write(text)
        return 0
    write_atomically(output, text)
    tools = text.count("\n[[flows]]")
    print(f"wrote {output}: {tools} call flow{'s' * (tools != 1)} over {len(servers)} URL"
          f"{'s' * (len(servers) != 1)}; change the `# PIN:` arguments first, then: mrtr-harness run {output}",
          file=sys.stderr)
    return 0


def _command(args: argparse.Namespace) -> str:
    """How the file was made, as a shell line (the secret's variable name at most, never a secret)."""
    words = ["mrtr-harness", "init", *args.urls]
    if args.output is not None:
        words += ["-o", str(args.output)]
    if args.client_id:
        words += ["--client-id", args.client_id, "--client-secret-env", args.client_secret_env]
    return shlex.join(words)
