"""`mrtr-harness mcp`: the harness as an MCP server over stdio, driven by the SDK's own `Client`.

Each test starts `python -m harness mcp` through the SDK's stdio client transport, as an
assistant's client would, and talks to it on the 2026-07-28 wire. What they cost: a server
start each (importing the SDK's server, about a second); validate, report and compare are
each a short child process; one run of the smoke scenario shortened to 4 s (its results
then read, rebuilt and compared with themselves); the MRTR round against `remote.invalid`
(a reserved name that never resolves: nothing leaves 127.0.0.1) starts no run when declined
and, when accepted, a run that ends at once with exit 3 because nothing accepts connections there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, ElicitRequest, ElicitResult, InputRequiredResult

from tests.harness_run import ROOT, valid_summary
from tests.sdk import PROTOCOL, answer
from tests.test_remote_targets import REMOTE, scenario_text

TOOLS = {"validate", "run", "report", "compare", "triage"}
TRIAGE_LOG = "\n".join([
    "2026-12-04T06:00:00Z WARNING replica=r1 mcp.server.request_state: requestState rejected on tools/call: expired",
    "2026-12-04T06:00:01Z INFO replica=r1 an unrelated line",
    "2026-12-04T06:00:02Z WARNING replica=r2 mcp.server.request_state: requestState rejected on tools/call: seal",
]) + "\n"


@asynccontextmanager
async def connect(tmp_path: Path, elicitation: Callable[..., Awaitable[ElicitResult]] | None = None,
                  max_duration: str = "1m") -> AsyncIterator[Client]:
    """`python -m harness mcp` started by the SDK's stdio client in tmp_path (its workspace, holding a copy of the
    shipped scenarios), its stderr kept in tmp_path/server.err."""
    if not (tmp_path / "scenarios").exists():
        shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    server = StdioServerParameters(command=sys.executable, args=["-m", "harness", "mcp", "--results",
                                                            str(tmp_path / "results"), "--max-duration", max_duration],
                                   cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    with (tmp_path / "server.err").open("w") as errlog:
        async with Client(stdio_client(server, errlog=errlog), mode=PROTOCOL,
                          elicitation_callback=elicitation) as client:
            yield client


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def run_async(fn: Callable[[], Awaitable[None]], seconds: float = 120) -> None:
    async def bounded() -> None:
        with anyio.fail_after(seconds):
            await fn()

    anyio.run(bounded)


def test_the_printed_registration_starts_the_server_from_anywhere_without_the_venv_on_path(tmp_path: Path) -> None:
    """What an editor does with `mcp --config`'s entry: start its command, from its own folder, with a PATH that
    does not hold the venv the harness is installed in (a client does not activate it)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    done = subprocess.run([sys.executable, "-m", "harness", "mcp", "--config", "--workspace", "workspace",
                           "--results", "runs"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["mrtr-harness"]
    assert Path(entry["command"]).is_absolute() and entry["cwd"] == str(workspace)
    assert entry["args"][entry["args"].index("--results") + 1] == str(tmp_path / "runs")
    server = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=entry["cwd"],
                                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})

    async def session() -> None:
        with (tmp_path / "server.err").open("w") as errlog:
            async with Client(stdio_client(server, errlog=errlog), mode=PROTOCOL) as client:
                assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS

    run_async(session)


def test_the_server_lists_its_tools_validates_refuses_an_unbounded_run_and_triages(tmp_path: Path) -> None:
    remote = tmp_path / "remote.toml"
    remote.write_text(scenario_text([REMOTE], chaos=True))
    named = tmp_path / "r1.log"
    named.write_text(TRIAGE_LOG.splitlines()[0].replace(" replica=r1", "") + "\n")

    async def session() -> None:
        async with connect(tmp_path) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            assert all(tool.output_schema is not None for tool in tools.values())  # structured results
            # the user's answer and the hosts are the server's to fill: an assistant cannot pass them
            assert set(tools["run"].input_schema["properties"]) == {"scenario", "duration", "seed"}

            valid = structured(await client.call_tool("validate", {"scenario": "scenarios/smoke.toml"}))
            assert valid["valid"] is True and valid["exit_code"] == 0
            assert valid["lines"][0].startswith("scenarios/smoke.toml: ok (smoke: embedded target"), valid

            refused = structured(await client.call_tool("validate", {"scenario": str(remote)}))
            assert refused["valid"] is False and refused["exit_code"] == 2
            assert any("chaos against remote host remote.invalid: refused" in line for line in refused["messages"])

            long = structured(await client.call_tool("run", {"scenario": "scenarios/smoke.toml", "duration": "2h"}))
            assert long["started"] is False and long["exit_code"] == 2 and long["passed"] is None
            assert "longer than this server allows (1m, `mrtr-harness mcp --max-duration`)" in long["refused"]

            text = structured(await client.call_tool("triage", {"text": TRIAGE_LOG}))
            assert text["exit_code"] == 1 and text["rejections"] == 2 and text["lines"] == 3
            assert text["tampering_or_client_bug"] == ["seal"]
            assert text["counts"]["by_reason_and_replica"] == {"expired": {"r1": 1}, "seal": {"r2": 1}}
            assert text["counts"]["advice"]["seal"]["next_step"]

            file = structured(await client.call_tool("triage", {"path": str(named)}))
            assert file["exit_code"] == 0 and file["counts"]["by_reason_and_replica"] == {"expired": {"r1": 1}}

            missing = structured(await client.call_tool("triage", {"path": str(tmp_path / "none.log")}))
            assert missing["exit_code"] == 3 and missing["counts"] is None and missing["said"]

    run_async(session)
    assert not (tmp_path / "results").exists()  # nothing was run


def test_a_bounded_run_notifies_progress_and_answers_its_verdict_and_files_then_report_and_compare_read_them(
        tmp_path: Path) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def noted(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def session() -> None:
        async with connect(tmp_path) as client:
            ran = structured(await client.call_tool("run", {"scenario": "scenarios/smoke.toml", "duration": "4s"},
                                                    progress_callback=noted))
            assert ran["started"] is True and ran["refused"] is None and ran["allowed_hosts"] == []
            folder = Path(ran["folder"])
            assert folder.parent == tmp_path / "results"
            summary = valid_summary(folder / "summary.json")
            assert ran["exit_code"] == summary["exit_code"] and ran["status"] == summary["status"]
            assert ran["passed"] == (ran["exit_code"] == 0) and ran["problems"] == summary["problems"]
            for key, name in (("summary_json", "summary.json"), ("report_html", "report.html"),
                              ("junit_xml", "junit.xml")):
                assert ran[key] == str(folder / name) and (folder / name).is_file()
            assert progress and progress[0][0] == 0 and progress[0][2] == "smoke: 0s in, its load runs 4s"
            assert all(total == progress[0][1] and total is not None and total > 4 for _, total, _ in progress)

            rebuilt = structured(await client.call_tool("report", {"folder": str(folder)}))
            assert rebuilt["rebuilt"] is True and rebuilt["exit_code"] == ran["exit_code"]
            assert rebuilt["status"] == ran["status"] and rebuilt["report_html"] == ran["report_html"]
            read = structured(await client.call_tool("report", {"folder": str(folder), "rebuild": False}))
            assert read["rebuilt"] is False and read["exit_code"] == ran["exit_code"] and read["output"] == ""

            same = structured(await client.call_tool("compare", {"baseline": str(folder), "current": str(folder)}))
            assert same["exit_code"] == 0 and same["regressed"] is False and same["regressions"] == []
            assert any("the same folder" in warning for warning in same["warnings"]), same["warnings"]
            assert same["compare_json"] == str(folder / "compare.json")
            assert json.loads((folder / "compare.json").read_text())["regressed"] is False

    run_async(session)


def test_chaos_against_a_remote_host_asks_the_user_in_the_call_and_anything_but_yes_starts_nothing(
        tmp_path: Path) -> None:
    marker = tmp_path / "restarted"
    path = tmp_path / "remote.toml"
    path.write_text(scenario_text([REMOTE], chaos=True, marker=marker))
    arguments = {"scenario": str(path)}

    async def session() -> None:
        async with connect(tmp_path, elicitation=answer("accept", {"start": False})) as client:
            await client.list_tools()
            first = await client.session.call_tool("run", arguments, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)  # round one: the question, and the state to send back
            ((key, request),) = first.input_requests.items()
            assert isinstance(request, ElicitRequest)
            assert request.params.message == "\n".join([
                f"Start {json.dumps(str(path))}?", "It would reach beyond the embedded shop:",
                '- load to the external target at ["http://remote.invalid:8080/mcp"]',
                f'- run [target.commands] restart = ["touch", {json.dumps(str(marker))}]',
                "It would act with chaos on remote.invalid, which is not this machine and not in its [target] allow: "
                "yes allows it (--allow-host).", "Yes starts the run; no starts nothing."])
            assert request.params.requested_schema["properties"]["start"]["type"] == "boolean"
            assert first.request_state
            second = await client.session.call_tool("run", arguments, input_responses={
                key: ElicitResult(action="decline")}, request_state=first.request_state, allow_input_required=True)
            assert isinstance(second, CallToolResult)
            declined = structured(second)
            assert declined["started"] is False and declined["exit_code"] == 2 and declined["folder"] is None
            assert declined["refused"].startswith("not started: what it runs and reaches beyond the embedded shop "
                                                  "(load to the external target at")
            assert declined["refused"].endswith("and chaos against remote host remote.invalid (or add the host to "
                                                "the scenario's [target] allow) needs the user's yes, and the "
                                                "answer was decline; nothing was run or sent")
            # the SDK's own driver: the callback answers the form with start = false
            said_no = structured(await client.call_tool("run", arguments))
            assert said_no["started"] is False and "the answer was no" in said_no["refused"]

    run_async(session)
    assert not (tmp_path / "results").exists() and not marker.exists()  # no run, no chaos command


def test_a_yes_passes_the_hosts_as_allow_host_and_the_run_is_attempted(tmp_path: Path) -> None:
    marker = tmp_path / "restarted"
    path = tmp_path / "remote.toml"
    path.write_text(scenario_text([REMOTE], chaos=True, marker=marker))
    asked: list[str] = []

    async def yes(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"start": True})

    async def session() -> None:
        async with connect(tmp_path, elicitation=yes) as client:
            ran = structured(await client.call_tool("run", {"scenario": str(path)}))
            assert ran["started"] is True and ran["allowed_hosts"] == ["remote.invalid"]
            assert "chaos against remote host remote.invalid: allowed by --allow-host" in ran["output"]
            assert "refused" not in ran["output"]
            # the run got past the rule and tried the host, which never resolves: the target is down, exit 3
            assert ran["exit_code"] == 3 and ran["status"] == "aborted", ran["output"]
            assert f"cannot reach {REMOTE}" in ran["output"]

    run_async(session)
    assert len(asked) == 1 and asked[0].endswith("It would act with chaos on remote.invalid, which is not this "
                                                 "machine and not in its [target] allow: yes allows it "
                                                 "(--allow-host).\nYes starts the run; no starts nothing.")
    assert not marker.exists()  # the target never came up, so no chaos step ran


def test_the_question_names_only_the_remote_hosts_chaos_would_break_that_nobody_allowed() -> None:
    """In process, no server: the hosts come from config/remote.py's rule, the question from them alone."""
    from harness.assistant.consent import Breaking, ask_to_start
    from harness.config.remote import breaking, unallowed_hosts
    from harness.config.scenario import parse_scenario

    urls = ["http://127.0.0.1:9/mcp", REMOTE, "http://other.invalid:9/mcp", "http://third.invalid:9/mcp"]
    chaos = parse_scenario(scenario_text(urls, target='allow = ["other.invalid"]', chaos=True))
    assert breaking(chaos) == "chaos"
    assert unallowed_hosts(chaos) == ["remote.invalid", "third.invalid"]  # not loopback, not in [target] allow
    assert unallowed_hosts(chaos, ["third.invalid"]) == ["remote.invalid"]
    assert unallowed_hosts(parse_scenario(scenario_text(urls))) == []  # nothing breaks: nothing to ask

    asked = ask_to_start("s.toml", Breaking("chaos and fuzzing", ("remote.invalid", "third.invalid")))
    assert asked is not None and asked.message == (
        'Start "s.toml"?\nIt would act with chaos and fuzzing on remote.invalid, third.invalid, which are not this '
        "machine and not in its [target] allow: yes allows them (--allow-host).\nYes starts the run; no starts "
        "nothing.")
    assert ask_to_start("s.toml", Breaking("", ())) is None


def test_report_and_compare_answer_no_verdict_for_a_folder_they_could_not_judge(tmp_path: Path) -> None:
    """A folder whose summary.json says it passed but whose scenario.json is damaged (a killed copy): `report`
    rebuilds nothing, so `passed` is null with the reason, never true beside exit 2; `compare` makes no comparison,
    so `regressed` is null; a journal too damaged to trust rebuilds a verdict that exits 4: not passed."""
    from harness.config.scenario import parse_scenario
    from harness.report import write_results
    from tests.test_report import _damage, write_run

    folder = tmp_path / "night"
    folder.mkdir()
    scenario = parse_scenario('name = "night"\nduration = "30s"\n[load]\narrival_rate = 2\n[[flows]]\n'
                              'kind = "refund"\n')
    intact = scenario.model_dump_json()
    (folder / "scenario.json").write_text(intact)
    write_run(folder / "journal.jsonl")
    write_results(folder, scenario, [folder / "journal.jsonl"], [])
    assert json.loads((folder / "summary.json").read_text())["exit_code"] == 0  # it says it passed
    (folder / "scenario.json").write_text(intact[:40])

    async def session() -> None:
        async with connect(tmp_path) as client:
            rebuilt = structured(await client.call_tool("report", {"folder": str(folder)}))
            assert rebuilt["rebuilt"] is False and rebuilt["exit_code"] == 2, rebuilt
            assert rebuilt["passed"] is None and rebuilt["status"] is None and rebuilt["summary_json"] is None
            assert rebuilt["not_judged"].startswith("nothing was rebuilt, so no verdict: "), rebuilt
            assert f"{folder / 'scenario.json'}" in rebuilt["not_judged"]

            compared = structured(await client.call_tool("compare", {"baseline": str(folder),
                                                                     "current": str(folder)}))
            assert compared["exit_code"] == 2 and compared["regressed"] is None, compared

            (folder / "scenario.json").write_text(intact)
            _damage(folder / "journal.jsonl", 40, b'{"type": "round", "t": 17600\x00\x00\xff\n')
            untrusted = structured(await client.call_tool("report", {"folder": str(folder)}))
            assert untrusted["rebuilt"] is True and untrusted["exit_code"] == 4, untrusted
            assert untrusted["passed"] is False and untrusted["not_judged"] is None

    run_async(session)


PORT_FORWARDED = """\
name = "port-forwarded"
duration = "5s"

[target]
kind = "external"
urls = ["http://127.0.0.1:9/mcp"]
logs = ["command:touch {marker}-logs"]

[target.commands]
restart = ["sh", "-c", "touch {marker}-restart; kubectl delete pod {{replica}}"]

[target.auth]
kind = "command"
command = ["touch", "{marker}-token"]

[load]
arrival_rate = 1

[[flows]]
kind = "call"
tool = "echo"

[[chaos]]
at = "1s"
action = "restart"

[[chaos]]
at = "2s"
action = "command"
command = ["touch", "{marker}-chaos\\u001b[2K"]
rollback = ["true"]
"""


def test_a_loopback_scenario_that_runs_commands_asks_naming_each_one_and_without_a_yes_runs_none(
        tmp_path: Path) -> None:
    """A loopback URL (a `kubectl port-forward`) skips no question: every command the run would execute is named
    as the scenario writes it (a control character escaped), and a no runs none of them."""
    marker = tmp_path / "ran"
    path = tmp_path / "forwarded.toml"
    path.write_text(PORT_FORWARDED.format(marker=marker))
    asked: list[str] = []

    async def no(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"start": False})

    async def session() -> None:
        async with connect(tmp_path, elicitation=no) as client:
            ran = structured(await client.call_tool("run", {"scenario": "forwarded.toml"}))
            assert ran["started"] is False and ran["exit_code"] == 2 and ran["folder"] is None, ran
            assert "the answer was no; nothing was run or sent" in ran["refused"]

    run_async(session)
    assert asked == ["\n".join([
        'Start "forwarded.toml"?', "It would reach beyond the embedded shop:",
        '- load to the external target at ["http://127.0.0.1:9/mcp"]',
        f'- run [target.commands] restart = ["sh", "-c", "touch {marker}-restart; kubectl delete pod {{replica}}"]',
        f'- run [[chaos]] 2 command = ["touch", "{marker}-chaos\\u001b[2K"]',
        '- run [[chaos]] 2 rollback = ["true"]',
        f'- run [target.auth] command = ["touch", "{marker}-token"] (once per lead: its token)',
        f'- run the log source command "touch {marker}-logs"',
        "Yes starts the run; no starts nothing."])]
    assert not (tmp_path / "results").exists()
    assert not list(tmp_path.glob("ran*")), list(tmp_path.glob("ran*"))  # no command ran


def test_what_a_run_reaches_beyond_the_embedded_shop_for_each_kind_of_target() -> None:
    """In process: the embedded shop alone asks nothing; Docker, a tokens file and a client secret's endpoint are
    named."""
    from harness.assistant.plan import beyond_the_shop
    from harness.config.scenario import parse_scenario

    flows = '[load]\narrival_rate = 1\n[[flows]]\nkind = "refund"\n'
    assert beyond_the_shop(parse_scenario(f'name = "s"\nduration = "5s"\n{flows}')) == []
    assert beyond_the_shop(parse_scenario(
        f'name = "s"\nduration = "5s"\n[target.auth]\nkind = "client-credentials"\nclient_id = "h"\n'
        f'client_secret_env = "S"\n{flows}')) == []  # the embedded shop's own authorization server
    assert beyond_the_shop(parse_scenario(
        f'name = "s"\nduration = "5s"\n[target]\nkind = "docker"\nimage = "shop:test"\nreplicas = 2\n{flows}')) == [
        'Docker: the shop started from image "shop:test" (2 containers)']
    external = ('name = "s"\nduration = "5s"\n[target]\nkind = "external"\nurls = ["https://a.example/mcp"]\n'
                'api = "https://a.example"\nlogs = ["file:/var/log/r1.log@r1"]\n')
    assert beyond_the_shop(parse_scenario(
        external + '[target.auth]\nkind = "client-credentials"\nclient_id = "h"\nclient_secret_env = "S"\n'
        + flows)) == ['load to the external target at ["https://a.example/mcp"]',
                      'ledger reads from "https://a.example"',
                      "send the client secret ($S) to the token endpoint the target's OAuth discovery names (no "
                      "issuer pinned)",
                      'read the log source "file:/var/log/r1.log@r1"']
    assert beyond_the_shop(parse_scenario(
        external + '[target.auth]\nkind = "tokens"\nfile = "/srv/tokens.txt"\n' + flows))[2] == (
        'read the tokens in "/srv/tokens.txt" and send them to the target')


def test_paths_stay_inside_the_workspace_and_a_fifo_is_refused_without_blocking(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The server's workspace is the folder it started in (tmp_path): a path outside it, also through a symbolic
    link inside it, is refused by every tool, and a FIFO is never opened (triage and run would block on it)."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    outside = elsewhere / "smoke.toml"
    shutil.copy(ROOT / "scenarios" / "smoke.toml", outside)
    (elsewhere / "r1.log").write_text(TRIAGE_LOG)
    (tmp_path / "linked.toml").symlink_to(outside)
    (tmp_path / "linked.log").symlink_to(elsewhere / "r1.log")
    os.mkfifo(tmp_path / "pipe.log")

    async def session() -> None:
        async with connect(tmp_path) as client:
            for scenario in (str(outside), "linked.toml", "../" + outside.parent.name + "/smoke.toml"):
                ran = structured(await client.call_tool("run", {"scenario": scenario}))
                assert ran["started"] is False and ran["exit_code"] == 2, ran
                assert ran["refused"].startswith(f"{scenario}: outside this server's workspace"), ran
                valid = structured(await client.call_tool("validate", {"scenario": scenario}))
                assert valid["valid"] is False and "outside this server's workspace" in valid["messages"][0]
            piped = structured(await client.call_tool("run", {"scenario": "pipe.log"}))
            assert piped["refused"] == "pipe.log: not a regular file (a FIFO): the scenario must be one", piped

            for path in ("pipe.log", "linked.log", str(elsewhere / "r1.log")):
                read = structured(await client.call_tool("triage", {"path": path}))
                assert read["exit_code"] == 3 and read["counts"] is None and read["lines"] == 0, read
            read = structured(await client.call_tool("triage", {"path": "pipe.log"}))
            assert read["said"] == ["pipe.log: not a regular file (a FIFO): the log file must be one"]

            report = structured(await client.call_tool("report", {"folder": str(elsewhere)}))
            assert report["exit_code"] == 2 and report["passed"] is None and report["rebuilt"] is False
            assert "outside this server's workspace" in report["not_judged"]
            compared = structured(await client.call_tool("compare", {"baseline": str(elsewhere),
                                                                     "current": "scenarios"}))
            assert compared["exit_code"] == 2 and compared["regressed"] is None
            assert "outside this server's workspace" in compared["output"]

    run_async(session, seconds=60)
    assert not (tmp_path / "results").exists()
