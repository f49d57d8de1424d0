"""A Kubernetes log source follows pods as they are replaced, and a log command gets the commands' environment.

No cluster runs on a test machine, so `kubectl` is `tests/fake_kubectl.py` over a folder of pods;
everything else (the source, the collector, the parser, the scenario's entry, the target) is real.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime

import pytest

from harness.config.logs import parse_log_location
from harness.config.scenario import load_scenario, parse_scenario
from harness.logs.collector import Collector, LostSource, RejectionEvent
from harness.logs.kubernetes import KubernetesSource
from harness.targets.external import ExternalTarget
from harness.triage.cli import _sources, add_parser, parse_options
from harness.triage.counts import LiveCounts
from harness.triage.session import Session
from tests.harness_run import ROOT
from tests.test_logs import wait_for


def stamped(t: float, reason: str) -> str:
    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return f"{stamp} WARNING mcp.server.request_state: requestState rejected on tools/call: {reason}\n"


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A folder of pods, and `kubectl` on PATH playing the cluster over it."""
    folder = tmp_path / "cluster"
    (folder / "pods").mkdir(parents=True)
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    kubectl = bin_folder / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "fake_kubectl.py"}" "$@"\n')
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CLUSTER", str(folder))
    monkeypatch.setenv("MCP_CLIENT_SECRET", "hunter2-hunter2-hunter2")
    return folder


def follow(entry: str, since: float) -> tuple[Collector, list[RejectionEvent], list[LostSource]]:
    events: list[RejectionEvent] = []
    lost: list[LostSource] = []
    collector = Collector(events.append, since=since, on_lost=lost.append)
    spec = parse_log_location(entry, 0)
    collector.follow(spec.__class__(spec.kind, spec.location, spec.replica, pass_env=("FAKE_CLUSTER",)))
    return collector, events, lost


def test_a_replaced_pod_is_followed_and_each_line_counts_for_its_own_pod(cluster):
    began = time.time()
    (cluster / "pods" / "mcp-7d9f-aaaaa").write_text(stamped(began - 60, "seal") + stamped(began + 0.1, "expired"))
    collector, events, lost = follow("kubernetes:mrtr:app.kubernetes.io/name=mcp", began)
    try:
        wait_for(lambda: [event.reason for event in events] == ["expired"], "the first pod's line since the run")
        (cluster / "pods" / "mcp-7d9f-aaaaa").unlink()  # deleted, and replaced by a new pod
        (cluster / "pods" / "mcp-7d9f-bbbbb").write_text(stamped(time.time(), "unknown key"))
        wait_for(lambda: len(events) == 2, "the new pod's line")
    finally:
        collector.stop(settle=0.1)
    assert [(event.replica, event.reason) for event in events] == [("mcp-7d9f-aaaaa", "expired"),
                                                                     ("mcp-7d9f-bbbbb", "unknown key")]
    assert lost == []
    calls = (cluster / "calls").read_text().splitlines()
    assert "--namespace=mrtr get pods --selector=app.kubernetes.io/name=mcp --watch --output=name" in calls
    env = (cluster / "env").read_text()
    assert "MCP_CLIENT_SECRET" not in env and "FAKE_CLUSTER" in env


def test_a_restarted_container_is_read_on_from_its_last_line_not_twice(cluster):
    began = time.time()
    pod = cluster / "pods" / "mcp-0"
    pod.write_text(stamped(began + 0.1, "expired"))
    collector, events, _ = follow("kubernetes:app=mcp", began)
    try:
        wait_for(lambda: len(events) == 1, "the first line")
        pod.unlink()  # the container stops: its stream ends with 0
        pod.write_text(stamped(began + 0.1, "expired") + stamped(time.time(), "seal"))  # the same pod, restarted
        os.utime(pod)
        wait_for(lambda: any(event.reason == "seal" for event in events), "the restarted container's new line")
    finally:
        collector.stop(settle=0.1)
    assert [event.reason for event in events] == ["expired", "seal"]  # a line read twice would come before `seal`


def test_a_watch_that_keeps_failing_ends_the_source_and_its_pods_go_unobserved(cluster):
    (cluster / "watch-exit").write_text("1")
    collector, _, lost = follow("kubernetes:app=mcp", time.time())
    try:
        for _ in range(2):
            wait_for(lambda: not (cluster / "watch-exit").exists(), "the watch to fail")
            (cluster / "watch-exit").write_text("1")
        wait_for(lambda: bool(lost), "the source to be lost")
    finally:
        collector.stop(settle=0.1)
    assert "the watch of its pods failed 3 times" in lost[0].why and lost[0].replica == "log1"


def test_a_bad_kubernetes_entry_is_refused_with_the_forms_it_may_take():
    for entry, words in (("kubernetes:", "nothing after"), ("kubernetes:Mrtr:app=mcp", "no Kubernetes namespace"),
                         ("kubernetes:--all-namespaces", "no label selector")):
        with pytest.raises(ValueError, match=words):
            parse_log_location(entry, 0)
    assert KubernetesSource("app=mcp", since=0).name == "kubernetes app=mcp"


SCENARIO = """
name = "env"
duration = "1s"

[target]
kind = "external"
urls = ["http://127.0.0.1:9/mcp"]
logs = ["command:{python} {script}"]
command_env = ["FAKE_CLUSTER"]

[load]
arrival_rate = 1

[[flows]]
kind = "call"
tool = "t"
"""


def test_a_log_command_gets_the_commands_environment_never_the_client_secret(cluster, tmp_path):
    """`logs = ["command:..."]` inherited the whole environment at 512d30e, client secret included."""
    script = tmp_path / "env.py"
    script.write_text('import os\nprint("secret", os.environ.get("MCP_CLIENT_SECRET"))\n'
                      'print("named", os.environ.get("FAKE_CLUSTER"))\n')
    scenario = tmp_path / "env.toml"
    scenario.write_text(SCENARIO.format(python=sys.executable, script=script))
    target = ExternalTarget(load_scenario(scenario))
    said: list[str] = []
    collector = Collector(lambda event: None, since=time.time(), on_line=lambda replica, line: said.append(line))
    for source in target.log_sources():
        collector.follow(source)
    try:
        wait_for(lambda: len(said) == 2, "the command's two lines")
    finally:
        collector.stop(settle=0.1)
    assert said == ["secret None", f"named {cluster}"]
    assert parse_scenario(scenario.read_text()).target.logs  # the entry validates as written


def test_the_shipped_kubernetes_scenarios_follow_pods_as_they_are_replaced():
    for path in (ROOT / "scenarios" / "kubernetes.toml", ROOT / "scenarios" / "external" / "capacity.toml"):
        kinds = [parse_log_location(entry, index).kind
                 for index, entry in enumerate(load_scenario(path).target.logs)]
        assert kinds == ["kubernetes"], path
    deployed = (ROOT / "deploy" / "kubernetes" / "harness" / "scenario.yaml").read_text()
    assert 'logs = ["kubernetes:mrtr:app.kubernetes.io/name=mcp"]' in deployed
    example = (ROOT / "docs" / "your-deployment.md").read_text().split("```toml", 1)[1].split("```", 1)[0]
    assert "kubernetes:mrtr:app.kubernetes.io/name=mcp" in example and "logs -f -l" not in example


def test_triage_follows_the_pods_of_a_selector_as_they_are_replaced(cluster):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    options = parse_options(parser.parse_args(["triage", "--kubernetes", "mrtr:app.kubernetes.io/name=mcp"]))
    sources = _sources(options)
    for source in sources:
        source.open()
    counts = LiveCounts()
    session = Session(sources, counts)
    (cluster / "pods" / "mcp-a").write_text(stamped(time.time() + 0.5, "seal"))
    session.start()
    try:
        wait_for(lambda: counts.snapshot().rejections == 1, "the first pod's rejection")
        (cluster / "pods" / "mcp-a").unlink()
        (cluster / "pods" / "mcp-b").write_text(stamped(time.time() + 0.5, "expired"))
        wait_for(lambda: counts.snapshot().rejections == 2, "the replacing pod's rejection")
    finally:
        session.stop()
    assert counts.snapshot().total == {"seal": {"mcp-a": 1}, "expired": {"mcp-b": 1}}
    env = (cluster / "env").read_text()
    assert "MCP_CLIENT_SECRET" in env  # triage's own user's command line: their environment, as --command has
