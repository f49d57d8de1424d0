"""The Kubernetes manifests (`deploy/kubernetes/`) and `scenarios/kubernetes.toml`, checked without a cluster.

No cluster can run here, so each object is validated against the Kubernetes API's own
schemas (bundled by `kubernetes-validate`, strict: an unknown field is an error), and what
ties the parts together is checked as a user would before applying: the Services select
the pods they are for, the replicas mount the ring Secret where their `--keyring` reads it,
and the scenario's kubectl commands name objects the manifests define.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from harness.cli.main import main
from harness.config.chaos import COMMAND_NAMES, ChaosStep, commands_needed
from harness.config.scenario import load_scenario
from tests.harness_run import ROOT

MANIFESTS = ROOT / "deploy" / "kubernetes"


def objects() -> list[tuple[Path, dict[str, Any]]]:
    found = [(path, doc) for path in sorted(MANIFESTS.glob("*.yaml"))
             for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert found, "no manifests in deploy/kubernetes"
    return found


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in objects() if doc["kind"] == kind}


@pytest.mark.parametrize(("path", "manifest"), objects(),
                         ids=[f"{path.name}:{doc['kind']}/{doc['metadata']['name']}" for path, doc in objects()])
def test_every_manifest_is_valid_against_the_kubernetes_api_schema(path, manifest):
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_the_services_select_the_pods_of_their_deployments_on_their_ports():
    deployments = by_kind("Deployment")
    services = by_kind("Service")
    assert set(services) == {"mcp", "shop-api", "redis"} and set(deployments) == {"mcp", "shop-api", "redis"}
    for name, service in services.items():
        pod = deployments[name]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), name
        ports = {port["name"] for container in pod["spec"]["containers"] for port in container["ports"]}
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports, name


def test_the_replicas_share_one_ring_from_the_secret_mounted_where_their_keyring_reads_it():
    replica = by_kind("Deployment")["mcp"]["spec"]
    assert replica["replicas"] > 1
    [container] = replica["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["shop", "replica"]
    keyring = args[args.index("--keyring") + 1]
    assert keyring == "file:/ring/keys"
    [mount] = container["volumeMounts"]
    [volume] = [v for v in replica["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert mount["mountPath"] == "/ring" and volume["secret"]["secretName"] == "mcp-keyring"
    assert args[args.index("--api") + 1] == "http://shop-api:8100"
    assert args[args.index("--store") + 1] == "redis://redis:6379/0"
    assert args[args.index("--allowed-host") + 1] == "*"
    env = {item["name"] for item in container["env"]}
    assert {"MCP_TTL", "MCP_NAME", "MCP_CLOCK_OFFSET", "POD_NAME"} <= env


def test_the_kubernetes_scenario_drives_those_objects_through_kubectl():
    scenario = load_scenario(ROOT / "scenarios" / "kubernetes.toml")
    commands = {name: " ".join(argv) for name, argv in scenario.target.commands.items()}
    assert {"restart", "add-key", "promote-key", "retire-key", "scale"} <= set(commands)
    labels = by_kind("Deployment")["mcp"]["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{key}={value}" for key, value in labels.items())
    assert selector in commands["restart"] and "{index}" in commands["restart"]
    for step in ("add-key", "promote-key", "retire-key"):
        assert "secret generic mcp-keyring --from-file=keys=" in commands[step] and "{key_file}" in commands[step]
    assert 'deploy/mcp "--replicas=$1"' in commands["scale"] and commands["scale"].endswith(" sh {replicas}")
    for variable in ("MCP_TTL", "MCP_NAME", "MCP_CLOCK_OFFSET"):  # the value an argument after the script
        assert f'set env deploy/mcp "{variable}=$1' in " ".join(commands.values())
    assert [step.action for step in scenario.chaos] == ["restart", "rotate-keys"]


# --- following every pod, and what one URL can and cannot do ------------------------------------


KUBECTL_LOGS = re.compile(r"kubectl(?: -n \S+)? logs\b[^`\"'\n|]*")


def kubectl_logs_examples() -> list[tuple[str, str]]:
    """Every `kubectl logs` command a user may copy: README, docs/, the scenarios and triage's --help."""
    from harness.triage.cli import DESCRIPTION

    texts = {path.relative_to(ROOT).as_posix(): path.read_text()
             for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
                          *sorted((ROOT / "scenarios").rglob("*.toml"))]}
    texts["mrtr-harness triage --help"] = DESCRIPTION
    return [(where, match.group(0).strip()) for where, text in texts.items() for match in KUBECTL_LOGS.finditer(text)]


def test_every_kubectl_logs_example_follows_every_pod():
    """Of the replicas, that is: the harness's own Job (`logs job/...`, or `logs "$job"`, cut at the quote, in
    docs/harness-in-kubernetes.md) has one pod and its output is no replica's."""
    examples = [(where, command) for where, command in kubectl_logs_examples()
                if " job/" not in command and not command.endswith(" logs")]
    assert len(examples) >= 2  # triage's: the scenarios follow pods with `kubernetes:` (tests/test_kubernetes_logs.py)
    for where, command in examples:
        argv = command.split()
        assert "-l" in argv or any(arg.startswith(("--selector", "-l=")) for arg in argv), (where, command)
        assert {"--prefix", "--tail=0"} <= set(argv), (where, command)
        assert any(arg.startswith("--max-log-requests=") for arg in argv), (where, command)


def test_the_kubernetes_scenario_fails_a_run_whose_states_never_crossed_pods():
    scenario = load_scenario(ROOT / "scenarios" / "kubernetes.toml")
    assert scenario.expect["crossed_replica_share"] == "> 0"


def readme_command_table() -> dict[str, str]:
    """docs/your-deployment.md's table of `[target.commands]` names: name -> what runs it."""
    readme = (ROOT / "docs" / "your-deployment.md").read_text()
    table = readme[readme.index("| command | run by |"):].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        names, runner = line.strip("|").split("|")
        for name in re.findall(r"`([\w-]+)`", names):
            rows[name] = runner
    return rows


def test_the_readme_names_every_command_and_the_actions_that_run_it():
    table = readme_command_table()
    assert set(table) == set(COMMAND_NAMES)
    for name, runner in table.items():
        actions = re.findall(r"`([\w-]+)`", runner.split("(")[0]) if "same name" not in runner else [name]
        if name == "scale":
            assert "no action" in runner and "capacity --replicas" in runner
            continue
        if name == "scope-restore":  # optional: what undoes scope-loss at the rollback, if the deployment has it
            assert "no action" in runner and "rollback only" in runner
            continue
        assert actions, name
        for action in actions:
            required = {"set-ttl": {"ttl": 1}, "rename": {"name": "x"}}.get(action, {})
            step = TypeAdapter(ChaosStep).validate_python({"at": 0, "action": action, **required})
            assert name in commands_needed(step), (name, action)


def test_scale_is_a_command_and_not_a_chaos_action(tmp_path):
    with pytest.raises(ValidationError, match="scale"):
        TypeAdapter(ChaosStep).validate_python({"at": 0, "action": "scale"})
    assert "scale" in COMMAND_NAMES


def validate(tmp_path: Path, capsys, text: str) -> tuple[int, str]:
    path = tmp_path / "one-url.toml"
    path.write_text(text)
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err


ONE_URL = '''
name = "one-url"
duration = "1m"
[target]
kind = "external"
urls = ["http://mcp.example/mcp"]
allow = ["mcp.example", "a", "b"]   # chaos may act on these hosts
[target.commands]
restart = ["kubectl", "delete", "pod", "mcp-{index}"]
add-key = ["sh", "-c", "cat {key_file} >> ring"]
promote-key = ["sh", "-c", "cp {key_file} ring"]
retire-key = ["sh", "-c", "cp {key_file} ring"]
[load]
arrival_rate = 1
%s
[[flows]]
kind = "refund"
%s
'''
RESTART = '[[chaos]]\nat = "10s"\naction = "restart"\n'
ROTATE = '[[chaos]]\nat = "20s"\naction = "rotate-keys"\n'


def test_validate_warns_that_routing_cannot_be_honoured_through_one_url(tmp_path, capsys):
    code, err = validate(tmp_path, capsys, ONE_URL % ('routing = "other-replica"', ""))
    assert code == 0
    assert 'warning: load.routing = "other-replica" cannot be honoured through one URL (http://mcp.example/mcp)' in err
    assert "the balancer behind it chooses the replica" in err and "crossed_replica_share" in err
    code, err = validate(tmp_path, capsys, ONE_URL % ("", ""))
    assert code == 0 and err == ""


def test_validate_warns_that_chaos_through_one_url_reaches_one_replica(tmp_path, capsys):
    code, err = validate(tmp_path, capsys, ONE_URL % ("", RESTART + ROTATE))
    assert code == 0
    assert "warning: chaos through one URL (http://mcp.example/mcp): the step(s) restart at 10s act on replica 1 " \
           "only" in err
    assert "the others are never touched" in err and "list one URL per replica" in err
    assert "rotate-keys" not in err  # its commands name no replica: they act on the whole deployment
    code, err = validate(tmp_path, capsys, ONE_URL.replace('urls = ["http://mcp.example/mcp"]',
                                                           'urls = ["http://a/mcp", "http://b/mcp"]')
                         % ('routing = "other-replica"', RESTART))
    assert code == 0 and err == ""


def test_the_kubernetes_scenario_says_its_restart_reaches_the_first_pod(capsys):
    assert main(["validate", str(ROOT / "scenarios" / "kubernetes.toml")]) == 0
    assert "restart at 30s act on replica 1 only" in capsys.readouterr().err


# --- the guide's commands for a Deployment: by label and place, in its namespace ------------------


def guide_commands_block() -> str:
    """docs/your-deployment.md's example `[target.commands]` (the TOML block that starts with it)."""
    text = (ROOT / "docs" / "your-deployment.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if b.startswith("[target.commands]")]
    return block


def test_the_guide_s_pod_commands_pick_a_deployment_s_pod_by_label_in_its_namespace(tmp_path, capsys):
    """Pods of a Deployment are named mcp-<hash>-<id>: `mcp-{index}` matches none, and without -n none is found."""
    block = guide_commands_block()
    guide = load_commands(block)
    shipped = load_scenario(ROOT / "scenarios" / "kubernetes.toml").target.commands
    assert guide["restart"] == shipped["restart"] and guide["kill"] == shipped["kill"]  # one form, the one that ships
    labels = by_kind("Deployment")["mcp"]["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{key}={value}" for key, value in labels.items())
    for name in ("restart", "kill"):
        assert f"get pods -l {selector} -o name" in guide[name][2] and guide[name][3:] == ["sh", "{index}"]
    for name, argv in guide.items():
        line = " ".join(argv)
        assert line.count("kubectl ") == line.count("kubectl -n mrtr "), (name, argv)  # every kubectl in it
    path = tmp_path / "guide.toml"
    path.write_text(GUIDE_SCENARIO % block)
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err  # names and placeholders the harness takes


def load_commands(block: str) -> dict[str, list[str]]:
    """The commands of a `[target.commands]` block, as TOML reads them."""
    return tomllib.loads(block)["target"]["commands"]


GUIDE_SCENARIO = '''
name = "guide-commands"
duration = "2m"
[target]
kind = "external"
urls = ["http://a.example/mcp", "http://b.example/mcp"]
allow = ["a.example", "b.example"]
%s
[load]
arrival_rate = 1
[[flows]]
kind = "refund"
[[chaos]]
at = "10s"
action = "restart"
replica = 2
[[chaos]]
at = "20s"
action = "kill"
[[chaos]]
at = "30s"
action = "set-ttl"
ttl = "5m"
[[chaos]]
at = "40s"
action = "rotate-keys"
'''


def test_the_restart_command_deletes_the_pod_at_its_index_among_the_deployment_s_pods(tmp_path):
    """The harness's own `fill` and `run_command` on the shipped restart; kubectl here is a stand-in that lists
    three pods of a Deployment (unsorted, as the API server may) and records what it is asked to delete:
    no cluster runs in this project."""
    from harness.targets.commands import fill, run_command

    calls = tmp_path / "calls"
    stand_in = tmp_path / "bin" / "kubectl"
    stand_in.parent.mkdir()
    stand_in.write_text(f'''#!/bin/sh
echo "$*" >> {calls}
case "$*" in
  *" get pods "*) printf 'pod/mcp-7f9c6d-zq2xk\\npod/mcp-7f9c6d-a81bc\\npod/mcp-7f9c6d-m3p0d\\n' ;;
esac
''')
    stand_in.chmod(0o755)
    restart = load_scenario(ROOT / "scenarios" / "kubernetes.toml").target.commands["restart"]
    filled = fill(restart, {"index": "1", "replica": "r2", "url": "http://mcp.mrtr.example/mcp"})
    result = run_command(filled, timeout=30, env={"PATH": f"{stand_in.parent}:/usr/bin:/bin"})
    assert result.ok, result
    get, delete = calls.read_text().splitlines()
    assert get == "-n mrtr get pods -l app.kubernetes.io/name=mcp -o name"
    assert delete == "-n mrtr delete --wait=false pod/mcp-7f9c6d-m3p0d"  # sorted: a81bc, m3p0d, zq2xk; index 1


def test_the_deployment_s_ttl_is_the_scenarios_modelled_ttl_in_real_time():
    """An external deployment keeps its own TTL: the harness counts on ttl / time_scale (rotation, rollback)."""
    from harness.config.durations import parse_duration
    from harness.config.scenario import parse_scenario

    [container] = by_kind("Deployment")["mcp"]["spec"]["template"]["spec"]["containers"]
    [ttl] = [item["value"] for item in container["env"] if item["name"] == "MCP_TTL"]
    in_cluster = parse_scenario(yaml.safe_load((MANIFESTS / "harness" / "scenario.yaml").read_text())
                                ["data"]["in-cluster.toml"], "in-cluster.toml")
    for scenario in (load_scenario(ROOT / "scenarios" / "kubernetes.toml"), in_cluster):
        assert parse_duration(ttl) == scenario.real(scenario.target.ttl), scenario.name
