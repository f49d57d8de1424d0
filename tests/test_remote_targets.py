"""Care with remote targets: chaos and fuzzing need a host named, a secret needs https off this machine.

`validate` (in process: it loads no runtime) says which rule applies and refuses a broken
one with exit 2; `run` and `capacity` refuse the same way before any traffic, checked
through the real command line against a counting server on 127.0.0.1 beside a URL whose
host is not loopback and is never reached (`remote.invalid`, a reserved name).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.config.remote import check, verdicts
from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from tests.harness_run import ROOT

REMOTE = "http://remote.invalid:8080/mcp"

BASE = """\
name = "targets"
duration = "10s"

[load]
model = "open"
arrival_rate = 1

[[flows]]
kind = "call"
tool = "echo"
"""

CHAOS = """
[[chaos]]
at = "2s"
action = "restart"
"""

FUZZ = """
[[flows]]
kind = "fuzz"
tool = "echo"
arguments = [{a = 1}, {a = 2}]
swap_tool = "other"
"""


def scenario_text(urls: list[str], *, target: str = "", chaos: bool = False, fuzz: bool = False,
                  auth: str = "", marker: Path | None = None) -> str:
    """An external target at `urls` with a restart command (touching `marker`), and chaos, fuzzing or auth."""
    listed = ", ".join(f'"{url}"' for url in urls)
    touch = f'["touch", "{marker}"]' if marker else '["true"]'
    text = BASE.replace("[load]", f"[target]\nkind = \"external\"\nurls = [{listed}]\n{target}\n"
                                  f"[target.commands]\nrestart = {touch}\n\n{auth}\n[load]")
    return text + (CHAOS if chaos else "") + (FUZZ if fuzz else "")


def validate(tmp_path: Path, text: str, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    code = main(["validate", str(path), "--results", str(tmp_path), *args])
    out, err = capsys.readouterr()
    return code, out, err


TOKENS = '[target.auth]\nkind = "tokens"\nfile = "tokens.txt"\n'


def test_a_loopback_target_with_chaos_and_fuzzing_validates_with_no_new_line(tmp_path, capsys):
    text = scenario_text(["http://127.0.0.1:9/mcp", "http://localhost:9/mcp", "http://[::1]:9/mcp"], chaos=True,
                         fuzz=True, auth=TOKENS)
    (tmp_path / "tokens.txt").write_text("token\n")
    assert verdicts(parse_scenario(text)) == []
    code, out, err = validate(tmp_path, text, capsys=capsys)
    assert code == 0, err
    assert "remote:" not in out and err == ""


def test_chaos_against_a_remote_host_is_refused_naming_the_two_ways_to_allow_it(tmp_path, capsys):
    code, out, err = validate(tmp_path, scenario_text(["http://127.0.0.1:9/mcp", REMOTE], chaos=True),
                              capsys=capsys)
    assert code == 2 and ": ok (" not in out
    assert ("chaos against remote host remote.invalid: refused: add it to [target] allow or pass --allow-host"
            in err)


def test_fuzzing_against_a_remote_host_is_refused_too(tmp_path, capsys):
    code, _, err = validate(tmp_path, scenario_text([REMOTE], fuzz=True), capsys=capsys)
    assert code == 2
    assert "fuzzing against remote host remote.invalid: refused" in err


def test_a_remote_target_without_chaos_or_fuzzing_needs_no_allow(tmp_path, capsys):
    code, out, err = validate(tmp_path, scenario_text([REMOTE]), capsys=capsys)
    assert code == 0, err
    assert "remote:" not in out


def test_the_file_or_the_command_line_allows_the_host_and_validate_says_which(tmp_path, capsys):
    allowed = scenario_text([REMOTE], target='allow = ["REMOTE.invalid"]', chaos=True, fuzz=True)
    code, out, _ = validate(tmp_path, allowed, capsys=capsys)
    assert code == 0
    assert "remote: chaos and fuzzing against remote host remote.invalid: allowed by [target] allow" in out
    code, out, _ = validate(tmp_path, scenario_text([REMOTE], chaos=True), "--allow-host", "other.invalid",
                            "--allow-host", "remote.invalid", capsys=capsys)
    assert code == 0
    assert "remote: chaos against remote host remote.invalid: allowed by --allow-host" in out


def test_an_allow_entry_that_is_a_url_is_refused_with_its_line(tmp_path, capsys):
    code, _, err = validate(tmp_path, scenario_text([REMOTE], target='allow = ["http://remote.invalid"]'),
                            capsys=capsys)
    assert code == 2
    assert "scenario.toml:7" in err and "'http://remote.invalid' is not a host name" in err


def test_a_bearer_token_goes_to_a_remote_host_over_https_only(tmp_path, capsys):
    (tmp_path / "tokens.txt").write_text("token\n")
    code, _, err = validate(tmp_path, scenario_text([REMOTE], auth=TOKENS), capsys=capsys)
    assert code == 2
    assert (f"bearer tokens to remote host remote.invalid: refused: plain http off this machine ({REMOTE}); use "
            "https, or set [target.auth] allow_http = true on a private network") in err
    code, out, err = validate(tmp_path, scenario_text(["https://remote.invalid/mcp"], auth=TOKENS), capsys=capsys)
    assert code == 0, err
    assert "remote: bearer tokens to remote host remote.invalid: over https" in out
    private = TOKENS + "allow_http = true\n"
    code, out, err = validate(tmp_path, scenario_text([REMOTE], auth=private), capsys=capsys)
    assert code == 0, err
    assert "bearer tokens to remote host remote.invalid: plain http, allowed by [target.auth] allow_http" in out


def test_a_client_secret_to_a_loopback_token_endpoint_is_allowed_and_to_a_remote_one_only_over_https():
    auth = ('[target.auth]\nkind = "client-credentials"\nclient_id = "c"\nclient_secret_env = "S"\n'
            'token_url = "{}"\n')
    lines = check(parse_scenario(scenario_text(["https://remote.invalid/mcp"],
                                               auth=auth.format("http://127.0.0.1:9/token"))))
    assert lines == ["bearer tokens to remote host remote.invalid: over https"]
    with pytest.raises(ScenarioError, match="token_url http://remote.invalid/token is plain http off this machine"):
        parse_scenario(scenario_text(["https://remote.invalid/mcp"], auth=auth.format("http://remote.invalid/token")))
    discovered = check(parse_scenario(scenario_text(["https://remote.invalid/mcp"],
                                                    auth=auth.replace('token_url = "{}"\n', ""))))
    assert discovered[-1].startswith("client secret to the discovered token endpoint: checked when found")


class Counting(BaseHTTPRequestHandler):
    """Counts every request it is sent, of any method, and answers 404."""

    count = 0

    def _any(self) -> None:
        type(self).count += 1
        self.send_error(404)

    do_GET = do_POST = do_DELETE = do_HEAD = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def counting() -> Iterator[tuple[str, type[Counting]]]:
    handler = type("Handler", (Counting,), {"count": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("command", "rule"), [("run", "chaos"), ("run", "bearer token over http"),
                                               ("capacity", "chaos")])
def test_a_run_is_refused_before_any_traffic(command, rule, counting, tmp_path):
    """`mrtr-harness run` (and `capacity`): exit 2, the rule named, no request reached the loopback replica, the
    chaos command and the token command never ran, and no results folder was made."""
    url, handler = counting
    marker = tmp_path / "ran"
    tokens = f'[target.auth]\nkind = "command"\ncommand = ["sh", "-c", "touch {marker}.token; echo t"]\n'
    text = (scenario_text([url, REMOTE], chaos=True, marker=marker) if rule == "chaos"
            else scenario_text([url, REMOTE], auth=tokens, marker=marker))
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(text)
    results = tmp_path / "results"
    plan = ["--rates", "1"] if command == "capacity" else []
    finished = subprocess.run([sys.executable, "-m", "harness", command, str(scenario), *plan, "--results",
                               str(results), "--quiet"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert finished.returncode == 2, finished.stdout + finished.stderr
    expected = ("chaos against remote host remote.invalid: refused: add it to [target] allow or pass --allow-host"
                if rule == "chaos" else
                "bearer tokens to remote host remote.invalid: refused: plain http off this machine")
    assert expected in finished.stderr
    assert handler.count == 0
    assert not marker.exists() and not Path(f"{marker}.token").exists()
    assert not results.exists() or not any(results.iterdir())


def test_an_address_in_allow_matches_the_url_s_host_with_or_without_brackets():
    text = scenario_text(["http://[2001:DB8::1]:8080/mcp", "http://10.0.0.5:8080/mcp"], chaos=True,
                         target='allow = ["[2001:db8::1]", "10.0.0.5"]')
    assert check(parse_scenario(text)) == ["chaos against remote host 2001:db8::1: allowed by [target] allow",
                                           "chaos against remote host 10.0.0.5: allowed by [target] allow"]
    with pytest.raises(ScenarioError, match="chaos against remote host 10.0.0.5: refused"):
        check(parse_scenario(text.replace(', "10.0.0.5"', "")))
