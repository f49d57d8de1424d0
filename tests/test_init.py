"""`mrtr-harness init`: a scenario written from servers this project did not write, that validates and runs.

The servers are the MCP Python SDK's own examples (`tests/servers/sdk_examples.py`), two of
them as the replicas of one deployment, and the embedded shop's replica; a plain HTTP server
stands for a URL that is no MCP server. Every command runs as a user runs it, in a subprocess.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from harness.config.cautions import cautions
from harness.config.scenario import load_scenario
from harness.folding.invariants import LEDGER_INVARIANTS
from tests.harness_run import ROOT, run_harness
from tests.servers import Running, free_port, start_server


def init(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "init", *argv], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def servers() -> Iterator[list[Running]]:
    """Two SDK example servers (the replicas of one deployment), and a third that speaks only 2025-11-25,
    started together: most of a start is importing the SDK, which the processes do in parallel."""
    started = [start_server("tests.servers.sdk_examples", wait=False) for _ in range(2)]
    started.append(start_server("tests.servers.sdk_examples", env={"SDK_EXAMPLES_ERA": "2025"}, wait=False))
    try:
        for running in started:
            running.wait_ready()
        yield started
    finally:
        for running in started:
            running.stop()


@pytest.fixture(scope="module")
def examples(servers: list[Running]) -> list[Running]:
    return servers[:2]


def test_a_scenario_from_two_sdk_example_servers_names_every_tool_validates_and_runs_over_both(
        examples: list[Running], tmp_path: Path) -> None:
    output = tmp_path / "scenario.toml"
    output.write_text("an older draft\n")
    done = init(*(server.url for server in examples), "-o", str(output), "--force")
    assert done.returncode == 0, done.stderr
    text = output.read_text()
    directive, _, rest = text.partition("\n")  # first, the line editors read: the path to the schema, from the file
    schema_file = (ROOT / "docs" / "scenario.schema.json").resolve()
    assert (output.parent / directive.removeprefix("#:schema ")).resolve() == schema_file
    assert rest.startswith("# A first scenario for SDK examples") and "What to change first" in text
    schema = json.loads(schema_file.read_text())
    assert not list(Draft202012Validator(schema).iter_errors(tomllib.loads(text)))  # and the file passes it
    assert "# PIN: real values for greet_user" in text and "# PIN: real values for name_shrimp" in text
    written = tomllib.loads(text)
    assert {flow["tool"] for flow in written["flows"]} == {"greet_user", "name_shrimp"}
    assert written["flows"][1]["arguments"] == {"tank": {"shrimp": [{"name": "example"}]},
                                                "extra_names": ["example"]}  # the nested model's $ref followed
    scenario = load_scenario(output)  # what `validate` checks
    assert scenario.target.urls == [server.url for server in examples] and cautions(scenario) == []
    finished = run_harness(output, tmp_path / "results", "--duration", "3s")
    assert finished.code == 0, finished.output
    flows = finished.summary["flows"]["by_flow"]
    assert set(flows) == {"greet_user", "name_shrimp"} and all(set(by) == {"completed"} for by in flows.values())
    served = {record["replica"] for record in finished.journal() if record["type"] == "round"}
    assert served == {"r1", "r2"}
    # the closing table shows what applies to this server: no refund invariant named, one line for the lot
    shown = subprocess.run([sys.executable, "-m", "harness", "report", str(finished.folder)], capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
    invariants = shown.stdout.split("INVARIANTS", 1)[1].split("█", 1)[0].split()
    assert "one_outcome_per_flow:" in invariants and f"{len(LEDGER_INVARIANTS)} ledger invariants (the shop's " \
           "refunds) not checked: the target declares no ledger" in " ".join(invariants)
    assert not {"no_double_release:", "unasked_refund_still_held:", "no_mutant_accepted:"} & set(invariants)


def test_a_scenario_from_the_shops_replica_names_its_tools_and_validates(deploy, tmp_path: Path) -> None:
    shop = deploy(replicas=1)
    done = init(shop.replica_urls[0])  # no -o: the scenario on standard output
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("#:schema docs/scenario.schema.json\n")  # from the folder it ran in (ROOT)
    scenario_file = tmp_path / "shop.toml"
    scenario_file.write_text(done.stdout)
    scenario = load_scenario(scenario_file)
    tools = {flow.tool for flow in scenario.flows}  # type: ignore[union-attr]
    assert {"quote_refund", "issue_refund", "record_return", "pay_refund"} <= tools
    assert "routing" not in scenario.load.model_fields_set and cautions(scenario) == []  # one URL: no routing asked


def test_a_server_behind_oauth_gets_target_auth_naming_the_secrets_variable_and_validates(
        tmp_path: Path) -> None:
    secret = secrets.token_urlsafe(24)
    authorization = start_server("tests.servers.token_desk", path="", wait=False,
                                 env={"TOKEN_DESK_CLIENT": f"init-client:{secret}", "TOKEN_DESK_SCOPES": "desk other"})
    resource = start_server("tests.servers.guarded_desk", env={"GUARDED_DESK_ISSUER": authorization.url}, wait=False)
    output = tmp_path / "guarded.toml"
    try:
        authorization.wait_ready()
        resource.wait_ready()
        refused = init(resource.url, "-o", str(output))
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "asks for an OAuth token" in refused.stderr and "--client-id" in refused.stderr
        assert not output.exists()
        env = {**os.environ, "INIT_TEST_SECRET": secret}
        done = subprocess.run([sys.executable, "-m", "harness", "init", resource.url, "-o", str(output),
                               "--client-id", "init-client", "--client-secret-env", "INIT_TEST_SECRET"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
        assert done.returncode == 0, done.stderr
        text = output.read_text()
        assert secret not in text and secret not in done.stderr
        auth = tomllib.loads(text)["target"]["auth"]
        assert auth == {"kind": "client-credentials", "client_id": "init-client",
                        "client_secret_env": "INIT_TEST_SECRET", "principals": 5, "scopes": ["desk"]}
        assert [flow["tool"] for flow in tomllib.loads(text)["flows"]] == ["confirm_refund"]
        # it validates; tests/test_auth.py runs this [target.auth] (discovered endpoint, a scope) on these desks
        validated = subprocess.run([sys.executable, "-m", "harness", "validate", str(output)], capture_output=True,
                                   text=True, timeout=60, cwd=ROOT, env=env)
        assert validated.returncode == 0 and "warning" not in validated.stderr, validated.stderr
    finally:
        resource.stop()
        authorization.stop()


def test_a_server_that_speaks_only_2025_gets_a_host_of_its_era(servers: list[Running], tmp_path: Path) -> None:
    done = init(servers[2].url)
    assert done.returncode == 0, done.stderr
    scenario_file = tmp_path / "legacy.toml"
    scenario_file.write_text(done.stdout)
    hosts = load_scenario(scenario_file).hosts
    assert [(host.name, host.protocol) for host in hosts] == [("sdk-session", "2025-11-25")]


def test_a_url_that_is_no_mcp_server_fails_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """A plain web server (refused at the probe), and a JSON-RPC server that answers neither discovery nor the
    handshake (refused by the SDK's client): each one line, exit 2, no file."""
    port = free_port()
    plain = Running(subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                     cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port, "/mcp")
    rpc_only = start_server("tests.servers.open_door", wait=False)
    output = tmp_path / "scenario.toml"
    try:
        plain.wait_ready()
        rpc_only.wait_ready()
        web = init(plain.url, "-o", str(output))
        rpc = init(rpc_only.url, "-o", str(output))
    finally:
        plain.stop()
        rpc_only.stop()
    assert web.returncode == 2 and web.stderr.count("\n") == 1, web.stderr
    assert "is not an MCP server" in web.stderr and "HTTP 501" in web.stderr
    assert rpc.returncode == 2 and rpc.stderr.count("\n") == 1, rpc.stderr
    assert "the MCP SDK's client could not list its tools" in rpc.stderr
    assert not output.exists()


def test_a_url_carrying_a_password_is_refused_in_one_line_that_does_not_show_it(tmp_path: Path) -> None:
    """Credentials in a URL would be written into the scenario, and from it into every results folder."""
    output = tmp_path / "scenario.toml"
    refused = init("http://ops:hunter2@127.0.0.1:9/mcp", "-o", str(output))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "carries credentials before its host" in refused.stderr and "hunter2" not in refused.stderr
    assert "http://***@127.0.0.1:9/mcp" in refused.stderr
    assert not output.exists()


def test_a_url_nothing_listens_on_exits_3_and_writes_nothing(tmp_path: Path) -> None:
    output = tmp_path / "scenario.toml"
    done = init(f"http://127.0.0.1:{free_port()}/mcp", "-o", str(output))
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot be reached" in done.stderr
    assert not output.exists()


def test_an_existing_output_file_is_kept_without_force(tmp_path: Path) -> None:
    output = tmp_path / "scenario.toml"
    output.write_text("mine\n")
    done = init(f"http://127.0.0.1:{free_port()}/mcp", "-o", str(output))  # refused before any URL is tried
    assert done.returncode == 2 and "exists; give --force" in done.stderr, done.stderr
    assert output.read_text() == "mine\n"


SCHEMA = {
    "type": "object",
    "$defs": {"Line": {"type": "object", "properties": {"sku": {"type": "string", "minLength": 3, "maxLength": 5},
                                                         "qty": {"type": "integer", "exclusiveMinimum": 0}},
                       "required": ["sku", "qty"]}},
    "properties": {
        "order_id": {"type": "string", "format": "uuid"},
        "when": {"type": "string", "format": "date"},
        "speed": {"type": "string", "enum": ["slow", "fast"]},
        "count": {"type": "integer", "minimum": 5, "maximum": 9},
        "ratio": {"type": "number", "maximum": 0.5},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "minItems": 2},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "gift": {"type": "boolean", "default": True},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["order_id", "when", "speed", "count", "ratio", "lines", "code"],
}


def test_arguments_from_a_schema_are_valid_against_it_and_say_what_was_made_up() -> None:
    from jsonschema import Draft202012Validator, FormatChecker

    from harness.init.arguments import draw_arguments

    drawn = draw_arguments(SCHEMA)
    checked = {**drawn.values, "code": "ABC"}  # a pattern cannot be drawn: marked below, pinned by the user
    Draft202012Validator(SCHEMA, format_checker=FormatChecker()).validate(checked)
    assert drawn.values["speed"] == "slow" and drawn.values["count"] == 5 and drawn.values["lines"][0]["qty"] == 1
    assert drawn.made_up == ["order_id", "when", "count", "ratio", "lines", "code"] and drawn.unsatisfied == ["code"]
    assert set(drawn.optional) == {"note", "gift", "tags"}  # optional ones are named, not sent


def test_toml_text_reads_back_as_written() -> None:
    from harness.config import toml_text

    nasty = {"plain": "a", "quote \" and \\ back": 'tab\there\nnew "line" \x01 \x7f é 😀', "n": -3, "x": 0.25,
             "on": False, "list": [1, "two", {"three": [3.5]}], "": "empty key"}
    text = "\n".join(f"{toml_text.key(name)} = {toml_text.value(value)}" for name, value in nasty.items())
    assert tomllib.loads(text) == nasty


def test_a_hostile_listing_writes_no_toml_the_user_did_not_see_and_the_file_runs_nothing(tmp_path: Path) -> None:
    """A real SDK server whose name, tool description, property name and schema `type` carry newlines that would end
    a comment and write `[target.auth] kind = "command"`, and control characters TOML forbids in a comment: the file
    keeps every one of them inside one comment line, validates, and its run touches nothing."""
    marker = tmp_path / "ran"
    hostile = start_server("tests.servers.hostile_listing", env={"HOSTILE_MARKER": str(marker)})
    output = tmp_path / "scenario.toml"
    try:
        done = init(hostile.url, "-o", str(output))
        assert done.returncode == 0, done.stderr
        text = output.read_text()
        written = tomllib.loads(text)  # a control character in a comment would make this raise
        assert "auth" not in written["target"] and "commands" not in written["target"]
        assert not any(line.lstrip().startswith(("[target.auth]", "kind = \"command\"", "command ="))
                       for line in text.splitlines())
        assert not any(ord(char) < 0x20 and char != "\n" or char == "\x7f" for char in text)
        assert "# A first scenario for hostile q [target.auth]" in text  # shown, as a comment, escaped
        assert [flow["tool"] for flow in written["flows"]] == ["lookup"]
        validated = subprocess.run([sys.executable, "-m", "harness", "validate", str(output)], capture_output=True,
                                   text=True, timeout=60, cwd=ROOT)
        assert validated.returncode == 0, validated.stderr
        finished = run_harness(output, tmp_path / "results", "--duration", "2s")
        assert finished.folder is not None, finished.output
    finally:
        hostile.stop()
    assert not marker.exists()


def test_a_tool_name_outside_mcps_rule_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    hostile = start_server("tests.servers.hostile_listing", env={"HOSTILE_TOOL_NAME": "look up\n[target.auth]\x1b[2K"})
    output = tmp_path / "scenario.toml"
    try:
        refused = init(hostile.url, "-o", str(output))
    finally:
        hostile.stop()
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "MCP tool names are 1-128 characters of A-Z a-z 0-9 _ - ." in refused.stderr
    assert "\x1b" not in refused.stderr and "\\x1b[2K" in refused.stderr
    assert not output.exists()


def test_a_file_that_would_not_read_back_as_init_meant_it_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """The last guard, whatever slipped past the comments: the text is parsed with the scenario model and must hold
    the URLs given, one call flow per tool, and no auth, command, log source or chaos init did not write."""
    from harness.init.survey import Server, Tool
    from harness.init.writer import WrittenWrong, _reads_back, scenario_text

    server = Server("http://127.0.0.1:9/mcp", "2026-07-28", "plain", [Tool("lookup", "", {}, False)], None)
    text = scenario_text([server], None, "mrtr-harness init", tmp_path)
    _reads_back(text, [server], ["lookup"], None)  # what init wrote reads back as meant
    planted = text.replace("\n[load]\n", '\n[target.auth]\nkind = "command"\ncommand = ["touch", "x"]\n\n[load]\n')
    tomllib.loads(planted)
    for wrong in (planted, text.replace("[[flows]]", "[[flows]]\n", 1) + "\nnot toml",
                  text.replace('tool = "lookup"', 'tool = "other"')):
        with pytest.raises(WrittenWrong, match="nothing written"):
            _reads_back(wrong, [server], ["lookup"], None)


def test_a_schemas_minimum_sizes_cannot_make_init_write_a_file_of_any_size() -> None:
    from harness.init.arguments import draw_arguments

    drawn = draw_arguments({"type": "object", "required": ["word", "list"], "properties": {
        "word": {"type": "string", "minLength": 10**8}, "list": {"type": "array", "minItems": 10**7}}})
    assert len(drawn.values["word"]) <= 64 and len(drawn.values["list"]) <= 64
    assert drawn.unsatisfied == ["word", "list"]  # marked for the user to pin
