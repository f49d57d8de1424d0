"""The scenario `init` writes: a commented TOML file that validates and runs as written, and says what to change.

One external target with every URL (each a replica: rounds are spread over them), a
`call` flow per tool every URL lists, its arguments drawn from the tool's input schema
(`harness.init.arguments`) under a `# PIN:` line, leads that answer whatever form the
server asks from its own schema, a modest open load for a short first run, and `[expect]`
thresholds that hold for any healthy server: flows finished, every round answered in time,
no call stuck asking. Nothing the harness knows only of its reference shop (refunds,
ledger invariants, its rejection reasons) is written. A server that answered 401 gets
`[target.auth]` naming the variable that holds the secret, never the secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from harness import foreign_text
from harness.config import toml_text
from harness.config.scenario import parse_scenario
from harness.config.scenario_schema import shipped_schema
from harness.config.strict import ScenarioError
from harness.errors import UsageError
from harness.init.arguments import draw_arguments
from harness.init.survey import Client, Server, Tool
from harness.vocabulary import HANDSHAKE_REVISIONS, MODERN_REVISION

ARRIVAL_RATE = 2
"""Flows started per second, all tools together: enough to see every tool called, light on any server."""
DURATION = "20s"
"""The load's length: a first look, not a test."""
PRINCIPALS = 5
"""Distinct leads (OAuth subjects) the load uses with [target.auth]."""


def scenario_text(servers: Sequence[Server], client: Client | None, command: str, folder: Path) -> str:
    """The whole scenario file for the surveyed `servers` (at least one), `command` being how it was made, to be
    kept in `folder` (its schema directive is a path from there)."""
    first = servers[0]
    common, partial = _tools(servers)
    if not common:
        from harness.init.survey import NotMcp

        raise NotMcp(f"{first.url} lists no tool{' every URL lists' if len(servers) > 1 else ''}: "
                     "a scenario needs at least one tool to call")
    parts = [schema_directive(folder) + _header(servers, command), _top(first), _target(servers, client),
             _load(len(servers)), _leads(),
             _hosts(servers), _flows_intro(partial), *(_flow(tool) for tool in common), _expect()]
    text = "\n".join(part for part in parts if part)
    _reads_back(text, servers, [tool.name for tool in common], client)
    return text


class WrittenWrong(UsageError):
    """The scenario written from a server's listing does not read back as init meant it (exit 2: nothing is
    written). Whatever a server names or describes, the file must say only what init wrote."""


def _reads_back(text: str, servers: Sequence[Server], tools: list[str], client: Client | None) -> None:
    """Parse `text` with the scenario model, as `validate` does, and check it holds what init meant: the URLs given,
    a `call` flow per tool listed, `[target.auth]` only where a server answered 401 and init was given a client,
    no command, log source or chaos. WrittenWrong otherwise, before anything is written."""
    try:
        scenario = parse_scenario(text, "the scenario init wrote")
    except ScenarioError as exc:
        raise WrittenWrong(f"{servers[0].url}: the scenario written from its tool list does not validate "
                           f"({foreign_text.line(exc, 300)}); nothing written") from None
    auth = scenario.target.auth
    wanted_auth = client is not None and any(server.oauth is not None for server in servers)
    meant = (scenario.target.urls == [server.url for server in servers]
             and [getattr(flow, "tool", None) for flow in scenario.flows] == tools
             and (auth is None if not wanted_auth else auth is not None and auth.kind == "client-credentials")
             and not scenario.target.commands and not scenario.target.logs and not scenario.chaos)
    if not meant:
        raise WrittenWrong(f"{servers[0].url}: the scenario written from its tool list does not read back as init "
                           "wrote it (what the server listed changed its meaning); nothing written")


def _tools(servers: Sequence[Server]) -> tuple[list[Tool], dict[str, list[str]]]:
    """Tools every URL lists (the first URL's order), and the others with the URLs that lack them."""
    named = [{tool.name for tool in server.tools} for server in servers]
    common = [tool for tool in servers[0].tools if all(tool.name in names for names in named)]
    everywhere = {tool.name for tool in common}
    partial: dict[str, list[str]] = {}
    for server in servers:
        for tool in server.tools:
            if tool.name not in everywhere and tool.name not in partial:
                partial[tool.name] = [other.url for other, names in zip(servers, named, strict=True)
                                      if tool.name not in names]
    return common, partial


def schema_directive(folder: Path, schema: Path | None = None) -> str:
    """The first line, which editors (Taplo, Even Better TOML) read to check the file as it is typed: the path from
    `folder` to the checkout's docs/scenario.schema.json, relative so the checkout and the file can move together;
    `scenario.schema.json` beside the file where the harness was installed without its docs/ (the header says how
    to write it). `schema`: the schema file (default: the checkout's)."""
    schema = shipped_schema() if schema is None else schema
    if not schema.is_file():
        return "#:schema scenario.schema.json\n"
    try:
        path = Path(os.path.relpath(schema, folder.resolve())).as_posix()
    except ValueError:  # another drive (Windows): no relative path
        path = schema.as_uri()
    return f"#:schema {path}\n"


def _said(text: object, limit: int = 100) -> str:
    """What a server said (a name, a description, a schema's words), fit for a `#` comment: one line, no control
    character, so nothing it holds can end the comment and become TOML."""
    return foreign_text.toml_comment(text, limit)


def _header(servers: Sequence[Server], command: str) -> str:
    first = servers[0]
    title = _said(first.name or urlsplit(first.url).netloc)
    return f"""\
# A first scenario for {title}, written by `{_said(command, 300)}`
# from what the server listed (MCP {_said(first.protocol, 40)}, {len(first.tools)} tools).
#
# What to change first:
#   1. The arguments under each `# PIN:` line. Their shape comes from the tool's input schema, but
#      values marked "made up" are placeholders: put real ones (an id that exists, a real city), or a
#      list of tables to pick one from per call: arguments = [{{ id = "a" }}, {{ id = "b" }}].
#   2. Drop the flows of tools that must not run under load (a tool that changes real data), or
#      give them a weight (their share of the flows started).
#   3. [expect]: your SLO (round_duration p95) and, once the arguments are real, completed_ratio.
#   4. [load] arrival_rate and `duration` (a light, short first run here), then [[chaos]] steps.
#   5. [target] logs: where each replica logs, so the run can say why a retry was refused (-32602).
# Check and run it:   mrtr-harness validate FILE && mrtr-harness run FILE
# Every key: docs/scenario.md; this command and what to do next: docs/running.md ("Start from your server").
# The first line points editors at the file's JSON Schema (`mrtr-harness schema` prints it): keys complete and
# typos show as you type.
"""


def _top(first: Server) -> str:
    return f"""\
name = {toml_text.string(_name(first))}
description = {toml_text.string(f"written by mrtr-harness init from {first.url}")}
seed = 1
duration = "{DURATION}"         # how long the load runs; flows in flight get `grace` to finish
grace = "10s"
"""


def _name(server: Server) -> str:
    """A results-folder name from the server's name, else its host."""
    text = server.name or urlsplit(server.url).hostname or "server"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.").lower()
    return slug[:60] or "server"


def _target(servers: Sequence[Server], client: Client | None) -> str:
    urls = toml_text.value([server.url for server in servers])
    lines = ["[target]",
             'kind = "external"        # a deployment the harness does not start: it only sends it load',
             f"urls = {urls}",
             "# Each URL is a replica (r1, r2, ... in that order), or give one balancer URL. A state minted on",
             "# one replica can come back on another: replicas must share their requestState key.",
             '# logs = ["file:/var/log/mcp/r1.log@r1"]   # each replica\'s log: every -32602 matched to its reason',
             "# [target.commands] restart = [...]        # for chaos on your deployment: docs/your-deployment.md"]
    oauth = next((server.oauth for server in servers if server.oauth is not None), None)
    if oauth is not None and client is not None:
        lines += ["",
                  "[target.auth]              # the server answered 401: each lead gets a token from "
                  + _said(oauth.issuer),
                  'kind = "client-credentials"',
                  f"client_id = {toml_text.string(client.client_id)}",
                  f"client_secret_env = {toml_text.string(client.secret_env)}   # the NAME of the variable with "
                  "the secret (export it before `run`), never the secret",
                  f"principals = {PRINCIPALS}            # distinct leads (token subjects) the load uses",
                  f"# token_url is discovered from the 401 as `init` found it: {_said(oauth.token_endpoint)}",
                  f"scopes = {toml_text.value(oauth.scopes)}   # what each lead's token asks for (the server's "
                  "scopes_supported)"]
    return "\n".join(lines) + "\n"


def _load(replicas: int) -> str:
    routing = ('routing = "round-robin"     # rounds alternate over the URLs ("other-replica": every retry to '
               "another, the hard case for shared state)" if replicas > 1 else
               "# routing: one URL, so every round goes to it and whatever is behind it picks the replica")
    return f"""\
[load]
model = "open"              # flows arrive at arrival_rate per second, whatever is in flight
arrival_rate = {ARRIVAL_RATE}            # all tools together; raise it once the first run is green
{routing}
timeout = "30s"             # the longest one round may take
"""


def _leads() -> str:
    return """\
[leads]                     # the people who answer when a tool asks mid-call
think = { dist = "constant", value = "1s" }   # a quick answer; people take longer:
# think = { dist = "lognormal", median = "2m", p95 = "12m" } with time_scale = 60 (real = modelled / 60)
"""


def _hosts(servers: Sequence[Server]) -> str:
    legacy = [server for server in servers if server.protocol != MODERN_REVISION]
    if not legacy:
        return ""
    revision = legacy[0].protocol if legacy[0].protocol in HANDSHAKE_REVISIONS else HANDSHAKE_REVISIONS[-1]
    spoken = f"{_said(legacy[0].url)} speaks MCP {_said(legacy[0].protocol, 40)}, not {MODERN_REVISION}"
    return f"""\
[[hosts]]                   # {spoken}: the leads' host
name = "sdk-session"        # uses the SDK's own client with the initialize handshake and a session
protocol = "{revision}"
"""


def _flows_intro(partial: dict[str, list[str]]) -> str:
    lines = ["# One `call` flow per tool. What a tool asks mid-call (its forms) is not in tools/list, so it cannot",
             "# be known here: the leads answer any form from the schema the server sends with it. To pin an",
             '# answer, add answers = { field = "value" } to the flow (a list of values: one is picked per call).']
    for name, missing in partial.items():
        lines.append(f"# Left out: {_said(name, 140)} (not listed by {_said(', '.join(missing), 300)}; every round may "
                     "land on any URL).")
    return "\n".join(lines) + "\n"


def _flow(tool: Tool) -> str:
    lines = ["[[flows]]"]
    if tool.description:
        lines.append(f"# {_said(tool.name, 140)}: {_said(tool.description)}")
    if tool.destructive:
        lines.append("# The server marks this tool destructive (destructiveHint): it may change real data under load.")
    lines += ['kind = "call"', f"tool = {toml_text.string(tool.name)}", "weight = 1"]
    drawn = draw_arguments(tool.input_schema)
    if not drawn.values:
        lines.append("# it takes no required arguments" + (f"; optional: {_said(_optional(drawn.optional), 300)}"
                                                         if drawn.optional else ""))
        return "\n".join(lines) + "\n"
    pin = "made up: " + ", ".join(drawn.made_up) if drawn.made_up else "each from its schema"
    lines += [f"# PIN: real values for {_said(tool.name, 140)} ({_said(pin, 300)})", "[flows.arguments]"]
    width = max(len(f"{toml_text.key(name)} = {toml_text.value(value)}") for name, value in drawn.values.items())
    for name, value in drawn.values.items():
        assignment = f"{toml_text.key(name)} = {toml_text.value(value)}"
        note = drawn.notes[name] + (" (cannot be made valid from the schema)" if name in drawn.unsatisfied else "")
        lines.append(f"{assignment.ljust(min(width, 48))}   # {_said(note, 200)}")
    if drawn.optional:
        lines.append(f"# optional, left out: {_said(_optional(drawn.optional), 300)}")
    return "\n".join(lines) + "\n"


def _optional(optional: dict[str, str]) -> str:
    return ", ".join(f"{name} ({kind})" for name, kind in optional.items())


def _expect() -> str:
    return """\
[expect]                    # what the run must show (k6 syntax); these hold for any healthy server
flows_finished = "count > 0"                     # the load reached the server and flows ended
"round_duration" = "p(95) < 5s"                  # set your SLO here
rounds_per_call = "max <= 10"                    # no call kept asking until the client gave up
# completed_ratio = ">= 0.99"                    # once the arguments are real: calls end without an error
# client_errors = "count == 0"                   # no JSON-RPC or HTTP error on any round
"""
