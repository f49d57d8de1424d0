"""The "your server" examples (scenarios/external/): valid, warned about an unset secret as the guides show, and run.

Each guide (capacity, nightly, on call) tells a user to copy its example, put in their
replicas' URLs, log sources and commands, and keep the client secret in MCP_CLIENT_SECRET.
Here the user's server is the reference shop started by hand, as separate processes the
harness did not start (its authorization server, its API and two replicas behind OAuth), and
the copy is edited as the guide says: URLs, logs and commands, nothing else.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.mrtr.keys import new_key, write_ring
from tests.harness_run import ROOT, SCENARIOS, run_harness
from tests.test_chaos_commands import Replicas, toml_list

EXTERNAL = SCENARIOS / "external"
SECRET_ENV = "MCP_CLIENT_SECRET"
GUIDES = {"capacity.toml": "capacity-planning.md", "nightly.toml": "nightly-ci.md",
          "on-call-rotation.toml": "on-call.md"}
"""Each example, and the guide whose "your server" path ships it."""

WARNING = re.compile(r"^scenarios/external/\S+\.toml: warning: .*$", re.MULTILINE)


def test_every_guide_has_its_example_and_every_example_its_guide():
    assert sorted(path.name for path in EXTERNAL.glob("*.toml")) == sorted(GUIDES)
    for example, guide in GUIDES.items():
        assert f"scenarios/external/{example}" in (ROOT / "docs" / guide).read_text(), guide


def test_validate_warns_of_the_unset_secret_in_the_words_each_guide_shows():
    """Valid (exit 0), and the warning a guide prints for its example is the one `validate` gives."""
    environment = {name: value for name, value in os.environ.items() if name != SECRET_ENV}
    checked = subprocess.run([sys.executable, "-m", "harness", "validate",
                              *(f"scenarios/external/{example}" for example in GUIDES)],
                             capture_output=True, text=True, timeout=60, cwd=ROOT, env=environment)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count(": ok (") == len(GUIDES), checked.stdout
    for example, guide in GUIDES.items():
        shown = [line for line in WARNING.findall((ROOT / "docs" / guide).read_text())
                 if line.startswith(f"scenarios/external/{example}: ")]
        assert shown, f"docs/{guide} shows no validate warning for {example}"
        for line in shown:
            assert line in checked.stderr.splitlines(), (line, checked.stderr)
        assert f"the environment variable {SECRET_ENV} is not set" in " ".join(shown)


class Shop:
    """The shop as a user's own deployment: started and restarted by scripts, behind its own OAuth server."""

    CLIENT_ID = "mrtr-harness"
    """The example's `client_id`: the authorization server knows this one client."""

    def __init__(self, folder: Path) -> None:
        self.replicas = Replicas(folder)
        self.folder = self.replicas.folder
        self.secret = secrets.token_urlsafe(24)
        self.names = ("r1", "r2")
        self.urls: list[str] = []
        self.replica_args: list[str] = []

    def start(self) -> None:
        key = new_key()
        for name in self.names:
            write_ring(self.folder / f"{name}.ring", [key])
        store = f"sqlite:{self.folder / 'shop.db'}"
        issuer = self.replicas.start("auth", "harness", "shop", "auth-server", "--client-id", self.CLIENT_ID,
                                     "--client-secret-env", SECRET_ENV,
                                     env={SECRET_ENV: self.secret}).removesuffix("/mcp")
        api = self.replicas.start("api", "harness", "shop", "api", "--store", store).removesuffix("/mcp")
        self.replica_args = ["harness", "shop", "replica", "--api", api, "--store", store, "--keyring",
                             f"file:{self.folder}/{{replica}}.ring", "--replica-id", "{replica}", "--ttl", "10s",
                             "--auth-issuer", issuer]
        self.urls = [self.replicas.start(name, *(arg.replace("{replica}", name) for arg in self.replica_args))
                     for name in self.names]
        self.replicas.wait_ready()

    def logs(self) -> list[str]:
        return [f"file:{self.replicas.log(name)}@{name}" for name in self.names]

    def restart_command(self) -> list[str]:
        """What the user's `restart` becomes here: the script that stops a replica by its PID and starts it again."""
        return ["sh", f"{self.folder}/restart.sh", "{replica}", *self.replica_args]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    started = Shop(tmp_path_factory.mktemp("shop") / "deployment")
    try:
        started.start()
        yield started
    finally:
        started.replicas.stop()


def edited(example: str, replacements: dict[str, str]) -> str:
    """The example as the guide has the user edit it: each `key = ...` line named replaced by the user's own."""
    text = (EXTERNAL / example).read_text()
    for key, value in replacements.items():
        line = f"{key} = {value}".replace("\\", "\\\\")  # a replacement string: its backslashes doubled
        text, count = re.subn(rf"^{re.escape(key)} = .*$", line, text, count=1, flags=re.MULTILINE)
        assert count == 1, f"{example} has no line `{key} = ...` to edit"
    return text


def test_the_nightly_example_night_one_on_your_own_replicas_passes_and_becomes_the_baseline(
        shop: Shop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/nightly-ci.md's night one for your server: exit 0, every replica restarted by its command, the calls
    of the example's tools complete through the leads' own tokens, and the run is kept as `baseline/`."""
    monkeypatch.setenv(SECRET_ENV, shop.secret)
    scenario = tmp_path / "nightly.toml"
    scenario.write_text(edited("nightly.toml", {"urls": toml_list(shop.urls), "logs": toml_list(shop.logs()),
                                                "restart": toml_list(shop.restart_command())}))
    pids = {name: shop.replicas.pid(name) for name in shop.names}
    baseline = tmp_path / "baseline"

    finished = run_harness(scenario, tmp_path / "results", "--duration", "6s", "--baseline", str(baseline),
                           "--first-baseline")

    assert finished.code == 0, finished.output
    assert (baseline / "summary.json").is_file() and (baseline / "journal.jsonl").is_file()
    journal = finished.journal()
    ran = [(record["name"], record["target"], record["exit_code"]) for record in journal
           if record["type"] == "command"]
    assert ran == [("restart", "r1", 0), ("restart", "r2", 0)]
    assert all(shop.replicas.pid(name) != pid for name, pid in pids.items()), "each replica is a new process"
    by_flow = finished.summary["flows"]["by_flow"]
    assert set(by_flow) == {"record_return", "quote_refund"}
    rounds = [record for record in journal if record["type"] == "round"]
    assert {record["replica"] for record in rounds} == {"r1", "r2"}
    assert not [record for record in rounds if record["outcome"] in ("unauthorized", "forbidden")]
    assert secrets_left(finished.folder, shop.secret) == []


def secrets_left(folder: Path | None, secret: str) -> list[str]:
    """Files of a results folder that hold the client secret."""
    assert folder is not None
    return [str(path) for path in folder.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]
