"""Reason adapters: each server implementation's rejection line read into the harness's reasons.

The TypeScript SDK's lines are its real output (tests/servers/typescript_sdk: `@modelcontextprotocol/server` 2.4.0
from npm, its requestState seam refusing a tampered, a malformed and an expired state). A user's adapter is
outside text: TOML only, patterns refused unless linear, and no line makes any adapter raise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.logs.adapters import AdapterError, adapter_named, adapters, linear_pattern, load_adapter
from harness.logs.parse import LineParser, Rejection
from tests.harness_run import ROOT

TYPESCRIPT_LOG = Path(__file__).parent / "servers" / "typescript_sdk" / "rejections.log"
PYTHON_LINE = "2026-11-30T05:12:57.934Z WARNING replica=r1 mcp.server.request_state: requestState rejected on " \
              "tools/call: seal"


def _read(lines: list[str], **kwargs: object) -> tuple[list[Rejection], list[str]]:
    found: list[Rejection] = []
    said: list[str] = []
    parser = LineParser(found.append, detect=said.append, **kwargs)  # type: ignore[arg-type]
    for line in lines:
        parser.feed(line, "ts1")
    parser.flush()
    return found, said


def test_the_typescript_sdks_real_rejections_are_read_with_their_reasons():
    found, _ = _read(TYPESCRIPT_LOG.read_text().splitlines(), adapter=adapters()["typescript-sdk"])
    assert [(r.replica, r.method, r.reason) for r in found] == [
        ("ts1", "tools/call", "seal"), ("ts1", "tools/call", "malformed"), ("ts1", "tools/call", "expired")]


def test_the_python_sdk_adapter_does_not_read_the_typescript_sdks_lines():
    found, _ = _read(TYPESCRIPT_LOG.read_text().splitlines(), adapter=adapters()["python-sdk"])
    assert found == []


def test_the_format_is_told_from_the_lines_and_said_in_one_line():
    found, said = _read(["starting on :3000", *TYPESCRIPT_LOG.read_text().splitlines()])
    assert [r.reason for r in found] == ["seal", "malformed", "expired"]
    assert said == ["log format: typescript-sdk (detected from 3 of the first 13 lines)"]
    found, said = _read(["booting", PYTHON_LINE])
    assert [(r.replica, r.reason) for r in found] == [("ts1", "seal")]
    assert said == []  # the default, as every log was read before adapters: nothing new to say


def test_the_typescript_adapter_reads_a_json_record_with_its_time_and_replica():
    line = ('{"time":"2026-11-30T05:12:57.934Z","pod":"ts-7d9f","msg":"Error: requestState verification rejected '
            'tools/call: bind","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}')
    found, _ = _read([line], adapter=adapters()["typescript-sdk"])
    assert len(found) == 1
    assert (found[0].reason, found[0].trace_id) == ("principal", "4bf92f3577b34da6a3ce929d0e0e4736")
    assert found[0].logged_at == pytest.approx(1796015577.934)


def _adapter_file(tmp_path: Path, pattern: str, extra: str = "") -> Path:
    path = tmp_path / "java.toml"
    path.write_text(f"name = \"airlift\"\nmark = \"RequestState refused\"\npattern = '''{pattern}'''\n{extra}")
    return path


def test_a_users_adapter_reads_its_servers_lines_with_its_reason_map_and_time_format(tmp_path):
    path = _adapter_file(
        tmp_path, r"^(?P<time>\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2}) \[(?P<replica>[\w-]{1,40})\] RequestState refused "
                  r"\((?P<method>[\w/]{1,40})\): (?P<reason>[\w ]{1,60})",
        'time_format = "%d/%m/%Y %H:%M:%S"\n[reasons]\n"bad signature" = "seal"\n"too old" = "expired"\n')
    adapter = load_adapter(path)
    found, _ = _read(["30/11/2026 05:12:57 [api-2] RequestState refused (tools/call): bad signature",
                      "30/11/2026 05:12:58 [api-2] RequestState refused (tools/call): too old",
                      "30/11/2026 05:12:59 [api-2] RequestState refused (tools/call): principal drift",
                      "30/11/2026 05:13:00 [api-2] RequestState refused (tools/call): cosmic rays"], adapter=adapter)
    assert [(r.replica, r.reason, r.logged) for r in found] == [
        ("ts1", "seal", ""), ("ts1", "expired", ""), ("ts1", "principal drift", ""), ("ts1", "other", "cosmic rays")]
    assert found[0].logged_at == 1796015577.0


@pytest.mark.parametrize(("pattern", "says"), [
    (r"x(a+)+y(?P<reason>\w)", "a nested quantifier"),
    (r"x(\w*,)*(?P<reason>\w)", "a nested quantifier"),
    (r"x(?P<reason>a)\1", "a backreference"),
    (r".*x(?P<reason>\w{1,9})", "starts with an unbounded run"),
    (r"(?:\S+ )?x(?P<reason>a)", "starts with an unbounded run"),
])
def test_a_pattern_that_is_not_linear_is_refused_in_one_line(tmp_path, pattern, says):
    with pytest.raises(AdapterError) as refused:
        load_adapter(_adapter_file(tmp_path, pattern))
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_triage_refuses_a_nonlinear_adapter_with_exit_2_and_one_line(tmp_path):
    path = _adapter_file(tmp_path, r"x(a+)+(?P<reason>\w)")
    log = tmp_path / "r1.log"
    log.write_text("nothing\n")
    done = subprocess.run([sys.executable, "-m", "harness", "triage", "--once", "--adapter", str(path),
                           "--file", f"{log}@r1"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "not linear: a nested quantifier" in done.stderr


def test_triage_reads_the_typescript_sdks_log_by_its_adapter_and_by_detection(tmp_path):
    for extra in (["--adapter", "typescript-sdk"], []):
        done = subprocess.run([sys.executable, "-m", "harness", "triage", "--once", "--json", *extra,
                               "--file", f"{TYPESCRIPT_LOG}@ts1"], capture_output=True, text=True, cwd=ROOT,
                              timeout=60)
        assert '"seal"' in done.stdout and '"expired"' in done.stdout, done.stderr
        assert ("log format: typescript-sdk" in done.stderr) == (not extra)


@pytest.mark.parametrize("text", ["not a pattern (", "name = ", "[[", "\x00"])
def test_a_broken_adapter_file_is_refused_not_raised(tmp_path, text):
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(AdapterError):
        load_adapter(path)


def test_an_unknown_adapter_name_says_the_known_ones():
    with pytest.raises(AdapterError, match="python-sdk, typescript-sdk"):
        adapter_named("rust-sdk")


LINE_PIECES = st.sampled_from(["requestState verification rejected ", "requestState rejected on ", "tools/call",
                               "input request refused on ", "refused on ",
                               ": ", "mac", "bind", "{", "}", '"msg":', '"time":', "2026-11-30T05:12:57Z", "\x1b[31m",
                               "[pod/a/b] ", "replica=", "trace_id=", "é", "\n", " ", "RequestState refused ",
                               "(", ")", "99/99/9999 99:99:99", "[", "]"])


@settings(max_examples=600, deadline=None)
@given(st.lists(st.lists(LINE_PIECES, max_size=16).map("".join), max_size=6))
def test_no_line_makes_an_adapter_raise(tmp_path_factory, lines):
    user = load_adapter(_adapter_file(
        tmp_path_factory.mktemp("a"),
        r"^(?P<time>[\d/: ]{19}) \[(?P<replica>[^\]]{1,40})\] RequestState refused \((?P<method>[^)]{1,40})\): "
        r"(?P<reason>[\w ]{1,60})", 'time_format = "%d/%m/%Y %H:%M:%S"\n[unasked]\nmark = "refused on "\n'
        "pattern = '''refused on (?P<method>[^:]{1,40}): (?P<capability>\\w{1,40})'''\n"))
    for adapter in [*adapters().values(), user]:
        parser = LineParser(lambda rejection: None, adapter=adapter)
        for line in lines:
            adapter.read(line)
            adapter.read_unasked(line)
            adapter.detects(line)
            parser.feed(line)
        parser.flush()
        assert parser.bad == 0


@settings(max_examples=600, deadline=None)
@given(st.text(max_size=40))
def test_any_pattern_text_is_compiled_or_refused_never_raised(text):
    try:
        linear_pattern(text, "pattern")
    except AdapterError:
        pass


def test_the_scenarios_log_adapter_names_a_built_in_adapter_or_a_toml_file_relative_to_the_scenario(tmp_path):
    from harness.config.logs import BUILT_IN_ADAPTERS
    from harness.config.scenario import load_scenario
    from harness.config.strict import ScenarioError

    assert tuple(adapters()) == BUILT_IN_ADAPTERS
    smoke = ROOT / "scenarios" / "smoke.toml"
    assert load_scenario(smoke).target.log_adapter == "python-sdk"
    assert load_scenario(smoke, {"target.log_adapter": "typescript-sdk"}).target.log_adapter == "typescript-sdk"
    anchored = load_scenario(smoke, {"target.log_adapter": "adapters/java.toml"}).target.log_adapter
    assert anchored == str(smoke.parent.absolute() / "adapters" / "java.toml")
    with pytest.raises(ScenarioError, match="log_adapter.*unknown log adapter 'rust-sdk'"):
        load_scenario(smoke, {"target.log_adapter": "rust-sdk"})


def test_the_documented_adapter_loads_and_reads_the_line_it_was_written_for(tmp_path):
    import re

    text = (ROOT / "docs" / "your-deployment.md").read_text()
    block = re.search(r"```toml\n(# adapters/airlift\.toml.*?)```", text, re.S)
    assert block is not None
    path = tmp_path / "airlift.toml"
    path.write_text(block[1])
    found = load_adapter(path).read("30/11/2026 05:12:57 [api-2] RequestState refused (tools/call): bad signature")
    assert found is not None and (found.reason, found.replica, found.method) == ("seal", "api-2", "tools/call")
    unasked = load_adapter(path).read_unasked("30/11/2026 05:12:58 [api-2] Input request refused (tools/call): "
                                              "client lacks elicitation.url")
    assert unasked is not None and (unasked.logged, unasked.replica, unasked.method) == (
        "elicitation.url", "api-2", "tools/call")


def test_every_built_in_adapters_pattern_passes_the_rules_a_users_must():
    for adapter in adapters().values():
        if adapter.pattern is not None:
            assert linear_pattern(adapter.pattern.pattern, adapter.name).pattern == adapter.pattern.pattern


# --- -32021: the line a server logs when the client cannot answer its input requests ----------------------------

UNASKED_ADAPTER = """name = "shop-ts"
mark = "requestState verification rejected "
pattern = '''requestState verification rejected (?P<method>[\\w/]{1,64}): (?P<reason>[^\\r\\n]{1,200})'''
reasons = { mac = "seal", malformed = "malformed", expired = "expired", bind = "principal" }

[unasked]
mark = "input request refused on "
pattern = '''input request refused on (?P<method>\\S{1,40}): the client did not declare (?P<capability>[\\w-]{1,9})'''
"""


def test_a_users_adapter_reads_a_32021_line_apart_from_a_32602_one(tmp_path):
    path = tmp_path / "shop-ts.toml"
    path.write_text(UNASKED_ADAPTER)
    found, _ = _read(["2026-11-30T05:12:57Z replica=r2 input request refused on tools/call: the client did not "
                      "declare url-mode", "Error: requestState verification rejected tools/call: mac"],
                     adapter=load_adapter(path))
    assert [(r.code, r.reason, r.logged, r.replica, r.unasked) for r in found] == [
        ("-32021", "missing_capability", "url-mode", "ts1", True), ("-32602", "seal", "", "ts1", False)]
    assert found[0].logged_at == pytest.approx(1796015577.0)


def test_neither_sdk_logs_a_32021_line_so_the_built_in_adapters_read_none_and_say_why():
    """The TypeScript SDK's real output for a -32021 (tests/servers/typescript_sdk/unasked.mjs): the answer on the
    wire, and no line on stderr; the Python SDK's is read in tests/test_hosts.py (a real run's reconciliation)."""
    wire = (Path(__file__).parent / "servers" / "typescript_sdk" / "unasked.log").read_text().splitlines()
    assert len(wire) == 1 and '"code\\":-32021' in wire[0]
    for adapter in adapters().values():
        assert adapter.unasked is None and "-32021" in adapter.unasked_note
        assert all(adapter.read_unasked(line) is None for line in wire)


@pytest.mark.parametrize(("table", "says"), [
    ('[unasked]\nmark = "x"\npattern = "x(?P<capability>a+)+"\n', "not linear"),
    ('[unasked]\nmark = "x"\npattern = "x (?P<capability>\\\\w{1,9})"\n', "has no (?P<method>...) group"),
    ('[unasked]\nmark = "x"\npattern = "x (?P<method>\\\\w{1,9}) (?P<reason>\\\\w)"\n', "group 'reason' is not"),
    ('[unasked]\nmark = "x"\npattern = "x (?P<method>\\\\w{1,9})"\nlevel = "WARN"\n', "unknown key unasked.level"),
    ('unasked = "x"\n', "unasked must be a table"),
])
def test_a_bad_unasked_table_is_refused_in_one_line(tmp_path, table, says):
    with pytest.raises(AdapterError) as refused:
        load_adapter(_adapter_file(tmp_path, r"x(?P<reason>\w{1,9})", table))
    assert says in str(refused.value) and "\n" not in str(refused.value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=20), st.integers(), st.lists(st.text(max_size=5), max_size=3),
                 st.dictionaries(st.sampled_from(["mark", "pattern", "level"]),
                                 st.one_of(st.text(max_size=30), st.integers(), st.booleans()), max_size=3)))
def test_any_unasked_table_is_an_adapter_or_refused_in_one_line_never_raised(unasked):
    from harness.logs.adapters import adapter_from_table

    table = {"name": "a", "mark": "x", "pattern": r"x(?P<reason>\w{1,9})", "unasked": unasked}
    try:
        adapter = adapter_from_table(table, "a.toml")
    except AdapterError as refused:
        assert "\n" not in str(refused)
    else:
        assert (adapter.unasked is None) == (unasked is None)
