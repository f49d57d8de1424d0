"""The shop's commands as a user runs them: clear errors on bad options, and `shop up` that cleans up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.services import sigint_default

HARNESS = [sys.executable, "-m", "harness"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HARNESS, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, message", [
    (["shop", "replica", "--port", "8101", "--api", "ftp://x"], "--api: Value error, must be an http"),
    (["shop", "replica", "--port", "0", "--api", "http://127.0.0.1:1"], "--port"),
    (["shop", "replica", "--port", "8101", "--api", "http://127.0.0.1:1", "--ttl", "ten minutes"],
     "not a duration: 'ten minutes'"),
    (["shop", "replica", "--port", "8101", "--api", "http://127.0.0.1:1", "--keyring", "vault:x"],
     "unknown key ring 'vault:x'"),
    (["shop", "replica", "--port", "8101", "--api", "http://127.0.0.1:1", "--keyring", "env:MRTR_NO_SUCH_VAR"],
     "MRTR_NO_SUCH_VAR is not set"),
    (["shop", "replica", "--port", "8101", "--api", "http://127.0.0.1:1", "--store", "postgres://x"],
     "unknown store"),
    (["shop", "up", "--replicas", "0"], "--replicas must be at least 1"),
])
def test_bad_options_get_one_clear_error_and_a_non_zero_exit(args, message):
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["replica", "auth-server", "api", "up", "keyring"])
def test_a_shop_commands_help_speaks_to_its_user_not_of_the_codes_insides(command):
    """`--help` says what the command does and its options; how the modules avoid an import cycle is the code's."""
    result = run("shop", command, "--help")
    assert result.returncode == 0, result.stderr
    assert "options:" in result.stdout
    for inside in ("import cycle", "__main__", "never imports"):
        assert inside not in result.stdout, inside


def test_shop_up_prints_its_urls_and_stops_every_process_on_ctrl_c(tmp_path):
    process = subprocess.Popen([*HARNESS, "shop", "up", "--replicas", "2", "--workdir", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("Ctrl-C" in line for line in lines):
            lines.append(process.stdout.readline())
        output = "".join(lines)
        urls = re.findall(r"(http://127\.0\.0\.1:\d+/mcp)", output)
        assert len(urls) == 2
        pids = [httpx.get(url.replace("/mcp", "/healthz")).json()["pid"] for url in urls]
        assert "sealing key" in output and (tmp_path / "keyring").read_text().split()[0] not in output
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # Every process closed the shared sqlite file: its write-ahead log was checkpointed and went with it.
    assert (tmp_path / "shop.db").is_file()
    assert not (tmp_path / "shop.db-wal").exists() or (tmp_path / "shop.db-wal").stat().st_size == 0
