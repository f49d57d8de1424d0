"""The command line loads what the command needs: `--help`, `hunt --help`, `validate`, `report`, `compare` and `history`
load no server.

Each command runs as a user runs it (`python -X importtime -m harness ...`), and the modules
its process imported are read from its stderr. The shop's servers, uvicorn, Starlette and
the SDK's server side belong to `shop` and `run` only; an import of them at the top of a
module the command line reads (as `cli/shop.py` once had) fails here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness_run import ROOT, imported_modules
from tests.test_compare import scenario, write_run

SERVER_CODE = ("harness.shop", "uvicorn", "starlette", "sse_starlette", "mcp.server")


def _server_code(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if any(name == top or name.startswith(f"{top}.") for top in SERVER_CODE))


def _imports(*argv: str) -> tuple[int, set[str], str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, imported_modules(done.stderr), done.stdout + done.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("runs")
    return write_run(folder / "baseline", scenario()), write_run(folder / "current", scenario(), seed=2)


@pytest.mark.parametrize("command", ["--help", "validate", "report", "compare", "hunt --help"])
def test_the_command_loads_no_server_code(command: str, runs: tuple[Path, Path]) -> None:
    baseline, current = runs
    argv = {"--help": ["--help"], "validate": ["validate", "scenarios/smoke.toml"], "report": ["report", str(current)],
            "compare": ["compare", str(baseline), str(current)], "hunt --help": ["hunt", "--help"]}[command]
    code, modules, output = _imports(*argv)
    assert code == 0, output
    assert "harness.cli.main" in modules  # the process ran the command line (and importtime saw it)
    assert _server_code(modules) == [], f"{command} loaded server code"


def test_mcp_loads_the_sdks_server_only_when_it_serves() -> None:
    """`mcp --help` reads its options from argparse alone; the server (`harness.assistant.server`) loads to serve."""
    code, modules, output = _imports("mcp", "--help")
    assert code == 0 and "--max-duration DURATION" in output, output
    assert "harness.assistant.cli" in modules and _server_code(modules) == [], "mcp --help loaded server code"
    assert "harness.assistant.server" not in modules


def test_history_loads_no_server_code(tmp_path: Path) -> None:
    from tests.test_history import MIN_NIGHTS, write_nights

    code, modules, output = _imports("history", *map(str, write_nights(tmp_path, [1.0] * MIN_NIGHTS)))
    assert code == 0, output
    assert "harness.compare.history" in modules and _server_code(modules) == [], "history loaded server code"


@pytest.mark.parametrize("command,server,described", [
    ("replica", "harness.shop.replica", "One shop MCP replica"),
    ("auth-server", "harness.shop.authserver", "The shop's OAuth authorization server"),
])
def test_a_shop_command_loads_its_server_for_its_options_only_when_used(command: str, server: str,
                                                                        described: str) -> None:
    code, modules, output = _imports("shop", command, "--help")
    assert code == 0, output
    assert server in modules  # the check above sees server code where it is loaded
    assert "--port PORT" in output and "--host HOST" in output  # its options, added when it was used
    assert described in output  # and its description, the server module's docstring
