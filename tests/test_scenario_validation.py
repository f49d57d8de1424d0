"""`mrtr-harness validate` as a user runs it: endless or zero-length settings refused, every error at its line.

A scenario with `duration = "inf"` or `arrival_rate = inf` would start a run that never
ends (or floods the target); a zero TTL or timeout one that fails for no reason the
target caused. They are refused before anything starts, with exit code 2, and every
error names the line to fix, including those only a whole table can detect (an
external target without urls, a chaos step after the end of the run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness_run import ROOT

BASE = """\
name = "validation"
duration = "30s"
grace = "5s"

[target]
kind = "embedded"
replicas = 2
ttl = "10m"

[load]
model = "open"
arrival_rate = 2
ramp = "5s"
timeout = "30s"

[[flows]]
kind = "refund"

[[chaos]]
at = "5s"
action = "restart"

[[chaos]]
at = "10s"
action = "kill"
replica = 2
"""

# (edit of BASE, the line the error must name, text the error must hold)
BROKEN = {
    "endless-duration": (('duration = "30s"', 'duration = "inf"'), 2, "duration: a duration must be finite"),
    "endless-rate": (("arrival_rate = 2", "arrival_rate = inf"), 12, "load.arrival_rate: must be a finite number"),
    "nan-rate": (("arrival_rate = 2", "arrival_rate = nan"), 12, "load.arrival_rate"),
    "zero-duration": (('duration = "30s"', 'duration = "0s"'), 2, "duration: must be above 0"),
    "zero-ttl": (('ttl = "10m"', "ttl = 0"), 8, "target.ttl: must be above 0"),
    "zero-timeout": (('timeout = "30s"', 'timeout = "0s"'), 14, "load.timeout: must be above 0"),
    "endless-grace": (('grace = "5s"', 'grace = "inf"'), 3, "grace: a duration must be finite"),
    "unjudged-neither-fail-nor-pass": (('grace = "5s"', 'grace = "5s"\nhypothesis_unjudged = "maybe"'), 4,
                                       "hypothesis_unjudged: must be one of 'fail' or 'pass', not 'maybe'"),
    "chaos-after-the-end": (('at = "10s"', 'at = "40s"'), 24, "chaos[2].at: a kill at 40s falls after the end"),
    "chaos-on-a-missing-replica": (("replica = 2", "replica = 3"), 26, "chaos[2].replica: kill names replica 3"),
    "external-without-urls": (('kind = "embedded"', 'kind = "external"'), 6, "target.kind: an external target needs"),
    "auth-without-client-id": (('ttl = "10m"', 'ttl = "10m"\n\n[target.auth]\nkind = "client-credentials"\n'
                                'client_secret_env = "MCP_CLIENT_SECRET"'), 11,
                               "target.auth.kind: client-credentials needs client_id"),
    "auth-secret-in-the-file": (('ttl = "10m"', 'ttl = "10m"\n\n[target.auth]\nkind = "client-credentials"\n'
                                 'client_id = "leads"\nclient_secret_env = "s3cret value!"'), 13,
                                "target.auth.client_secret_env"),
    "auth-tokens-without-a-file": (('ttl = "10m"', 'ttl = "10m"\n\n[target.auth]\nkind = "tokens"'), 11,
                                   "target.auth.kind: file = \"...\" is for kind = \"tokens\""),
    "open-without-a-rate": (("arrival_rate = 2\n", ""), 11, "load.model: an open model needs arrival_rate"),
    "override-of-a-missing-replica": (("replicas = 2\n", "replicas = 2\noverrides = [{ replica = 5 }]\n"), 8,
                                      "target.overrides: overrides names replica 5"),
    "ratio-that-can-never-pass": (("replica = 2\n", 'replica = 2\n\n[expect]\ncompleted_ratio = ">= 5"\n'), 29,
                                  "completed_ratio is a ratio from 0 to 1, so '>= 5' could never pass"),
    "ratio-with-a-count": (("replica = 2\n", 'replica = 2\n\n[expect]\ncompleted_ratio = "count >= 0.9"\n'), 29,
                           "completed_ratio is a ratio (0 to 1) and takes no count"),
    "percentile-above-100": (("replica = 2\n", 'replica = 2\n\n[expect]\nround_duration = "p(195) < 1s"\n'), 29,
                             "p(195) is not a percentile: write p(N) with N above 0 and at most 100"),
    # an unknown key, in every table: a did-you-mean, never "Extra inputs are not permitted"
    "unknown-top-level-key": (('grace = "5s"', 'grace = "5s"\ngarce = "5s"'), 4,
                              "garce: unknown key 'garce'; did you mean 'grace'?"),
    "unknown-target-key": (('ttl = "10m"', 'ttl = "10m"\nreplica = 3'), 9,
                           "target.replica: unknown key 'replica'; did you mean 'replicas'?"),
    "unknown-load-key": (('ramp = "5s"', 'ramp = "5s"\nrouting_mode = "random"'), 14,
                         "load.routing_mode: unknown key 'routing_mode'; did you mean 'routing'?"),
    "unknown-chaos-key": (('action = "kill"', 'action = "kill"\nreplcia = 2'), 26,
                          "chaos[2].replcia: unknown key 'replcia'; did you mean 'replica'?"),
    "unknown-flow-key": (('kind = "refund"', 'kind = "refund"\nwieght = 2'), 18,
                         "unknown key 'wieght'; did you mean 'weight'?"),
    # a key of another action: where it belongs, never a lookalike of the step's own keys ('action')
    "a-pause-key-on-a-restart": (('action = "restart"', 'action = "restart"\nduration = "5s"'), 22,
                                 "chaos[1].duration: a 'restart' takes no 'duration' (it is a key of auth-down, "
                                 "network, pause, subject-drift, token-expiry); the keys here are action, at, replica"),
    "a-call-key-on-a-refund": (('kind = "refund"', 'kind = "refund"\ntool = "x"'), 18,
                               "flows[1].tool: a 'refund' takes no 'tool' (it is a key of call, fuzz)"),
    "a-bad-variable-name": (('ttl = "10m"', 'ttl = "10m"\ncommand_env = ["AWS PROFILE"]'), 9,
                            "target.command_env[1]: must be an environment variable's name: letters, digits and _, "
                            "not starting with a digit"),
    # a union lists its kinds, never "Input tag ... expected tags"
    "unknown-action": (('action = "kill"', 'action = "scale"'), 23,
                       "chaos[2]: action = 'scale' is not one of: restart, kill, pause, rolling-restart"),
    "unknown-flow-kind": (('kind = "refund"', 'kind = "refnud"'), 16,
                          "flows[1]: kind = 'refnud' is not one of: refund, return, payout"),
    "unknown-target-kind": (('kind = "embedded"', 'kind = "kubernetes"'), 6,
                            "target.kind: must be one of 'embedded', 'external', 'docker' or 'stdio', not "
                            "'kubernetes'"),
    "unknown-model": (('model = "open"', 'model = "burst"'), 11, "load.model: must be one of 'open' or 'closed'"),
    "unknown-routing": (('ramp = "5s"', 'ramp = "5s"\nrouting = "sticky"'), 14,
                        "load.routing: must be 'round-robin', 'random', 'other-replica' or 'same-replica'"),
    "unknown-keyring": (('ttl = "10m"', 'ttl = "10m"\nkeyring = "vault"'), 9,
                        "target.keyring: must be one of 'file' or 'ephemeral', not 'vault'"),
    "unknown-store": (('ttl = "10m"', 'ttl = "10m"\nstore = "postgres"'), 9, "target.store: must be one of"),
    # ranges
    "duration-of-centuries": (('duration = "30s"', 'duration = "99999999999h"'), 2,
                              "duration: a duration of at most 30 days, not '99999999999h'"),
    "ttl-over-30-days": (('ttl = "10m"', 'ttl = "31d"'), 8, "target.ttl: a duration of at most 30 days"),
    "timeout-over-30-days": (('timeout = "30s"', 'timeout = "40d"'), 14, "load.timeout: a duration of at most 30 days"),
    "rate-of-a-trillion": (("arrival_rate = 2", "arrival_rate = 1e12"), 12,
                           "load.arrival_rate: must be at most 1,000,000, not 1,000,000,000,000"),
    "negative-rate": (("arrival_rate = 2", "arrival_rate = -1"), 12, "load.arrival_rate: must be above 0, not -1"),
    "rate-as-text": (("arrival_rate = 2", 'arrival_rate = "fast"'), 12, "load.arrival_rate: must be a number"),
    "no-replicas": (("replicas = 2", "replicas = 0"), 7, "target.replicas: must be at least 1, not 0"),
    "too-many-replicas": (("replicas = 2", "replicas = 99"), 7, "target.replicas: must be at most 32, not 99"),
    "replicas-as-text": (("replicas = 2", 'replicas = "two"'), 7, "target.replicas: must be a whole number"),
    "time-scale-below-1": (('grace = "5s"', 'grace = "5s"\ntime_scale = 0.5'), 4,
                           "time_scale: must be at least 1, not 0.5"),
    "seed-as-text": (('grace = "5s"', 'grace = "5s"\nseed = "seven"'), 4, "seed: must be a whole number"),
    "weight-zero": (('kind = "refund"', 'kind = "refund"\nweight = 0'), 18, "flows[1].weight: must be above 0, not 0"),
    "grace-not-a-duration": (('grace = "5s"', 'grace = "soon"'), 3, "grace: not a duration: 'soon'"),
    "chaos-at-a-negative-time": (('at = "5s"', 'at = "-5s"'), 20, "chaos[1].at: not a duration: '-5s'"),
    "stage-rate-of-a-billion": (("timeout = \"30s\"\n",
                                 'timeout = "30s"\nstages = [{ duration = "5s", target = 1e9 }]\n'), 10,
                                "load.stages[1].target: must be at most 1,000,000, not 1,000,000,000"),
    # URLs are parsed
    "a-url-that-is-none": (('kind = "embedded"', 'kind = "external"\nurls = ["not a url"]'), 7,
                           "target.urls[1]: 'not a url' is not an http(s) URL"),
    "a-url-with-a-bad-port": (('kind = "embedded"', 'kind = "external"\nurls = ["http://10.0.0.5:99999/mcp"]'), 7,
                              "'http://10.0.0.5:99999/mcp' is not an http(s) URL"),
    "a-url-carrying-a-password": (('kind = "embedded"', 'kind = "external"\nurls = ["http://ops:hunter2@10.0.0.5/mcp"]'),
                                  7, "target.urls[1]: 'http://***@10.0.0.5/mcp' carries credentials before its host"),
    "an-api-that-is-no-url": (('kind = "embedded"', 'kind = "external"\nurls = ["http://10.0.0.5/mcp"]\n'
                                                    'api = "shop-api"'), 8,
                              "target.api: 'shop-api' is not an http(s) URL"),
    # label values name what the scenario has
    "a-flow-label-that-names-no-flow": (("replica = 2\n", 'replica = 2\n\n[expect]\n"completed_ratio{flow=\'refnud\'}" '
                                                          '= ">= 0.9"\n'), 29,
                                        "flow='refnud' names no flow of this scenario (there are: refund); did you "
                                        "mean 'refund'?"),
    "a-replica-label-that-names-no-replica": (("replica = 2\n", 'replica = 2\n\n[expect]\n"rejections{replica=\'r3\'}" '
                                                                '= "== 0"\n'), 29,
                                              "replica='r3' names no replica of this scenario (there are: r1, r2)"),
    "an-action-label-that-names-no-action": (("replica = 2\n", 'replica = 2\n\n[hypothesis]\n'
                                                               '"chaos_failures{action=\'rotate-keys\'}" = "== 0"\n'),
                                             29,
                                             "action='rotate-keys' names no action of this scenario (there are: "
                                             "kill, restart)"),
    # [reproduces] (the failure a catalogue scenario reproduces) is read as [expect] is
    "a-flow-label-in-reproduces-that-names-no-flow": (("replica = 2\n", 'replica = 2\n\n[reproduces]\n'
                                                                      '"completed_ratio{flow=\'refnud\'}" = "< 0.9"\n'),
                                                      29, "names no flow of this scenario (there are: refund); did "
                                                          "you mean 'refund'?"),
    "a-misspelt-reason-in-reproduces": (("replica = 2\n", 'replica = 2\n\n[reproduces]\n'
                                                        '"rejections{reason=\'unknwon key\'}" = "> 0"\n'), 29,
                                        "reason='unknwon key' is none of the reasons the harness records"),
    "an-unknown-metric": (("replica = 2\n", 'replica = 2\n\n[expect]\nrejection = "== 0"\n'), 29,
                          "unknown metric 'rejection'"),
    "a-label-the-metric-has-not": (("replica = 2\n", 'replica = 2\n\n[expect]\n"completed_ratio{reason=\'seal\'}" '
                                                     '= ">= 0.9"\n'), 29, "'reason' is not a label of this metric"),
    "a-condition-that-reads-as-nothing": (("replica = 2\n", 'replica = 2\n\n[expect]\ncompleted_ratio = "about 0.9"\n'),
                                          29, "cannot read condition 'about 0.9'"),
    "a-distribution-without-aggregate": (("replica = 2\n", 'replica = 2\n\n[expect]\nround_duration = "< 1s"\n'), 29,
                                         "round_duration is a distribution; name an aggregate"),
    "a-rate-on-a-ratio": (("replica = 2\n", 'replica = 2\n\n[expect]\ncompleted_ratio = "rate >= 0.5"\n'), 29,
                          "completed_ratio is a ratio (0 to 1) and takes no rate"),
    "an-outcome-that-is-none": (("replica = 2\n", 'replica = 2\n\n[expect]\n"flows_finished{outcome=\'complete\'}" '
                                                  '= "> 0"\n'), 29,
                                "outcome='complete' is none of the outcomes the harness records (there are: completed, "
                                "declined, "),
    "a-misspelt-reason": (("replica = 2\n", 'replica = 2\n\n[expect]\n"rejections{reason=\'unknwon key\'}" = "== 0"\n'),
                          29, "reason='unknwon key' is none of the reasons the harness records (there are: seal, "),
    "an-invariant-that-is-none": (("replica = 2\n", 'replica = 2\n\n[expect]\n'
                                                    '"invariant_violations{invariant=\'no_double_refund\'}" '
                                                    '= "== 0"\n'), 29, "did you mean 'no_double_release'?"),
    "a-round-that-is-no-number": (("replica = 2\n", 'replica = 2\n\n[expect]\n"round_duration{round=\'first\'}" = '
                                                    '"p(95) < 1s"\n'), 29,
                                  "round='first' is not a round number: write round='1' for a call's first round"),
    "a-threshold-that-is-a-number": (("replica = 2\n", "replica = 2\n\n[expect]\ncompleted_ratio = 0.9\n"), 29,
                                     'expect.completed_ratio: must be text (in quotes) or a list, e.g. ["..."]'),
    # an [expect] error names its key's line, else its table's header line
    "a-threshold-key-in-single-quotes": (("replica = 2\n", "replica = 2\n\n[expect]\n'round_duration{flow=\"refund\"}' "
                                                           '= "p(195) < 1s"\n'), 29, "p(195) is not a percentile"),
    "a-threshold-key-with-escapes": (("replica = 2\n", 'replica = 2\n\n[expect]\n"round_duration{flow=\\"refund\\"}" '
                                                       '= "p(195) < 1s"\n'), 28, "p(195) is not a percentile"),
    "a-threshold-as-a-dotted-key": (('grace = "5s"', 'grace = "5s"\nexpect.completed_ratio = ">= 5"'), 4,
                                    "expect.completed_ratio: completed_ratio is a ratio from 0 to 1"),
    "a-threshold-in-an-inline-table": (('grace = "5s"', 'grace = "5s"\nexpect = { completed_ratio = ">= 5" }'), 4,
                                       "expect.completed_ratio: completed_ratio is a ratio from 0 to 1"),
    # missing pieces: every problem named, not one of them
    "no-duration": (('duration = "30s"\n', ""), None, "duration: is required"),
    "no-flows": (('[[flows]]\nkind = "refund"\n', ""), None, "flows: is required"),
    "commands-on-an-embedded-target": (('ttl = "10m"', 'ttl = "10m"\ncommands = { restart = ["true"] }'), 9,
                                       "[target.commands] applies to external and docker targets"),
    # the shop's authorization server runs only for client credentials found by discovery
    "auth-chaos-on-a-shop-without-auth": (('action = "restart"', 'action = "auth-down"'), 21,
                                          "chaos[1].action: auth-down acts on the shop's own authorization server"),
    "an-embedded-shop-given-a-token-file": (('ttl = "10m"', 'ttl = "10m"\n\n[target.auth]\nkind = "tokens"\n'
                                             'file = "leads.tokens"'), 11,
                                            "target.auth.kind: an embedded shop runs its own authorization server"),
}
PYDANTIC_WORDS = ("Input should", "Extra inputs", "Input tag", "expected tags", "errors.pydantic.dev",
                  "Field required", "Value error", "validation error", "should match pattern", "must match pattern")


UNREADABLE = {
    "a-utf8-bom": (b"\xef\xbb\xbf" + BASE.encode(), "the file starts with a UTF-8 byte-order mark (BOM)"),
    "latin-1": (BASE.replace('"validation"', '"caf\u00e9"').encode("latin-1"),
                "the file is not UTF-8 text (byte 0xe9 at offset"),
    "an-empty-file": (b"", "the file is empty: a scenario needs at least name, duration, [load] and [[flows]]"),
    "blank-lines-only": (b"\n\n  \n", "the file is empty"),
    "not-toml": (b"name = \n", "not valid TOML"),
    "a-binary-file": (bytes(range(256)), "the file is not UTF-8 text"),
}


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_a_file_that_cannot_be_read_as_a_scenario_is_named_as_such_with_exit_2(name, tmp_path):
    content, text = UNREADABLE[name]
    path = tmp_path / f"{name}.toml"
    path.write_bytes(content)
    result = validate(path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{path}:" in result.stderr and text in result.stderr, result.stderr


def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "validate", *map(str, paths)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)


def test_the_base_scenario_is_valid(tmp_path):
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    result = validate(path)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Every broken file validated in one command: each one's exit status is the command's, its message on stderr."""
    folder = tmp_path_factory.mktemp("broken")
    paths = {}
    for name, ((old, new), _, _) in BROKEN.items():
        assert old in BASE, name
        paths[name] = folder / f"{name}.toml"
        paths[name].write_text(BASE.replace(old, new, 1))
    result = validate(*paths.values())
    assert "Traceback" not in result.stderr
    messages = {name: next((line for line in result.stderr.splitlines() if f"{path}:" in line), "")
                for name, path in paths.items()}
    return {name: (result.returncode, message) for name, message in messages.items()}


def test_the_table_of_bad_input_holds_at_least_40_kinds():
    assert len(BROKEN) + len(UNREADABLE) >= 40


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_bad_setting_is_refused_with_exit_2_naming_its_line(refused, name, tmp_path):
    _, line, text = BROKEN[name]
    code, message = refused[name]
    assert code == 2
    assert f"{name}.toml{'' if line is None else f':{line}'}: " in message, message
    assert text in message, message
    assert not any(words in message for words in PYDANTIC_WORDS), message
    # alone, the same file fails the command by itself
    path = tmp_path / f"{name}.toml"
    (old, new), _, _ = BROKEN[name]
    path.write_text(BASE.replace(old, new, 1))
    assert validate(path).returncode == 2


def test_a_password_in_a_url_is_not_echoed_back(refused):
    assert "hunter2" not in refused["a-url-carrying-a-password"][1]


def test_zero_is_accepted_where_it_means_something(tmp_path):
    """A chaos step at the very start, no grace, no ramp, back-to-back restarts and instant leads are all valid."""
    path = tmp_path / "zeros.toml"
    path.write_text(BASE.replace('at = "5s"', 'at = "0s"').replace('grace = "5s"', "grace = 0")
                    .replace('ramp = "5s"', 'ramp = "0s"')
                    + '\n[[chaos]]\nat = "1s"\naction = "rolling-restart"\ninterval = 0\n'
                    + '\n[leads]\nthink = { dist = "constant", value = "0s" }\n')
    result = validate(path)
    assert result.returncode == 0, result.stderr


def test_a_replica_label_is_checked_on_a_docker_target_the_harness_starts_but_not_on_a_compose_one():
    from harness.config.scenario import parse_scenario
    from harness.config.strict import ScenarioError

    head = 'name = "v"\nduration = "30s"\n[load]\narrival_rate = 2\n[[flows]]\nkind = "refund"\n'
    started = head + '[target]\nkind = "docker"\nimage = "shop:test"\nreplicas = 2\n'
    with pytest.raises(ScenarioError, match=r"<scenario>:12: .*replica='r3' names no replica of this scenario "
                                            r"\(there are: r1, r2\)"):
        parse_scenario(started + '[expect]\n"rejections{replica=\'r3\'}" = "== 0"\n')
    compose = head + '[target]\nkind = "docker"\ncompose_project = "shop"\n'
    assert parse_scenario(compose + '[expect]\n"rejections{replica=\'shop-mcp-3\'}" = "== 0"\n')


def _validate_with(env_secret: str | None, *paths: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "MCP_CLIENT_SECRET"}
    if env_secret is not None:
        env["MCP_CLIENT_SECRET"] = env_secret
    return subprocess.run([sys.executable, "-m", "harness", "validate", *paths], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=False, env=env)


def test_a_scenario_whose_secret_variable_is_unset_is_valid_with_a_warning_naming_the_variable():
    """`run` exits 2 when a deployment's client secret is not on this machine: `validate` says so first (a
    warning: the file itself is fine), naming the variable and never a value."""
    unset = _validate_with(None, "scenarios/compose.toml")
    assert unset.returncode == 0, unset.stderr
    assert "scenarios/compose.toml: warning: the environment variable MCP_CLIENT_SECRET is not set" in unset.stderr
    assert "`mrtr-harness run` exits 2 until it is" in unset.stderr
    empty = _validate_with("", "scenarios/compose.toml")
    assert "MCP_CLIENT_SECRET is not set" in empty.stderr
    secret = "s3cret-Value-that-must-not-show-9"
    found = _validate_with(secret, "scenarios/compose.toml")
    assert found.returncode == 0 and "warning" not in found.stderr and secret not in found.stdout + found.stderr


def test_an_embedded_target_with_its_secret_unset_gets_no_warning_it_draws_a_throwaway_one():
    result = _validate_with(None, "scenarios/oauth.toml")
    assert result.returncode == 0 and "MCP_CLIENT_SECRET" not in result.stderr, result.stderr


def test_every_pattern_of_the_scenario_models_is_worded_for_a_person():
    """A key with a `pattern` says what it must be in words (`PATTERNS`), never the regular expression."""
    import re

    from harness.config.auth import ENV_NAME
    from harness.config.worded_errors import PATTERNS

    source = "\n".join(path.read_text() for path in sorted((ROOT / "harness" / "config").glob("*.py")))
    found = {ENV_NAME, *(re.findall(r'pattern=r"([^"]+)"', source))}
    assert len(found) >= 5 and found <= set(PATTERNS), found - set(PATTERNS)


def test_a_value_that_does_not_fit_a_pattern_is_not_echoed():
    """Where a variable's NAME goes, a user may paste the secret itself: the error must not print it."""
    path = ROOT / "scenarios" / "oauth.toml"
    text = path.read_text().replace('client_secret_env = "MCP_CLIENT_SECRET"', 'client_secret_env = "s3cr+t/Value9"')
    from harness.config.scenario import parse_scenario
    from harness.config.strict import ScenarioError

    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text)
    assert "client_secret_env: must be an environment variable's name" in str(refused.value)
    assert "s3cr+t/Value9" not in str(refused.value)


@pytest.mark.parametrize(("argv", "said"), [
    (["run", "scenarios/smoke.toml", "--duration", "10x"],
     "mrtr-harness run: --duration 10x: duration: not a duration: '10x'"),
    (["hunt", "scenarios/smoke.toml", "--budget", "1s"],  # the file has no [hunt]: the default trial no longer fits
     "mrtr-harness hunt: --budget 1s: hunt.trial_duration: a trial of 10s does not fit in the budget of 1s"),
    (["hunt", "scenarios/smoke.toml", "--trial-duration", "5x"],
     "mrtr-harness hunt: --trial-duration 5x: hunt.trial_duration: not a duration: '5x'"),
])
def test_a_flags_bad_value_is_blamed_on_the_flag_not_on_a_line_of_the_file(argv, said):
    done = subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip().startswith(said) and "smoke.toml" not in done.stderr, done.stderr


def test_a_flag_leaves_the_files_own_errors_on_their_lines(tmp_path):
    from harness.config.scenario import parse_scenario
    from harness.config.strict import ScenarioError

    text = BASE.replace('grace = "5s"', 'grace = "soon"', 1)
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text, "s.toml", {"duration": "1m"})
    line = next(n for n, row in enumerate(text.splitlines(), 1) if row.startswith("grace"))
    assert str(refused.value).startswith(f"s.toml:{line}: grace: not a duration")
