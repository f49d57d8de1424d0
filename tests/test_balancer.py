"""Behind a balancer every round goes to one URL: the replica that served it is read off its answer.

Real parts: a shop deployment of two replicas sharing a key ring, a round-robin TCP
balancer in front of them (`tests.servers.round_robin`, a new backend per connection, as
HAProxy with `http-reuse never`), and a real `mrtr-harness run` against the balancer's one
URL as an external target.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

from tests.harness_run import run_harness
from tests.servers import start_server

SCENARIO = """
name = "balanced"
seed = 5
duration = "6s"
time_scale = 60
grace = "5s"

[target]
kind = "external"
urls = ["{url}"]
api = "{api}"

[load]
arrival_rate = 4
routing = "other-replica"   # not honoured through one URL: the run says so, and the balancer chooses

[[flows]]
kind = "refund"

[leads]
think = {{ dist = "constant", value = "10s" }}
decline = 0.0
cancel = 0.0
abandon = 0.0

[expect]
rejections = "== 0"
crossed_replica_share = "> 0"
"""


def test_rounds_sent_through_a_balancer_are_counted_under_the_replica_that_served_them(deploy, tmp_path: Path):
    deployment = deploy(replicas=2)
    backends = [f"127.0.0.1:{urlsplit(url).port}" for url in deployment.replica_urls]
    arguments = [argument for backend in backends for argument in ("--backend", backend)]
    balancer = start_server("tests.servers.round_robin", *arguments)
    try:
        assert deployment.api is not None
        scenario = tmp_path / "balanced.toml"
        scenario.write_text(SCENARIO.format(url=balancer.url, api=deployment.api.base_url))
        finished = run_harness(scenario, tmp_path / "results", timeout=120)
    finally:
        balancer.stop()
    assert finished.code == 0, finished.output
    assert f'warning: load.routing = "other-replica" cannot be honoured through one URL ({balancer.url})' \
        in finished.output
    rounds = [record for record in finished.journal() if record.get("type") == "round"]
    assert len(rounds) >= 20, len(rounds)
    assert {record["replica"] for record in rounds} == {"r1", "r2"}  # not the balancer's one URL
    served: dict[tuple[str, str], set[str]] = defaultdict(set)
    for record in rounds:
        served[(record["flow_id"], record["tool"])].add(record["replica"])
    assert any(len(replicas) == 2 for replicas in served.values())  # a call's rounds crossed replicas
    continuations = [record for record in rounds if record["round"] > 1]
    crossed = sum(record["crossed"] for record in continuations)
    assert crossed > 0
    assert finished.summary["crossed_replicas"] == {"continuations": len(continuations), "crossed": crossed,
                                                    "share": round(crossed / len(continuations), 4)}
