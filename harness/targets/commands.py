"""Chaos by command: the scenario's `[target.commands]`, run on a deployment the harness did not start.

The harness cannot restart a pod, push a config or rewrite a Kubernetes Secret itself, but
the user has a command for each (`kubectl delete pod ...`, `systemctl restart ...`). A
command is an argv list, run without a shell (the user writes `sh -c` when they want one),
with placeholders filled for the replica it acts on: `{replica}` (r1, r2, ...), `{index}`
(0-based) and `{url}`, plus what the action hands over (`{key_id}`, `{key_file}`, `{ttl}`,
`{name}`, `{offset}`, `{replicas}`). A command that names no replica acts on the whole
deployment (a Secret every pod mounts, `kubectl scale`) and runs once, not once per replica.

A command inherits only what it needs of the harness's environment (`harness.secrets.command_env`:
the allow-list, the variables `[target] command_env` names, `MRTR_RUN_ID`): never the client
secret or any other variable a `set -x` or an `env` would print.

What makes a command's run trustworthy as a chaos event: its exit code, duration and the
end of its output are journaled (`CommandRan`), through the harness's one scrubber (every
key, token and secret it holds by value, then anything that looks like one); a command
that exits non-zero, cannot start or runs out of time fails the action; and after it, the
harness waits for the replica's URL to accept connections again, since "the pod was
deleted" is not "the replica serves".
Output goes to a file, not a pipe: a restart script that leaves a server running in the
background would otherwise hold the pipe open and the harness would wait for it forever.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from harness.config.commands import PLACEHOLDER, REPLICA_PLACEHOLDERS, placeholders_in
from harness.config.target import TargetConfig
from harness.journal.records import CommandRan, RecordType
from harness.journal.writer import Journal
from harness.mrtr.keys import write_ring
from harness.processes.children import kill_session, start_child
from harness.secrets import command_env, register, scrub

__all__ = ["ChaosCommands", "CommandFailed", "CommandResult", "accepts", "fill", "run_command"]

OUTPUT_TAIL = 500
"""Characters of a command's output kept in the journal: the end, where a failing command says why."""

_OUTPUT_PEEK = 64 * 1024
"""Bytes read from the end of a command's output file before it is scrubbed and cut."""

Sleep = Callable[[float], None]


class CommandFailed(RuntimeError):
    """A chaos command exited non-zero, could not start, ran out of time, or its replica did not serve again."""


@dataclass
class CommandResult:
    """How one command went: `exit_code` None when it could not start or was killed at its timeout."""

    argv: list[str]
    exit_code: int | None
    seconds: float
    output: str
    error: str | None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.error is None


def fill(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """The argv with every `{name}` replaced by its value, and `{{` / `}}` by one brace."""
    def one(arg: str) -> str:
        filled = PLACEHOLDER.sub(lambda match: values[match.group(1)], arg)
        return filled.replace("{{", "{").replace("}}", "}")

    return [one(arg) for arg in argv]


def run_command(argv: list[str], *, timeout: float, env: Mapping[str, str] | None = None,
                pass_env: Sequence[str] = ()) -> CommandResult:
    """Run one command to its end (or its timeout), tied to the harness; the tail of its output, scrubbed.

    Its environment: the allow-list, the variables `pass_env` names, then `env` (`harness.secrets.command_env`).
    """
    started = time.monotonic()
    with tempfile.TemporaryFile() as output:
        try:
            process = start_child(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                  env=command_env(pass_env, env))
        except OSError as exc:
            return CommandResult(argv, None, round(time.monotonic() - started, 3), "",
                                 f"could not start {argv[0]}: {exc.strerror or exc}")
        error = None
        try:
            code: int | None = process.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_session(process)
            code, error = None, f"still running after {timeout:g} s: killed"
        return CommandResult(argv, code, round(time.monotonic() - started, 3), _tail(output), error)


def _tail(output: IO[bytes]) -> str:
    """The end of what a command printed, on one line, secrets out (scrubbed before it is cut)."""
    output.seek(0, os.SEEK_END)
    size = output.tell()
    output.seek(max(0, size - _OUTPUT_PEEK))
    text = output.read().decode("utf-8", "replace")
    return " ".join(scrub(text, foreign=True).split())[-OUTPUT_TAIL:]


def accepts(url: str, timeout: float) -> bool:
    """Whether something accepts a TCP connection at the URL's host and port (no request is sent)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout).close()
    except OSError:
        return False
    return True


class ChaosCommands:
    """The scenario's commands for one run: fills, runs, journals, then waits for the replicas to serve again."""

    def __init__(self, spec: TargetConfig, labels: list[str], urls: list[str], journal: Journal, run_id: str,
                 sleep: Sleep = time.sleep) -> None:
        self.table = dict(spec.commands)
        self.timeout = spec.command_timeout
        self.ready_timeout = spec.ready_timeout
        self.labels = labels
        self.urls = urls
        self.journal = journal
        self.run_id = run_id
        self.sleep = sleep
        self.pass_env = spec.command_env
        self._key_files = 0
        self._key_folder: Path | None = None

    def has(self, name: str) -> bool:
        return name in self.table

    def per_replica(self, argv: Sequence[str]) -> bool:
        """Whether a command acts on one replica (it names one), rather than on the whole deployment."""
        return bool(placeholders_in(list(argv)) & REPLICA_PLACEHOLDERS)

    def run_on(self, action: str, name: str, replicas: Sequence[int], extra: Mapping[str, str] | None = None,
               *, wait: bool = True) -> list[dict[str, object]]:
        """Run the table's `name` on each replica in turn, or once when it acts on the whole deployment."""
        argv = self.table[name]
        if not self.per_replica(argv):
            return [self.run(action, name, argv, None, extra, wait=wait)]
        return [self.run(action, name, argv, index, extra, wait=wait) for index in replicas]

    def run(self, action: str, name: str, argv: Sequence[str], index: int | None,
            extra: Mapping[str, str] | None = None, *, wait: bool = True) -> dict[str, object]:
        """Run one command for replica `index` (None: the whole deployment); journal it; CommandFailed if it failed.

        Returns the short form the action's `chaos` end record carries.
        """
        values = dict(extra or {})
        if index is not None:
            values |= {"replica": self.labels[index], "index": str(index), "url": self.urls[index]}
        result = run_command(fill(argv, values), timeout=self.timeout, env={"MRTR_RUN_ID": self.run_id},
                             pass_env=self.pass_env)
        label = self.labels[index] if index is not None else "all"
        ready = self.wait_ready(index) if wait and result.ok else None
        record = CommandRan(type=RecordType.COMMAND, t=time.time(), action=action, name=name, target=label,
                            argv=result.argv, exit_code=result.exit_code, seconds=result.seconds,
                            output=result.output, ok=result.ok and ready is not False, error=result.error)
        if ready is not None:
            record["ready"] = ready
        self.journal.write(record)
        if not result.ok:
            why = result.error or f"exited {result.exit_code}"
            raise CommandFailed(f"{name} on {label} {why}: {result.output[-200:] or '(no output)'}")
        if ready is False:
            raise CommandFailed(f"after {name}, {label} did not accept connections within "
                                f"{self.ready_timeout:g} s")
        return {"name": name, "target": label, "exit_code": result.exit_code, "seconds": result.seconds}

    def wait_ready(self, index: int | None) -> bool:
        """Wait (bounded by `ready_timeout`) until the replica's URL, or every URL, accepts connections."""
        urls = self.urls if index is None else [self.urls[index]]
        deadline = time.monotonic() + self.ready_timeout
        waiting = list(urls)
        while waiting and time.monotonic() < deadline:
            waiting = [url for url in waiting if not accepts(url, timeout=1.0)]
            if waiting:
                self.sleep(0.2)
        return not waiting

    def key_file(self, key: str) -> Path:
        """A file holding `key` (0600, in a folder only this user can read) for the key steps; deleted by close().

        The key is registered as a secret (`harness.secrets`): a command that prints the file shows its fingerprint.
        """
        if self._key_folder is None:
            self._key_folder = Path(tempfile.mkdtemp(prefix="mrtr-keys-"))
        register(key, "key")
        self._key_files += 1
        path = self._key_folder / f"key-{self._key_files}"
        write_ring(path, [key])
        return path

    def close(self) -> None:
        """Delete every key file handed to a command (the run is over: nothing may read them again)."""
        if self._key_folder is not None:
            shutil.rmtree(self._key_folder, ignore_errors=True)
            self._key_folder = None
