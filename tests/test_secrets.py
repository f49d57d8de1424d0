"""No secret leaves: the harness's one scrubber, and what the commands it runs for the target are given.

The scrubber (`harness.secrets`) is tried on the texts a chaos command or a server prints:
values the harness registered (found at any offset, also inside JSON, shown by fingerprint)
and the keyword rules (`*_SECRET=`, `Authorization:`, `-u user:pass`, `user:pass@`). Then a
real run against a real MCP server, with tokens from a command and chaos commands that run
with `set -x`, print their whole environment and the tokens the run used: no file of the
results folder and no line of the run's output holds the client secret or any token, and
the commands were given the allow-list and the variables the scenario named, nothing else.
The embedded auth scenarios are scanned the same way where they already run
(tests/test_catalogue.py, tests/test_shop_auth.py).
"""

from __future__ import annotations

import gc
import json
import os
import random
import secrets
import string
from pathlib import Path

import orjson
import pytest

from harness.auth.token import Token
from harness.errors import ExitCode
from harness.journal.segments import SEGMENT_ENV, compress_segment
from harness.secrets import (
    COMMAND_ENV,
    MissingSecret,
    command_env,
    env_secret,
    file_secrets,
    fingerprint,
    register,
    scrub,
    scrub_bytes,
)
from tests.harness_run import Finished, leaks, run_harness
from tests.servers import start_server


@pytest.mark.parametrize(("text", "scrubbed"), [
    ("+ MCP_CLIENT_SECRET=s3cr3t-of-the-user", "+ MCP_CLIENT_SECRET=<redacted>"),
    ("export DB_PASSWORD='hunter2'", "export DB_PASSWORD='<redacted>'"),
    ('{"client_secret": "abc"}', '{"client_secret": "<redacted>"}'),
    ("access_token: abc", "access_token: <redacted>"),
    ("HTTP 401: invalid_token: Authentication required", "HTTP 401: invalid_token: Authentication required"),
    ("GET /x?access_token=abc&page=2", "GET /x?access_token=<redacted>&page=2"),
    ("> Authorization: Bearer abc.def.ghi\n< HTTP/1.1 200", "> Authorization: <redacted>\n< HTTP/1.1 200"),
    ("authorization: Basic Zm9vOmJhcg==", "authorization: <redacted>"),
    ("+ curl -u support-leads:p4ss https://auth/token", "+ curl -u support-leads:<redacted> https://auth/token"),
    ("curl --user=leads:p4ss x", "curl --user=leads:<redacted> x"),
    ("fetching https://leads:p4ss@auth.example/token", "fetching https://leads:<redacted>@auth.example/token"),
    ("redis://:p4ss@127.0.0.1:6379/0", "redis://:<redacted>@127.0.0.1:6379/0"),
    ("restarted r1 in 2.5 s (pid 4242)", "restarted r1 in 2.5 s (pid 4242)"),
    ("the authorization server answered 503", "the authorization server answered 503"),
])
def test_the_keyword_rules_catch_a_secret_by_its_name_header_flag_or_url(text: str, scrubbed: str) -> None:
    assert scrub(text) == scrubbed


def test_a_foreign_text_loses_long_hex_and_random_runs_and_the_harness_own_messages_keep_them() -> None:
    key, token = secrets.token_hex(32), "Ab3" + secrets.token_urlsafe(30) + "Z9"
    printed = f"ring {key} and {token}"
    assert scrub(printed, foreign=True) == "ring <hex> and <token>"
    folder = "results: results/20261204T104021Z-auth-outage"
    assert scrub(folder) == folder


def test_a_registered_value_is_replaced_by_its_fingerprint_wherever_it_stands() -> None:
    value = "plain words only " + secrets.token_hex(4)  # no keyword rule would touch it
    shown = f"<secret {register(value)}>"
    assert register(value) == fingerprint(value)
    assert scrub(f"echo {value}; done") == f"echo {shown}; done"
    assert scrub(f"x{value}{value}y") == f"x{shown}{shown}y"
    line = orjson.dumps({"output": f"said {value}"})
    assert scrub_bytes(line) == orjson.dumps({"output": f"said {shown}"})


def test_a_secret_not_on_this_machine_is_one_error_in_a_variable_or_a_file(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset variable, a file that is not there and a file with no line are the same bad input: exit 2, named."""
    monkeypatch.delenv("MRTR_TEST_SECRET", raising=False)
    (tmp_path / "empty.tokens").write_text("# none yet\n\n")
    with pytest.raises(MissingSecret, match="the environment variable MRTR_TEST_SECRET is not set: it must hold x"):
        env_secret("MRTR_TEST_SECRET", throwaway=False, what="x")
    with pytest.raises(MissingSecret, match=r"\[t\] file .*gone\.tokens: cannot read it: No such file"):
        file_secrets(tmp_path / "gone.tokens", where="[t] file")
    with pytest.raises(MissingSecret, match=r"empty\.tokens holds no token \(one token a line\)") as raised:
        file_secrets(tmp_path / "empty.tokens", where="[t] file")
    assert raised.value.exit_code is ExitCode.USAGE


def test_each_line_of_a_secret_file_is_registered_comments_and_blanks_aside(tmp_path: Path) -> None:
    values = [secrets.token_hex(8), secrets.token_hex(8)]
    (tmp_path / "leads.tokens").write_text(f"# {secrets.token_hex(8)}\n{values[0]}\n\n  {values[1]}  \n")
    assert file_secrets(tmp_path / "leads.tokens", where="[t] file") == values
    assert scrub(" ".join(values)) == " ".join(f"<token {fingerprint(value)}>" for value in values)


def test_a_value_that_json_escapes_is_found_in_a_journal_line_too() -> None:
    value = 'quote " and back\\slash ' + secrets.token_hex(4)
    shown = f"<token {register(value, 'token')}>"
    line = orjson.dumps({"output": value})
    assert value.encode() not in line, "the premise: JSON writes it otherwise"
    assert json.loads(scrub_bytes(line)) == {"output": shown}


def test_every_one_of_many_values_is_found_at_any_offset_and_nothing_else_changes() -> None:
    rng = random.Random(7)
    values = [f"{rng.choice(string.ascii_lowercase)}{secrets.token_hex(rng.randint(4, 40))}" for _ in range(300)]
    for value in values:
        register(value, "token")
    filler = string.ascii_lowercase + " .,:{}\"'"
    for _ in range(200):
        chosen = rng.sample(values, 3)
        pieces = ["".join(rng.choices(filler, k=rng.randint(0, 20))) for _ in range(4)]
        text = pieces[0] + chosen[0] + pieces[1] + chosen[1] + chosen[2] + pieces[2] + pieces[3]
        expected = (pieces[0] + f"<token {fingerprint(chosen[0])}>" + pieces[1] + f"<token {fingerprint(chosen[1])}>"
                    + f"<token {fingerprint(chosen[2])}>" + pieces[2] + pieces[3])
        assert scrub_bytes(text.encode()) == expected.encode()


def test_a_token_no_longer_held_is_forgotten_unless_something_else_still_holds_it() -> None:
    """A soak refreshes every token many times: the registry holds the tokens in use, not every one ever seen."""
    dropped, kept = (f"tok-{secrets.token_hex(8)}" for _ in range(2))
    register(kept, "token")  # as a tokens file registers each of its lines
    tokens = [Token(dropped, 0.0), Token(kept, 0.0)]
    assert scrub(f"{dropped} {kept}") == f"<token {fingerprint(dropped)}> <token {fingerprint(kept)}>"
    del tokens
    gc.collect()
    assert scrub(f"{dropped} {kept}") == f"{dropped} <token {fingerprint(kept)}>"


def test_a_value_too_short_to_search_for_is_not_registered() -> None:
    register("ab3")
    assert scrub_bytes(b'{"ab3":"ab3"}') == b'{"ab3":"ab3"}', "a JSON key or a word is never taken for it"


def test_a_command_is_given_the_allow_list_and_the_variables_named_and_nothing_else(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_CLIENT_SECRET", "not-for-commands")
    monkeypatch.setenv("KUBECONFIG", "/tmp/kube")
    monkeypatch.setenv("PATH", "/usr/bin")
    env = command_env(["KUBECONFIG", "MRTR_UNSET_VARIABLE"], {"MRTR_RUN_ID": "r1"})
    assert env["PATH"] == "/usr/bin" and env["KUBECONFIG"] == "/tmp/kube" and env["MRTR_RUN_ID"] == "r1"
    assert "MCP_CLIENT_SECRET" not in env and "MRTR_UNSET_VARIABLE" not in env
    assert set(env) <= {*COMMAND_ENV, "KUBECONFIG", "MRTR_RUN_ID"}


TOKEN_COMMAND = """
set -e
value="tok-lead$1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \\n')"
echo "$value" >> "{folder}/issued.txt"
env > "{folder}/token-env.txt"
echo "$value"
"""
"""Prints a fresh token for lead $1, and keeps it (and its environment) where the test can read them."""

CHAOS_COMMAND = """
set -x
env > "{folder}/chaos-env.txt"
env
X_SECRET=$(cat "{folder}/inline.txt")
echo "the client secret is $MCP_CLIENT_SECRET"
cat "{folder}/issued.txt"
"""
"""Everything a careless script prints: its environment, a traced assignment, the tokens the run used."""

SCENARIO = """
name = "secrets"
seed = 3
duration = "3s"
time_scale = 60
grace = "30s"

[target]
kind = "external"
urls = ["{url}"]
command_env = ["MRTR_TEST_NAMED"]

[target.commands]
auth-down = ["sh", "-c", {chaos}]
auth-up = ["sh", "-c", {chaos}]

[target.auth]
kind = "command"
command = ["sh", "-c", {token}, "sh", "{{lead}}"]
command_env = ["MRTR_TEST_TOKEN_NAMED"]
principals = 2

[load]
arrival_rate = 4

[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
answers = {{ sku = "mug" }}

[leads]
think = {{ dist = "constant", value = "0s" }}

[[chaos]]
at = "0.5s"
action = "auth-down"
duration = "0.5s"
"""


def test_a_run_whose_commands_print_everything_leaves_no_secret_and_no_token_anywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "user-secret-" + secrets.token_urlsafe(12)
    monkeypatch.setenv("MCP_CLIENT_SECRET", secret)
    monkeypatch.setenv("MRTR_TEST_NAMED", "named-for-chaos")
    monkeypatch.setenv("MRTR_TEST_TOKEN_NAMED", "named-for-tokens")
    folder = tmp_path / "commands"
    folder.mkdir()
    (folder / "inline.txt").write_text("inline-secret-of-the-script\n")  # read by the script: `set -x` shows it
    desk = start_server("tests.servers.refund_desk", log=tmp_path / "desk.log")
    try:
        scenario = tmp_path / "secrets.toml"
        scenario.write_text(SCENARIO.format(url=desk.url, token=json.dumps(TOKEN_COMMAND.format(folder=folder)),
                                            chaos=json.dumps(CHAOS_COMMAND.format(folder=folder))))
        finished = run_harness(scenario, tmp_path / "results", env={SEGMENT_ENV: "2048"})  # segments roll, compressed
    finally:
        desk.stop()

    assert finished.code == 0, finished.output
    assert finished.folder is not None and list(finished.folder.glob("journal.*.jsonl.zst")), "leaks() reads those too"
    tokens = (folder / "issued.txt").read_text().split()
    assert len(tokens) >= 2, "a token per principal, from the command"
    found = leaks(finished, {"the client secret": secret, "the script's secret": "inline-secret-of-the-script",
                             **{f"token {n}": token for n, token in enumerate(tokens)}})
    assert found == [], found
    ran = [record for record in finished.journal() if record["type"] == "command"]
    assert [record["name"] for record in ran] == ["auth-down", "auth-up"] and all(r["ok"] for r in ran)
    assert f"<token {fingerprint(tokens[-1])}>" in ran[0]["output"], "a token printed is shown by its fingerprint"
    for env_file, named, other in (("chaos-env.txt", "MRTR_TEST_NAMED", "MRTR_TEST_TOKEN_NAMED"),
                                   ("token-env.txt", "MRTR_TEST_TOKEN_NAMED", "MRTR_TEST_NAMED")):
        given = dict(line.split("=", 1) for line in (folder / env_file).read_text().splitlines() if "=" in line)
        assert "MCP_CLIENT_SECRET" not in given and other not in given, sorted(given)
        assert given[named].startswith("named-for-") and given["PATH"] == os.environ["PATH"]
        assert set(given) <= {*COMMAND_ENV, named, "MRTR_RUN_ID", "OLDPWD", "SHLVL", "_"}, sorted(given)


def test_a_secret_in_a_compressed_journal_segment_is_a_leak_as_in_a_plain_file(tmp_path: Path) -> None:
    """What `leaks` reads: a journal's closed segments are zstd on disk; a secret inside one still counts."""
    folder = tmp_path / "run"
    folder.mkdir()
    segment = folder / "journal.000000000042.jsonl"
    lines = [f'{{"type":"round","t":{n / 7:.6f},"flow_id":"w0-{n:06d}","outcome":"complete"}}\n' for n in range(500)]
    lines[250] = '{"type":"command","output":"token=leaked-value-4f1c2b"}\n'
    segment.write_text("".join(lines))
    compressed = compress_segment(segment)
    assert compressed is not None and not segment.exists()
    assert b"leaked-value-4f1c2b" not in compressed.read_bytes()  # not found by a plain search of the bytes
    finished = Finished(0, "", folder)
    assert leaks(finished, {"the token": "leaked-value-4f1c2b"}) == [(compressed.name, "the token")]


def test_the_allow_list_in_the_docs_is_the_one_the_code_gives():
    """docs/your-deployment.md lists the variables a command is given by hand: it must list exactly COMMAND_ENV."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "your-deployment.md").read_text()
    section = text.split("### What a command is given", 1)[1].split("(where set)", 1)[0]
    listed = [word for line in section.splitlines() if line.startswith("    ") for word in line.split()]
    assert listed == list(COMMAND_ENV)
