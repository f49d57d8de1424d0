"""The harness's own manifests (`deploy/kubernetes/harness/`): a master Job and workers, checked without a cluster.

Each object is validated against the Kubernetes API's schemas (strict), and what ties them
together is checked as a user would before applying: the workers find the master's Service,
the master waits for as many workers as their Job runs, each run's Jobs get a fresh name,
the reader pod mounts the claim the master writes, its scenario is one this harness reads
with URLs the cluster's Services answer, and its ServiceAccount may do what the scenario's
kubectl commands do. The guide's kubectl lines go through kubectl's own flag parser.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from harness.config.scenario import parse_scenario
from tests.harness_run import ROOT
from tests.services import require_binary

FOLDER = ROOT / "deploy" / "kubernetes"
HARNESS = FOLDER / "harness"


def objects(folder: Path, pattern: str = "**/*.yaml") -> list[dict[str, Any]]:
    """The objects of every manifest under `folder` (`*.yaml`: only those `kubectl apply -f FOLDER` reads)."""
    return [doc for path in sorted(folder.glob(pattern)) for doc in yaml.safe_load_all(path.read_text()) if doc]


def named(doc: dict[str, Any]) -> str:
    """An object's name, or the prefix of the names `generateName` gives it."""
    return doc["metadata"].get("name") or doc["metadata"]["generateName"].rstrip("-")


def one(kind: str, name: str, folder: Path = HARNESS) -> dict[str, Any]:
    [found] = [doc for doc in objects(folder) if doc["kind"] == kind and named(doc) == name]
    return found


def container(workload: dict[str, Any]) -> dict[str, Any]:
    """The one container of a Pod, or of a workload's pod template."""
    pod = workload["spec"]["template"]["spec"] if "template" in workload["spec"] else workload["spec"]
    [only] = pod["containers"]
    return only


def option(args: list[str], name: str) -> str:
    """The value of `name` in `args`, written `NAME VALUE` or `NAME=VALUE`."""
    for index, arg in enumerate(args):
        if arg == name:
            return args[index + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    raise ValueError(f"{name} is not in {args}")


@pytest.mark.parametrize("manifest", objects(HARNESS), ids=lambda doc: f"{doc['kind']}/{named(doc)}")
def test_every_harness_manifest_is_valid_against_the_kubernetes_api_schema(manifest):
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    assert manifest["metadata"]["namespace"] == "mrtr"  # beside the deployment under test


def test_the_workers_reach_the_master_and_the_master_waits_for_every_one_of_them():
    master, workers = one("Job", "mrtr-harness-master"), one("Job", "mrtr-harness-worker")
    service = one("Service", "mrtr-harness-master")
    master_args, worker_args = container(master)["args"], container(workers)["args"]
    assert worker_args[0] == "worker" and master_args[:2] == ["run", "/scenario/in-cluster.toml"]
    assert option(worker_args, "--master-host") == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
    ports = {port["name"]: port["containerPort"] for port in container(master)["ports"]}
    served = {port["targetPort"]: port["port"] for port in service["spec"]["ports"]}
    assert served["locust-master"] == int(option(worker_args, "--master-port")) == \
        ports["locust-master"] == int(option(master_args, "--master-bind-port"))
    assert int(option(master_args, "--expect-workers")) == workers["spec"]["completions"] == \
        workers["spec"]["parallelism"]
    assert option(master_args, "--master-bind-host") == "0.0.0.0"
    assert master["spec"]["backoffLimit"] == 0  # a failed run is a verdict, not something to retry


def test_the_results_outlive_the_job_on_a_volume():
    master = one("Job", "mrtr-harness-master")
    spec = master["spec"]["template"]["spec"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container(master)["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert option(container(master)["args"], "--results") == mounts["results"]
    claim = volumes["results"]["persistentVolumeClaim"]["claimName"]
    assert spec["securityContext"]["fsGroup"] == 65534  # the image's user (nobody) writes the volume
    assert one("PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_the_master_s_scenario_is_valid_and_names_services_the_cluster_has():
    config = one("ConfigMap", "mrtr-harness-scenario")
    master = one("Job", "mrtr-harness-master")
    scenario_path = Path(container(master)["args"][1])
    mounts = {mount["name"]: mount["mountPath"] for mount in container(master)["volumeMounts"]}
    assert str(scenario_path.parent) == mounts["scenario"]
    scenario = parse_scenario(config["data"][scenario_path.name], "in-cluster.toml")
    services = {doc["metadata"]["name"]: doc for doc in objects(FOLDER) if doc["kind"] == "Service"}
    for url in [*scenario.target.urls, scenario.target.api or ""]:
        host, _, port = re.match(r"http://([^/:]+)(:(\d+))?", url).groups()  # type: ignore[union-attr]
        assert host in services, url
        assert int(port or 80) in {p["port"] for p in services[host]["spec"]["ports"]}, url


def test_the_service_account_may_do_what_the_scenario_s_kubectl_commands_do():
    master = one("Job", "mrtr-harness-master")
    account = master["spec"]["template"]["spec"]["serviceAccountName"]
    binding = one("RoleBinding", account)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "mrtr"}]
    rules = one("Role", binding["roleRef"]["name"])["rules"]

    def allowed(resource: str, verb: str) -> bool:
        return any(resource in rule["resources"] and verb in rule["verbs"] for rule in rules)

    scenario = parse_scenario(one("ConfigMap", "mrtr-harness-scenario")["data"]["in-cluster.toml"])
    text = " ".join([*scenario.target.logs, *(" ".join(argv) for argv in scenario.target.commands.values())])
    needs = [("pods/log", "get", "logs -f"), ("pods", "delete", "delete"), ("secrets", "patch", "secret"),
             ("deployments", "patch", "set env"), ("deployments/scale", "patch", "scale deploy")]
    for resource, verb, sign in needs:
        if sign in text:
            assert allowed(resource, verb), (resource, verb)
    image_path = re.search(r"PATH=(\S+)", (ROOT / "Dockerfile").read_text()).group(1)  # type: ignore[union-attr]
    [path] = [env["value"] for env in container(master)["env"] if env["name"] == "PATH"]
    assert path == f"/tools:{image_path}"  # kubectl beside the image's own PATH (its venv first)
    assert any(volume.get("emptyDir") == {} and volume["name"] == "tools"
               for volume in master["spec"]["template"]["spec"]["volumes"])  # where kubectl is copied to


# --- one run after another: named per run, ended either way, results read after the Job ------------


GUIDE = ROOT / "docs" / "harness-in-kubernetes.md"


def guide_shell_lines() -> list[str]:
    """The lines of the guide's ```sh blocks, as a user pastes them."""
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def guide_kubectl_commands() -> list[list[str]]:
    """Every kubectl command of the guide (also inside `$(...)`), as argv, its comment and `&` cut off."""
    found = []
    for line in guide_shell_lines():
        for command in re.findall(r"kubectl\b[^;&|)]*", line):
            found.append(shlex.split(command, comments=True))
    return found


def test_each_run_is_created_under_a_fresh_name_and_apply_never_touches_the_runs():
    """Re-applying a fixed-name Job that is kept after it ends (ttlSecondsAfterFinished) starts nothing."""
    applied = objects(HARNESS, "*.yaml")  # what `kubectl apply -f deploy/kubernetes/harness/` reads (no -R)
    assert all("name" in doc["metadata"] for doc in applied)  # apply refuses generateName
    assert {doc["kind"] for doc in applied} >= {"Service", "PersistentVolumeClaim", "ConfigMap", "Role"}
    assert "Job" not in {doc["kind"] for doc in applied} and "Pod" not in {doc["kind"] for doc in applied}
    for name in ("mrtr-harness-master", "mrtr-harness-worker"):
        job = one("Job", name)
        assert job["metadata"]["generateName"] == f"{name}-" and "name" not in job["metadata"]
        assert job["spec"]["ttlSecondsAfterFinished"] > 0
    commands = guide_kubectl_commands()
    creates = [argv for argv in commands if "create" in argv and "-f" in argv]  # the Secret is made from stdin
    created = {Path(option(argv, "-f")).relative_to("deploy/kubernetes/harness").as_posix() for argv in creates}
    assert created == {"run/master.yaml", "run/workers.yaml"}
    assert not any("apply" in argv and "run/" in " ".join(argv) for argv in commands)
    assert any(argv[argv.index("apply"):] == ["apply", "-f", "deploy/kubernetes/harness/"] for argv in commands
               if "apply" in argv)


def test_the_guide_waits_for_the_master_s_job_to_complete_or_fail_and_reads_its_exit_code():
    lines = guide_shell_lines()
    waits = {option(argv, "--for") for argv in guide_kubectl_commands() if "wait" in argv and "$job" in argv}
    assert waits == {"condition=complete", "condition=failed"}
    both = [line for line in lines if "wait --for=condition=" in line and "$job" in line]
    assert all(line.rstrip().endswith("&") for line in both)  # side by side, in the background
    assert any(line.startswith("wait -n") and "kill" in line for line in lines)  # the first to end; the other killed
    assert any("job-name=" in line and "state.terminated.exitCode" in line for line in lines)
    script = "\n".join(lines)
    check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False)
    assert check.returncode == 0, check.stderr


def test_the_workers_end_with_their_run_and_are_not_restarted():
    """A worker exits when its master ends (docs/exit-codes.md): a Deployment would start it again and again."""
    workers = one("Job", "mrtr-harness-worker")
    assert workers["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert workers["spec"]["backoffLimit"] == 0  # a restarted worker has no run to join
    codes = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    worker_codes = set(re.findall(r"^\| `worker` \| (\d+) \|", codes, re.MULTILINE))
    assert {"0", "1", "3"} <= worker_codes
    assert "no master answered" in codes and "went away" in codes


def test_the_reader_pod_mounts_the_claim_the_master_writes_where_the_guide_copies_from():
    master = one("Job", "mrtr-harness-master")
    reader = one("Pod", "mrtr-harness-results-reader")
    master_volumes = {v["name"]: v for v in master["spec"]["template"]["spec"]["volumes"]}
    claim = master_volumes["results"]["persistentVolumeClaim"]["claimName"]
    [volume] = reader["spec"]["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    assert one("PersistentVolumeClaim", claim)
    [mount] = container(reader)["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    assert mount["mountPath"] == option(container(master)["args"], "--results")
    security = reader["spec"]["securityContext"]
    assert security["runAsUser"] == master["spec"]["template"]["spec"]["securityContext"]["fsGroup"]
    assert reader["spec"]["restartPolicy"] == "Never" and reader["spec"]["activeDeadlineSeconds"] > 0
    commands = guide_kubectl_commands()
    name = reader["metadata"]["name"]
    copies = [argv for argv in commands if "cp" in argv]
    assert copies and all(argv[argv.index("cp") + 1].startswith(f"{name}:{mount['mountPath']}/") for argv in copies)
    assert ["kubectl", "-n", "mrtr", "delete", "pod", name] in commands  # and it goes again
    assert any("apply" in argv and option(argv, "-f").endswith("reader/results-reader.yaml") for argv in commands)


def test_every_kubectl_line_in_the_guide_names_the_namespace_and_files_that_exist():
    commands = guide_kubectl_commands()
    assert len(commands) >= 10
    for argv in commands:
        assert option(argv, "-n") == "mrtr", argv
        if "-f" in argv:
            assert (ROOT / option(argv, "-f")).exists(), argv


def test_every_kubectl_line_in_the_guide_parses_with_kubectl_s_own_flags():
    """`kubectl ... --help` parses every flag and runs nothing: an unknown flag or a bad value fails it."""
    kubectl = require_binary("kubectl")
    for argv in guide_kubectl_commands():
        end = argv.index("--") if "--" in argv else len(argv)  # after `--`, the words are the pod's command
        result = subprocess.run([kubectl, *argv[1:end], "--help", *argv[end:]], capture_output=True, text=True,
                                timeout=60, check=False,
                                env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/dev/null", "HOME": "/nonexistent"})
        assert result.returncode == 0, (argv, result.stderr)


def _secret_ref(workload: dict[str, Any]) -> dict[str, str]:
    [variable] = [env for env in container(workload).get("env", []) if env["name"] == "MRTR_CLUSTER_SECRET"]
    return variable["valueFrom"]["secretKeyRef"]


def test_master_and_workers_read_one_cluster_secret_the_guide_creates_and_no_manifest_holds():
    master, workers = one("Job", "mrtr-harness-master"), one("Job", "mrtr-harness-worker")
    reference = _secret_ref(master)
    assert _secret_ref(workers) == reference
    assert not [doc for doc in objects(HARNESS) if doc["kind"] == "Secret"]  # a value in the repository is no secret
    [create] = [argv for argv in guide_kubectl_commands() if argv[3:6] == ["create", "secret", "generic"]]
    assert create[6] == reference["name"]
    assert option(create, "--from-file") == f"{reference['key']}=/dev/stdin"
    [line] = [line for line in guide_shell_lines() if "create secret generic" in line]
    assert line.startswith("head -c 32 /dev/urandom | base64")  # random, never typed in


def test_only_the_workers_reach_the_master_s_port():
    policy = one("NetworkPolicy", "mrtr-harness-master")
    master, workers = one("Job", "mrtr-harness-master"), one("Job", "mrtr-harness-worker")
    master_labels = master["spec"]["template"]["metadata"]["labels"]
    worker_labels = workers["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= master_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {port["name"]: port["containerPort"] for port in container(master)["ports"]}
    rules = {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}
    assert set(rules) == set(ports)  # every port the master serves has its rule, and no other is opened
    [peer] = rules["locust-master"]
    assert peer.keys() == {"podSelector"} and peer["podSelector"]["matchLabels"].items() <= worker_labels.items()
    assert not peer["podSelector"]["matchLabels"].items() <= master_labels.items()
    assert rules["metrics"] is None  # Prometheus, wherever it runs
