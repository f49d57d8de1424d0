"""The pods a label selector finds, followed as they are replaced: a watch, and one log stream per pod.

`kubectl logs -f -l SELECTOR` follows only the pods alive when it starts, and exits 0 when
their streams end: a pod deleted, killed, or replaced by a rollout (`set env`, `scale`, a
key rotation's restart) takes its successors' lines with it, and the run would read the
silence as "nothing logged". kubectl itself has no flag to follow new pods (`kubectl logs
--help`), so this source runs a watch, `kubectl get pods --selector=... --watch -o name`,
and starts `kubectl logs -f --timestamps` for each pod it names that is not followed yet:
a new pod from the moment it appears, a restarted container again from the last line read
(its engine timestamps, as `harness.logs.containers` uses a container's, so no line is read
twice). Each line is labelled with its pod's name.

A pod's stream that ends with exit 0 (its container stopped) is followed again while the
pod is there; one that fails (the pod is gone) is dropped until the watch names the pod
again. The watch itself is run again when it ends (the API server closes watches after a
while); when it fails `WATCH_FAILURES` times in a row, the source ends with that failure,
and the run counts the selector's replicas as unobserved from then on
(`harness.logs.collector`). Every kubectl gets the commands' environment
(`harness.secrets.command_env`), never the whole of the harness's. Each is started by the
thread that reads it and lives no longer than that thread (`harness.processes.children`).
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import IO

from harness.logs.containers import Stamp, split_stamp
from harness.logs.sources import Line, Source, SourceError, capped_lines
from harness.processes.children import start_child
from harness.secrets import command_env

WATCH_FAILURES = 3
"""Failed watches in a row after which the source ends, failed (a cluster that cannot be reached)."""
AGAIN_SECONDS = 1.0
"""How long before a watch, or a pod's stream that ended cleanly, is started again."""
STOP_TIMEOUT = 5.0


def rfc3339(stamp: Stamp) -> str:
    """(seconds, nanoseconds) as kubectl's `--since-time` reads it: RFC 3339 in UTC, to the nanosecond."""
    return datetime.fromtimestamp(stamp[0], UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{stamp[1]:09d}Z"


class KubernetesSource(Source):
    """Every pod `selector` finds in `namespace` (kubectl's current one when None), followed from `since` across
    replacements, each line labelled with its pod's name."""

    finite = False

    def __init__(self, selector: str, namespace: str | None = None, *, since: float,
                 pass_env: Sequence[str] | None = ()) -> None:
        """`pass_env`: a scenario's source, whose kubectl gets the commands' environment (the allow-list and these
        names); None (triage's `--kubernetes`, typed by its user): the caller's environment."""
        super().__init__()
        self.selector, self.namespace, self.since = selector, namespace, since
        self.name = f"kubernetes {namespace + ' ' if namespace else ''}{selector}"
        self._env = command_env(pass_env) if pass_env is not None else None
        self._queue: queue.Queue[Line | None] = queue.Queue(maxsize=256)
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        """Each followed pod's `kubectl logs`, or the watch's (key ""), while it runs."""
        self._followed: set[str] = set()
        self._last: dict[str, Stamp] = {}
        self._lock = threading.Lock()
        self._ended = threading.Event()

    def open(self) -> str | None:
        if shutil.which("kubectl", path=(self._env or os.environ).get("PATH")) is None:
            raise SourceError(f"{self.name}: kubectl is not on PATH")
        return None

    def _kubectl(self, *args: str) -> list[str]:
        where = [f"--namespace={self.namespace}"] if self.namespace else []
        return ["kubectl", *where, *args]

    def lines(self) -> Iterator[Line]:
        threading.Thread(target=self._watch, daemon=True, name=f"logs-{self.name}").start()
        while True:
            item = self._queue.get()
            if item is None:
                if self._stop.is_set() or self._ended.is_set():
                    return
                continue
            yield item

    # --- the watch -------------------------------------------------------------------------------

    def _watch(self) -> None:
        failed = 0
        while not self._stop.is_set():
            code = self._watch_once()
            if self._stop.is_set():
                return
            failed = failed + 1 if code != 0 else 0
            if failed >= WATCH_FAILURES:
                self.failure = f"{self.name}: the watch of its pods failed {failed} times (kubectl exited with code " \
                               f"{code})"
                self._ended.set()
                self._queue.put(None)
                return
            self._stop.wait(AGAIN_SECONDS)

    def _watch_once(self) -> int:
        """One watch: follow every pod it names; its exit code."""
        try:
            process = self._start("", self._kubectl("get", "pods", f"--selector={self.selector}", "--watch",
                                                    "--output=name"))
        except OSError:
            return 127
        assert process.stdout is not None
        for line in capped_lines(_text(process.stdout)):
            pod = line.strip().removeprefix("pod/")
            if pod and not self._stop.is_set():
                self._follow(pod)
        return self._finish("", process)

    # --- one pod ---------------------------------------------------------------------------------

    def _follow(self, pod: str) -> None:
        with self._lock:
            if pod in self._followed:
                return
            self._followed.add(pod)
        threading.Thread(target=self._read_pod, args=(pod,), daemon=True, name=f"logs-pod-{pod}").start()

    def _read_pod(self, pod: str) -> None:
        """Follow `pod` while its streams end cleanly (a container restarted); stop when one fails (it is gone)."""
        try:
            while not self._stop.is_set():
                since = self._last.get(pod) or divmod(round(self.since * 1e9), 10 ** 9)
                try:
                    process = self._start(pod, self._kubectl("logs", f"pod/{pod}", "--follow", "--timestamps",
                                                             "--all-containers", f"--since-time={rfc3339(since)}"))
                except OSError:
                    return
                assert process.stdout is not None
                for line in capped_lines(_text(process.stdout)):
                    self._put(pod, line)
                if self._finish(pod, process) != 0 or self._stop.wait(AGAIN_SECONDS):
                    return
        finally:
            with self._lock:
                self._followed.discard(pod)

    def _put(self, pod: str, line: str) -> None:
        stamp, text = split_stamp(line)
        if stamp is None:
            self._queue.put(Line(pod, line))
            return
        last = self._last.get(pod)
        if last is not None and stamp <= last:
            return  # read before the stream was started again
        self._last[pod] = stamp
        self._queue.put(Line(pod, text, stamp[0] + stamp[1] / 1e9))

    # --- processes -------------------------------------------------------------------------------

    def _start(self, key: str, argv: list[str]) -> subprocess.Popen[bytes]:
        process = start_child(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                              env=self._env)
        with self._lock:
            self._processes[key] = process
        if self._stop.is_set():
            _end(process)
        return process

    def _finish(self, key: str, process: subprocess.Popen[bytes]) -> int:
        code = process.wait()
        with self._lock:
            if self._processes.get(key) is process:
                del self._processes[key]
        return code

    def close(self) -> None:
        super().close()
        with self._lock:
            processes = list(self._processes.values())
        for process in processes:
            _end(process)
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)


def _text(stream: IO[bytes]) -> io.TextIOWrapper:
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace")


def _end(process: subprocess.Popen[bytes]) -> None:
    """Stop one kubectl by its PID."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)
