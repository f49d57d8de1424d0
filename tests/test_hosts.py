"""`[[hosts]]`: what each host's client declares and speaks, which lead sits behind which, and the breakdown by host.

The catalogue's host scenarios (tests/test_catalogue.py) run each host kind against the
process backend; here: the scenario's refusals at their line, the seed that fixes every
lead's host, and a forms-only host against the shop's URL-mode payout, read back from
summary.json and the run's metrics.
"""

from __future__ import annotations

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION
from prometheus_client.parser import text_string_to_metric_families

from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from harness.load.flow import host_for
from harness.vocabulary import HANDSHAKE_REVISIONS, MODERN_REVISION
from tests.harness_run import run_harness
from tests.servers import start_server

BASE = """\
name = "hosts"
seed = 5
duration = "4s"
time_scale = 60

[load]
arrival_rate = 4

[[flows]]
kind = "payout"

[leads]
think = { dist = "constant", value = "10s" }
url_completion = { dist = "constant", value = "5s" }
"""


def scenario_with(hosts: str):
    return parse_scenario(BASE + hosts, "hosts.toml")


def test_the_protocols_are_the_sdks():
    assert MODERN_REVISION == LATEST_MODERN_VERSION
    assert set(HANDSHAKE_REVISIONS) <= set(HANDSHAKE_PROTOCOL_VERSIONS)


def test_no_hosts_is_the_one_default_host():
    (host,) = scenario_with("").host_list
    assert (host.name, host.elicitation, host.protocol, host.url_retry) == \
        ("default", ["form", "url"], "2026-07-28", "after-completion")


@pytest.mark.parametrize(("entry", "line", "words"), [
    ('name = "a"\npoll_every = "5s"\n', 18, "poll_every applies to url_retry = \"poll\" only"),
    ('name = "a"\nprotocol = "2025-06-18"\nelicitation = ["form"]\n', 19, "declares both modes or none"),
    ('name = "a"\nprotocol = "2025-06-18"\nurl_retry = "poll"\n', 19, "never polls"),
    ('name = "a"\nprotocol = "2024-11-05"\n', 18, "2026-07-28"),
    ('name = "a"\nelicitation = ["form", "form"]\n', 18, "names a mode twice"),
    ('name = "a"\n\n[[hosts]]\nname = "a"\n', 20, "host 'a' is named twice"),
])
def test_a_bad_host_is_refused_at_its_line_in_plain_words(entry, line, words):
    with pytest.raises(ScenarioError) as refused:
        scenario_with("\n[[hosts]]\n" + entry)
    message = str(refused.value)
    assert f"hosts.toml:{line}: hosts[" in message, message
    assert words in message, message


def test_a_threshold_naming_no_host_is_refused():
    with pytest.raises(ScenarioError, match="host='dekstop' names no host of this scenario.*did you mean 'desktop'"):
        scenario_with('\n[[hosts]]\nname = "desktop"\n\n[expect]\n"client_errors{host=\'dekstop\'}" = "== 0"\n')


def test_the_shops_options_are_refused_on_a_deployment_the_harness_does_not_start():
    with pytest.raises(ScenarioError, match=r"hosts.toml:19: target.payment_rounds: payment_rounds applies to the "
                                            r"shop the harness starts"):
        scenario_with('\n[target]\nkind = "external"\nurls = ["http://127.0.0.1:9/mcp"]\npayment_rounds = 0\n')


def test_a_seed_fixes_the_host_of_every_lead():
    hosts = scenario_with('\n[[hosts]]\nname = "a"\nweight = 3\n\n[[hosts]]\nname = "b"\n').host_list
    ids = [f"w{worker}-{number:06d}" for worker in range(2) for number in range(1, 301)]
    first = [host_for(hosts, 7, flow_id).name for flow_id in ids]
    assert first == [host_for(hosts, 7, flow_id).name for flow_id in ids]
    assert first != [host_for(hosts, 8, flow_id).name for flow_id in ids]
    assert 0.65 < first.count("a") / len(first) < 0.85  # weight 3 to 1: three leads in four, give or take


def test_a_forms_only_host_gets_32021_where_the_shop_asks_in_url_mode(tmp_path):
    path = tmp_path / "forms-only.toml"
    path.write_text(BASE + '\n[[hosts]]\nname = "desktop"\n\n[[hosts]]\nname = "kiosk"\nelicitation = ["form"]\n')
    finished = run_harness(path, tmp_path / "results")
    assert finished.code == 0, finished.output
    hosts = finished.summary["hosts"]
    assert hosts["kiosk"]["errors_by_code"].get("-32021", 0) > 0, hosts
    assert "-32021" not in hosts["desktop"]["errors_by_code"], hosts
    assert hosts["desktop"]["by_outcome"].get("completed", 0) > 0, hosts
    samples = {(sample.labels["host"], sample.labels.get("code") or sample.labels.get("outcome")): sample.value
               for family in text_string_to_metric_families((finished.folder / "metrics.prom").read_text())
               if family.name in ("mrtr_host_client_errors", "mrtr_host_flows_finished")
               for sample in family.samples if sample.name.endswith("_total")}
    assert samples[("kiosk", "-32021")] == hosts["kiosk"]["errors_by_code"]["-32021"]
    assert samples[("desktop", "-32021")] == 0  # pre-set: the panel shows a flat zero, not "no data"
    assert samples[("desktop", "rounds_exceeded")] == 0
    assert samples[("desktop", "completed")] == hosts["desktop"]["by_outcome"]["completed"]
    # reconciliation explains -32021 apart from -32602: the shop's replicas (the Python SDK's server, which logs no
    # line when it refuses with -32021) gave no line, so each is unexplained, and the run passes all the same
    unasked = finished.summary["reconciliation"]["unasked"]
    assert unasked["client"] == hosts["kiosk"]["errors_by_code"]["-32021"]
    assert (unasked["logged"], unasked["matched"], unasked["unexplained"]) == (0, 0, unasked["client"])
    assert finished.summary["reconciliation"]["passed"] is True


BLACK_HOLE = """\
name = "black-hole"
seed = 7
duration = "2s"
time_scale = 60
grace = "60s"  # far longer than the timeout: a call that ignored it would still be in flight when the run ends

[target]
kind = "external"
urls = ["{url}"]

[load]
arrival_rate = 2
timeout = "2s"

[[flows]]
kind = "call"
tool = "slow"
arguments = [{{ seconds = 600 }}]

[[hosts]]
name = "old"
protocol = "2025-11-25"
"""


def test_a_2025_hosts_call_to_a_tool_that_never_answers_ends_by_the_load_timeout(tmp_path):
    """The SDK's own defaults (30 s, 300 s for a stream) would keep the call open past `grace`: it obeys
    `[load] timeout` instead, journaled as a round that timed out."""
    garden = start_server("tests.servers.garden", log=tmp_path / "garden.log")
    try:
        path = tmp_path / "black-hole.toml"
        path.write_text(BLACK_HOLE.format(url=garden.url))
        finished = run_harness(path, tmp_path / "results")
    finally:
        garden.stop()
    records = finished.journal()
    rounds = [record for record in records if record["type"] == "round"]
    flows = [record for record in records if record["type"] == "flow"]
    assert rounds and {(record["outcome"], record["host"]) for record in rounds} == {("timeout", "old")}, \
        finished.output
    assert flows and not any(record.get("interrupted_by_run") for record in flows), "every call ended by itself"
