"""Text from outside is data, at every sink: the terminal's closing table, junit.xml, report.html, triage's table and
the assistant's answers show what a server, a log, a ledger or an OAuth endpoint said, and nothing of it acts.

The sinks are fed as a user feeds them: a run against a real SDK server whose tool error holds terminal codes
(`tests.servers.hostile_listing`), junit.xml written for a verdict whose OAuth error, ledger row and tool error carry
control characters, `triage --once` on a log whose file name and lines carry them, and `mrtr-harness mcp` driven by the
SDK's own client. Then `harness.foreign_text` itself, over arbitrary text (Hypothesis).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from contextlib import redirect_stdout
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from harness import foreign_text
from harness.cli.main import main
from harness.errors import ExitCode
from harness.folding.invariants import InvariantResult
from harness.folding.top_errors import ErrorGroup
from harness.report.junit import write_junit
from harness.report.series import ChaosAction
from harness.report.terminal import render_thresholds
from harness.report.verdict import RunStatus, RunVerdict
from tests.harness_run import ROOT, Finished
from tests.servers import start_server
from tests.servers.hostile_listing import TOOL_ERROR
from tests.test_mcp_server import connect, run_async, structured

HOSTILE = "invalid_client\x1b[2K\r\x1b[32m✓ forged\x1b[0m\x00\x01\x07\x0b\x7f\x85\u2028\u202e\ud800\ufffe end"
"""What a hostile OAuth endpoint, ledger or tool says: terminal codes, controls XML 1.0 forbids, a lone surrogate."""

UNSAFE = {*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), "\u2028", "\u2029", "\u202e", "\ufffe",
          "\uffff", *map(chr, range(0xD800, 0xE000))}


def shows_nothing_raw(text: str, *, newlines: bool = True) -> bool:
    """No character of `text` can act on a terminal or break a document (newlines and tabs where allowed)."""
    allowed = {"\n", "\t"} if newlines else set()
    return not any(char in UNSAFE and char not in allowed for char in text)


def hostile_verdict() -> RunVerdict:
    return RunVerdict(
        status=RunStatus.ABORTED, exit_code=ExitCode.TARGET, thresholds=[],
        invariants={"ledger_balances": InvariantResult("ledger_balances", 1, [f"row O-1: {HOSTILE}"])},
        reconciliation=None, hypothesis=[], problems=[f"the token endpoint refused the client: {HOSTILE}"],
        reason=f"token endpoint error: {HOSTILE}", run_id="r-1", started=1.0, duration=2.0,
        chaos=[ChaosAction("restart", f"r1{HOSTILE}", 1.0, 2.0, False, error=HOSTILE)],
        top_errors=[ErrorGroup(3, "lookup", "lookup", 1, HOSTILE, HOSTILE, 0.5, 1.5)])


# --- each sink, fed as a user feeds it ---------------------------------------------------------


def test_junit_xml_with_control_characters_in_an_oauth_error_a_ledger_row_and_a_tool_error_parses(
        tmp_path: Path) -> None:
    path = write_junit(tmp_path / "junit.xml", f"scenario{HOSTILE}", hostile_verdict())
    root = ET.parse(path).getroot()  # what CI does first: it must parse
    texts = [text for element in root.iter() for text in (element.text, *element.attrib.values()) if text]
    assert any("token endpoint error: invalid_client\\x1b[2K" in text for text in texts)  # shown, escaped
    assert any("row O-1: invalid_client" in text for text in texts)
    assert all(shows_nothing_raw(text) for text in texts)


def test_the_closing_table_shows_a_servers_terminal_codes_as_text(tmp_path: Path) -> None:
    table = render_thresholds(hostile_verdict(), color=True)
    lines = table.splitlines()
    assert "\x1b[2K" not in table and "\r" not in table and "\\x1b[2K" in table
    assert not any(line.lstrip().startswith("✓ forged") for line in lines)
    painted = {"\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"}  # the harness's own colours, asked for
    for code in painted:
        table = table.replace(code, "")
    assert shows_nothing_raw(table)


def test_a_run_against_a_server_whose_tool_errors_hold_terminal_codes_shows_them_as_text_everywhere(
        tmp_path: Path) -> None:
    """The real path: the SDK server's tool error, journaled, then the closing table on the terminal, junit.xml and
    report.html."""
    server = start_server("tests.servers.hostile_listing")
    scenario = tmp_path / "hostile.toml"
    scenario.write_text(f"""\
name = "hostile-errors"
seed = 1
duration = "2s"
grace = "5s"
[target]
kind = "external"
urls = ["{server.url}"]
[load]
model = "open"
arrival_rate = 4
timeout = "10s"
[leads]
think = {{ dist = "constant", value = "1s" }}
[[flows]]
kind = "call"
tool = "lookup"
[flows.arguments]
q = "word"
[expect]
flows_finished = "count > 0"
""")
    try:  # as a user runs it, without --quiet: the closing table is printed
        done = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results",
                               str(tmp_path / "results")], capture_output=True, text=True, timeout=180, cwd=ROOT)
    finally:
        server.stop()
    finished = Finished(done.returncode, done.stdout + done.stderr, next((tmp_path / "results").iterdir(), None))
    assert finished.folder is not None and "TOP ERRORS" in finished.output, finished.output
    assert "no such word" in finished.output and "forged check" in finished.output  # the error is shown, as text
    assert shows_nothing_raw(finished.output), finished.output
    ET.parse(finished.folder / "junit.xml")
    page = (finished.folder / "report.html").read_text()
    assert "no such word\\x1b[2K \\x1b[32m ✓ forged check" in page and shows_nothing_raw(page)  # the example
    messages = [record["error"] for record in finished.journal() if isinstance(record.get("error"), str)]
    assert any("no such word" in message for message in messages)
    assert all(shows_nothing_raw(message, newlines=False) for message in messages)


def test_a_token_endpoint_whose_oauth_error_holds_control_characters_leaves_a_junit_xml_ci_can_parse(
        tmp_path: Path) -> None:
    """A real run whose token endpoint refuses the client with an RFC 6749 `error` full of controls: the run aborts
    (exit 3), and its junit.xml, closing table and report.html say why, as text."""
    server = start_server("tests.servers.hostile_listing")
    scenario = tmp_path / "oauth.toml"
    scenario.write_text(f"""\
name = "hostile-oauth"
seed = 1
duration = "2s"
[target]
kind = "external"
urls = ["{server.url}"]
[target.auth]
kind = "client-credentials"
client_id = "harness"
client_secret_env = "HOSTILE_SECRET"
token_url = "http://127.0.0.1:{server.port}/token"
[load]
model = "open"
arrival_rate = 2
[[flows]]
kind = "call"
tool = "lookup"
""")
    try:
        done = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results",
                               str(tmp_path / "results")], capture_output=True, text=True, timeout=180, cwd=ROOT,
                              env={**os.environ, "HOSTILE_SECRET": "not-the-desks-secret"})
    finally:
        server.stop()
    folder = next((tmp_path / "results").iterdir())
    assert done.returncode == ExitCode.TARGET, done.stdout + done.stderr
    root = ET.parse(folder / "junit.xml").getroot()  # CI keeps the verdict
    texts = [text for element in root.iter() for text in (element.text, *element.attrib.values()) if text]
    assert any("refused client harness: invalid_client\\x1b[2K" in text for text in texts)
    assert all(shows_nothing_raw(text) for text in texts)
    shown = done.stdout + done.stderr  # the closing table, as a terminal gets it
    assert "invalid_client\\x1b[2K" in shown and shows_nothing_raw(shown)
    assert shows_nothing_raw((folder / "report.html").read_text())


def test_triages_table_shows_a_log_files_name_and_lines_as_text(tmp_path: Path) -> None:
    log = tmp_path / "r1\x1b[2K\u202e.log"
    rejected = "WARNING:mcp.server.request_state:requestState rejected on tools/call: "
    log.write_text(f"{rejected}expired\n{rejected}a new reason\x1b]0;owned\x07\x0b\n")
    shown = io.StringIO()
    with redirect_stdout(shown):
        code = main(["triage", "--once", "--file", str(log)])
    table = shown.getvalue()
    assert code == 0 and "expired" in table and "other" in table
    assert "r1\\x1b[2K\\u202e.log" in table and shows_nothing_raw(table), table


def test_the_assistant_answers_an_agent_with_a_logs_and_a_folders_text_as_text(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"status": "failed", "exit_code": 1,
                                                     "problems": [f"round 3 said: {HOSTILE}"]}))
    rejected = "2026-12-04T06:00:00Z WARNING replica=r1 mcp.server.request_state: requestState rejected on tools/call: "
    log = f"{rejected}a new reason\x1b]0;owned\x07\x0b\n{rejected}expired\n"

    async def session() -> None:
        async with connect(tmp_path) as client:
            triaged = structured(await client.call_tool("triage", {"text": log}))
            read = structured(await client.call_tool("report", {"folder": str(folder), "rebuild": False}))
        answer = json.dumps([triaged, read], ensure_ascii=False)
        assert "a new reason\\\\x1b]0;owned" in answer and "round 3 said: invalid_client\\\\x1b[2K" in answer
        assert read["passed"] is False and read["problems"] and triaged["rejections"] == 2
        for value in (triaged, read):
            assert shows_nothing_raw("".join(_strings(value)))

    run_async(session)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (key, *_strings(item))]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


# --- the module, over any text ------------------------------------------------------------------

ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=400) | st.sampled_from(
    [HOSTILE, TOOL_ERROR, "a\r\nb", "\x1b[2K\r", "\ud800"])


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT, limit=st.integers(min_value=1, max_value=300))
def test_a_line_is_one_line_of_safe_characters_within_its_cap_and_stays_what_it_is(text: str, limit: int) -> None:
    line = foreign_text.line(text, limit)
    assert len(line) <= limit and shows_nothing_raw(line, newlines=False)
    assert foreign_text.line(line, limit) == line  # a sink's output through another sink is unchanged
    assert tomllib.loads(f"# {foreign_text.toml_comment(text, limit)}\nkey = 1\n") == {"key": 1}
    line.encode("utf-8")  # no lone surrogate: it can be written


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT)
def test_xml_html_and_agent_text_hold_only_what_their_documents_allow(text: str) -> None:
    root = ET.Element("doc", {"attribute": text})
    root.text = text
    written = ET.tostring(foreign_text.clean_xml_tree(root), encoding="unicode")
    parsed = ET.fromstring(written)
    assert (parsed.text or "") == foreign_text.xml(text) and parsed.attrib["attribute"] == foreign_text.xml(text)
    page = foreign_text.html(text)
    assert "<" not in page and ">" not in page and '"' not in page and shows_nothing_raw(page)
    for shown in (foreign_text.agent(text), foreign_text.block(text)):
        assert shows_nothing_raw(shown) and "\r" not in shown and shown.count("\n") <= text.count("\n")


def test_each_sink_caps_what_it_reads_of_a_long_text() -> None:
    long = "\x1b" * 1_000_000
    assert len(foreign_text.line(long, 100)) == 100 and foreign_text.line(long, 100).endswith("…")
    assert len(foreign_text.agent(long)) == foreign_text.AGENT_LIMIT
    assert len(foreign_text.xml(long)) == foreign_text.XML_LIMIT
