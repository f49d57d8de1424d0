"""Locust's own master and workers for one run, on this machine or on others.

The master (the `run` process) keeps everything that must happen once: the target, the
log collector, chaos, `/metrics`, the verdict and the results folder. A worker
(`mrtr-harness worker`, or `run --worker`) needs nothing but the master's address and the
cluster secret: it says hello, each side proves it holds the secret (`harness.load.handshake`),
and the master sends it everything else over Locust's own connection (the scenario, the
replica URLs, its index and the worker count), so a worker on another machine shares no
files with the master. Nothing from a node that did not prove itself reaches Locust or the
run (`MasterLink`). Each worker draws its own seeded stream (flow ids `w<i>-…`) and its
share of the arrival rate.

What comes back, also over Locust's connection:

* metric updates, in Locust's `report_to_master` (the master replays them into its one
  registry, so only the master serves `/metrics`);
* journal lines, a batch every quarter second: the worker journals to a spool of its own
  (rolled into plain segments: `JournalShipper`) and ships what is new; the master appends it
  to `journal-w<i>.jsonl` in the results folder (segmented and compressed there), feeds its
  live figures, and acknowledges it: only then does the worker remove the spool's segments it
  covers. A worker whose master did not acknowledge everything (it could not ship, or the
  master died) keeps its spool, and says where it is.

Stopping is three-step: `stop-accepting` (no new flows), a grace period while workers
report flows in flight, then `finish`: every worker journals its flows still running as
interrupted, ships the rest of its journal and its last metrics, and answers `finished`;
only then does the master call Locust's own quit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import gevent

from harness._compat.locust import gate_master, guard_master_listener, send_stats_now
from harness.errors import ExitCode
from harness.journal.records import worker_part
from harness.journal.segments import Compressor, PartReader, SegmentedFile, closed_segments, segment_bytes
from harness.load.handshake import (
    CLUSTER_SECRET_ENV,
    Session,
    Unsealed,
    cluster_secret,
    is_nonce,
    new_nonce,
    proof,
    proven,
)
from harness.processes.children import harness_command, start_child

if TYPE_CHECKING:
    from harness.journal.writer import Journal

STOP_ACCEPTING = "mrtr:stop-accepting"
HELLO = "mrtr:hello"
CHALLENGE = "mrtr:challenge"
AUTH = "mrtr:auth"
SETUP = "mrtr:setup"
REFUSED = "mrtr:refused"
READY = "mrtr:ready"
SETUP_FAILED = "mrtr:setup-failed"
JOURNAL = "mrtr:journal"
JOURNAL_ACK = "mrtr:journal-ack"
FINISH = "mrtr:finish"
FINISHED = "mrtr:finished"
REPORT = "mrtr:report"
"""The kind a worker's metrics are sealed as, in Locust's own stats report (`report_to_master`)."""

SHIP_EVERY = 0.25
"""Seconds between journal batches from a worker: the master's live figures lag by about this much."""

SHIP_MAX_CHARS = 1_000_000
"""At most this much journal text in one message, so a backlog never makes one huge message."""

MAX_HANDSHAKES = 256
"""Nodes the master holds a handshake open for at once (the oldest dropped first), so a flood of strangers holds
no more memory than this."""
LOCUST_CHATTER = frozenset({"heartbeat", "quit", "client_stopped", "logs", "exception", "spawning",
                            "spawning_complete"})
"""Locust's own messages a worker sends before its handshake is done: dropped from a node that has not proven
itself, but not counted as its data (a `stats` message is counted when it carries the harness's metrics)."""


def journal_part(folder: Path, index: int) -> Path:
    return folder / worker_part(index)


class WorkerProcesses:
    """Worker processes the master starts on this machine (`--workers N`), stopped by PID; they die with it. Each is
    given the cluster secret in its environment."""

    def __init__(self, folder: Path, master_port: int, count: int, secret: str) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        environment = {**os.environ, CLUSTER_SECRET_ENV: secret}
        self._logs: list[IO[bytes]] = []
        logs = folder / "workers"
        logs.mkdir(exist_ok=True)
        for number in range(count):
            log = open(logs / f"process-{number}.log", "ab")  # noqa: SIM115 - held for the life of the worker
            self._logs.append(log)
            self.processes.append(start_child(
                harness_command("worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)),
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=environment))

    def exited(self) -> list[tuple[int, int]]:
        """(number, exit code) of each worker process that has exited."""
        return [(number, code) for number, process in enumerate(self.processes)
                if (code := process.poll()) is not None]

    def wait_exit(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for process in self.processes:
            while process.poll() is None and time.monotonic() < deadline:
                gevent.sleep(0.1)
            if process.poll() is None:
                process.kill()
                process.wait(5)
        for log in self._logs:
            log.close()


class JournalParts:
    """The master's side of the workers' journals: one part per worker index (rolled into segments, compressed by the
    master: `harness.journal.segments`), each batch told to the live fold.

    `before_append` runs before each batch is written (the run's own journal writes its
    pending records out), so the fold reads every part in the order the master took the
    records in; `on_grown(file name, size)` after it is in the file.
    """

    def __init__(self, folder: Path, on_grown: Callable[[str, int], None],
                 before_append: Callable[[], None] | None = None) -> None:
        self.folder = folder
        self._on_grown = on_grown
        self._before_append = before_append or (lambda: None)
        self._files: dict[int, SegmentedFile] = {}
        self._compressor = Compressor()
        self.paths: list[Path] = []

    def open(self, index: int) -> None:
        path = journal_part(self.folder, index)
        if index not in self._files:
            self._files[index] = SegmentedFile(path, segment_bytes(), self._compressor)
            self.paths.append(path)

    def append(self, index: int, lines: list[str]) -> None:
        self._before_append()
        batch = "".join(line + "\n" for line in lines).encode("utf-8")
        part = self._files[index]
        part.write(batch)
        self._on_grown(journal_part(self.folder, index).name, part.size)

    def close(self) -> None:
        for part in self._files.values():
            part.close()
        self._compressor.close()


class JournalShipper:
    """A worker's side: ships the lines its spool gained since the last batch, in bounded messages, each line once
    and in order, and removes the spool's closed segments once the master acknowledged them.

    The spool is a part in segments (`harness.journal.segments`, see `open_spool`), read as one stream from the
    offset shipped so far (`PartReader`), so a roll never loses or repeats a line, however many rolls come between
    two batches. A batch counts as shipped only once `send(lines, end)` returned: one that raised is sent again
    first. `end` is where the batch ends in the spool's stream; the master acknowledges it once the lines are in
    its part of the journal (`acknowledge`), and only closed segments wholly acknowledged are removed: a worker that
    cannot ship, or whose master dies with batches not yet written, keeps them.

    Acknowledged closed segments are removed, but for the newest one: its name says where the open segment's text
    starts in the stream. So a worker's spool holds its open segment and one or two closed ones (and those sent
    but not yet acknowledged, a fraction of a second's), however long the run; the master keeps (and compresses)
    everything.
    """

    def __init__(self, spool: Path, send: Callable[[list[str], int], None]) -> None:
        self.spool = spool
        self._reader = PartReader(spool)
        self._send = send
        self._rest = b""
        """What was read after the last whole line."""
        self._batch: tuple[list[str], int] | None = None
        """Lines read but not yet sent, and the offset after them."""
        self.offset = 0
        """Where the shipped text ends in the spool's stream."""
        self.acknowledged = 0
        """Where the text the master acknowledged ends in the spool's stream (never beyond what was sent)."""
        self._handed = 0
        """The furthest end a batch handed to `send` had (an acknowledgement may come before `send` returns)."""
        self.shipped = 0

    @property
    def all_acknowledged(self) -> bool:
        return self.acknowledged >= self.offset

    def ship(self) -> None:
        """Send everything complete that is new; `shipped` counts the lines. A `send` that raises raises here, and
        its batch is sent first next time."""
        while self._batch is not None or self._read_batch():
            assert self._batch is not None
            lines, end = self._batch
            if lines:
                self._handed = max(self._handed, end)
                self._send(lines, end)
            elif self.all_acknowledged:
                self.acknowledged = end  # nothing in it to wait for
            self._batch = None
            self.shipped += len(lines)
            self.offset = end

    def acknowledge(self, end: int) -> None:
        """The master has the stream up to `end` in its part: the closed segments that covers may go."""
        end = min(end, self._handed)
        if end > self.acknowledged:
            self.acknowledged = end
            self._remove_acknowledged()

    def _read_batch(self) -> bool:
        """The next whole lines of about `SHIP_MAX_CHARS` (a longer line whole) as the batch; False when none."""
        data = bytearray(self._rest)
        while len(data) < SHIP_MAX_CHARS or b"\n" not in data:
            chunk = self._reader.read(max(SHIP_MAX_CHARS - len(data), 1 << 16))
            if not chunk:
                break
            data += chunk
        cut = data.rfind(b"\n") + 1
        self._rest = bytes(data[cut:])
        if not cut:
            return False
        lines = [line for line in data[:cut].decode("utf-8", errors="replace").split("\n") if line]
        self._batch = (lines, self.offset + cut)
        return True

    def _remove_acknowledged(self) -> None:
        """Remove the closed segments the master acknowledged whole, but for the newest (`PartReader` finds the open
        one's start by it)."""
        acknowledged = [segment for segment in closed_segments(self.spool) if segment.end <= self.acknowledged]
        for segment in acknowledged[:-1]:
            segment.path.unlink(missing_ok=True)

    def follow(self) -> None:
        while True:
            self.ship()
            gevent.sleep(SHIP_EVERY)

    def close(self) -> None:
        """Ship the rest, including a last line with no newline after it."""
        self.ship()
        if last := self._rest.decode("utf-8", errors="replace"):
            end = self._handed = self.offset + len(self._rest)
            self._send([last], end)
            self._rest = b""
            self.shipped += 1
            self.offset = end
        self._reader.close()


def open_spool(spool: Path) -> Journal:
    """A worker's journal spool: rolled into segments like the run's journal, but its closed segments are not
    compressed. The shipper removes each once the master acknowledged it (a fraction of a second after it closes),
    so compressing it would spend the load process's CPU on a file about to go; the master compresses its copy
    (`JournalParts`). A worker that cannot ship keeps its spool plain, as it was written."""
    from harness.journal.writer import Journal

    return Journal(spool, segment_bytes=segment_bytes(), compress=False)


class WorkerSession:
    """One worker's part of a run, built when the master's setup arrives.

    Everything the flows need is built from the setup message alone (no shared files),
    so the same code serves a worker on this machine and one on another.
    """

    def __init__(self, env: Any, runner: Any, spool_root: Path | None, say: Callable[[str], None],
                 secret: str) -> None:
        self.env, self.runner, self.say = env, runner, say
        self.spool_dir = Path(tempfile.mkdtemp(prefix="mrtr-worker-", dir=spool_root))
        self.index: int | None = None
        self.plan: Any = None
        self.run_metrics: Any = None
        self.journal: Any = None
        self.shipper: JournalShipper | None = None
        self._shipping: gevent.Greenlet | None = None
        self.finished = False
        self.refused: str | None = None
        self._secret = secret
        self._nonce = new_nonce()
        self.session: Session | None = None
        """Set once the master proved it holds the cluster secret: nothing it sends is obeyed before."""
        runner.register_message(CHALLENGE, self._on_challenge)
        runner.register_message(SETUP, self._on_setup)
        runner.register_message(JOURNAL_ACK, self._on_journal_ack)
        runner.register_message(REFUSED, self._on_refused)
        runner.register_message(STOP_ACCEPTING, self._on_stop_accepting)
        runner.register_message(FINISH, self._on_finish)
        env.events.report_to_master.add_listener(self._report)

    def hello(self) -> None:
        """Say hello with this worker's challenge: the master answers it with its proof."""
        self.runner.send_message(HELLO, {"version": _version(), "nonce": self._nonce})

    def _on_challenge(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        """The master's proof, and its own challenge: answered only when the proof holds."""
        data = msg.data if isinstance(msg.data, dict) else {}
        master_nonce, node = data.get("nonce"), self.runner.client_id
        if self.session is not None:
            return
        if not is_nonce(master_nonce) or not proven(proof(self._secret, "master", node, self._nonce, master_nonce),
                                                    data.get("proof")):
            self._distrust(f"the master did not prove it holds {CLUSTER_SECRET_ENV} (another secret, or not the "
                           "run's master)")
            return
        self.session = Session(self._secret, node, self._nonce, master_nonce)
        self.runner.send_message(AUTH, {"proof": proof(self._secret, "worker", node, master_nonce, self._nonce)})

    def _distrust(self, why: str) -> None:
        self.refused = why
        self.say(f"{why}: this worker obeys nothing it sends, and quits")
        gevent.spawn(self.runner.quit)

    def _on_setup(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        from harness.config.scenario import Scenario

        if self.session is None or self.index is not None:
            self.say("a setup that came before the master proved who it is, or after this worker's own: ignored")
            return
        try:
            data = self.session.open(SETUP, msg.data)
        except Unsealed as exc:
            self.say(f"a setup not sealed by the master ({exc}): ignored")
            return
        try:
            scenario = Scenario.model_validate_json(data["scenario"])
            self.index = int(data["index"])
            self._build(scenario, data["urls"], data["labels"], int(data["workers"]), data.get("auth_url"))
        except Exception as exc:  # noqa: BLE001 - the master must hear why, or it waits for a worker that never comes
            self.say(f"could not set up from the master's setup: {type(exc).__name__}: {exc}")
            self.runner.send_message(SETUP_FAILED, {"error": f"{type(exc).__name__}: {exc}"})
            self.plan, self.refused = None, "setup failed"
            gevent.spawn(self.runner.quit)
            return
        self.say(f"worker w{self.index} of {data['workers']}: scenario {scenario.name}, "
                 f"{len(data['urls'])} replica URLs, journal spool {self.spool_dir}")
        self.runner.send_message(READY)  # the master knows the worker by its connection

    def _build(self, scenario: Any, urls: list[str], labels: list[str], workers: int, auth_url: str | None) -> None:
        from harness.load.client_stack import build_flow_env
        from harness.load.plan import LoadPlan
        from harness.load.users import user_classes
        from harness.metrics.registry import RunMetrics

        assert self.index is not None
        spool = journal_part(self.spool_dir, self.index)
        self.journal = open_spool(spool)
        self.run_metrics = RunMetrics(flows=[flow.label() for flow in scenario.flows], buffer=True)
        flow_env = build_flow_env(scenario, urls, labels, self.journal, self.run_metrics, worker=self.index,
                                  fire_request=self.env.events.request.fire, auth_url=auth_url)
        self.plan = LoadPlan(scenario, flow_env, worker=self.index, workers=workers)
        self.env.user_classes = user_classes(self.plan, None, distributed=True)
        session = self.session
        assert session is not None
        self.shipper = JournalShipper(spool, lambda lines, end: self.runner.send_message(
            JOURNAL, session.seal(JOURNAL, {"lines": lines, "end": end, "active": self.plan.active})))  # 4 a second
        self._shipping = gevent.spawn(self.shipper.follow)

    def _on_refused(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        self.refused = str(msg.data)
        self.say(f"the master refused this worker: {self.refused}")
        gevent.spawn(self.runner.quit)  # Locust's own quit tells the master, so no users are sent here

    def _on_journal_ack(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        """The master wrote a batch into its part: the spool's segments up to it may go."""
        if self.session is None or self.shipper is None:
            return
        try:
            data = self.session.open(JOURNAL_ACK, msg.data)
        except Unsealed as exc:
            self.say(f"an acknowledgement not sealed by the master ({exc}): ignored")
            return
        end = data.get("end") if isinstance(data, dict) else None
        if type(end) is int:
            self.shipper.acknowledge(end)

    def _on_stop_accepting(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        if self.plan is not None:
            self.plan.stop_accepting()

    def _report(self, client_id: str, data: dict[str, Any]) -> None:
        if self.run_metrics is not None and self.session is not None:
            data["mrtr"] = self.session.seal(REPORT, {"metrics": self.run_metrics.drain(), "active": self.plan.active})

    def _on_finish(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        """Flows still running become `interrupted`; the rest of the journal and the last metrics go to the master."""
        gevent.spawn(self.finish)

    def finish(self) -> None:
        if self.finished or self.plan is None:
            return
        self.plan.stop_accepting()
        self.plan.kill_in_flight()
        if self.plan.env.tokens is not None:
            self.plan.env.tokens.stop()
        self.journal.close()
        if self._shipping is not None:
            self._shipping.kill()
        assert self.shipper is not None
        self.shipper.close()
        # Locust's last stats report goes ahead of `finished` (one connection keeps the order): on its own,
        # it is sent on quit, and a master that waits only 0.5 s for it can miss it on a busy machine.
        send_stats_now(self.runner)
        assert self.session is not None
        self.runner.send_message(FINISHED, self.session.seal(FINISHED, {"mrtr": self.run_metrics.drain()}))
        self.finished = True
        self.say(f"finished: {self.shipper.shipped} journal records shipped to the master")

    def close(self) -> bool:
        """After Locust's quit: True when the master acknowledged everything (the spool is removed), else the spool
        stays."""
        if self.plan is not None and not self.finished:
            self.plan.kill_in_flight()
            self.journal.close()
        if self.plan is None or self.finished and self.shipper is not None and self.shipper.all_acknowledged:
            shutil.rmtree(self.spool_dir, ignore_errors=True)
            return self.refused is None
        self.say(f"the master went away before it acknowledged the whole journal; it is kept in {self.spool_dir}")
        return False


@dataclass
class Strangers:
    """What the master dropped from nodes that never proved they hold the cluster secret (and frames that were no
    message at all): counted, said at the end of the run, never folded into it."""

    refused: int = 0
    """Nodes that answered the master's challenge wrongly, or said hello without one."""
    messages: int = 0
    """Messages carrying the harness's data (journal lines, metrics, ready, finished) from such nodes, or messages
    a proven worker sent that were not sealed in its session."""
    lines: int = 0
    """Journal lines in those messages."""
    frames: int = 0
    """Frames that were no Locust message."""

    def drop(self, msg: Any) -> None:
        kind, data = msg.type, msg.data
        if not isinstance(kind, str):
            self.messages += 1
            return
        if kind in LOCUST_CHATTER or kind == "client_ready" or (kind == "stats" and not (
                isinstance(data, dict) and "mrtr" in data)):
            return
        self.messages += 1
        if kind == JOURNAL and isinstance(data, dict):
            inner = data.get("data")
            lines = (inner if isinstance(inner, dict) else data).get("lines")
            self.lines += len(lines) if isinstance(lines, list) else 0

    def garbage_frame(self) -> None:
        self.frames += 1

    def line(self) -> str | None:
        """What was dropped, in one line; None when nothing was."""
        if not (self.refused or self.messages or self.frames):
            return None
        return (f"refused {self.refused} node{'s' * (self.refused != 1)} that did not prove {CLUSTER_SECRET_ENV}; "
                f"dropped {self.messages} message{'s' * (self.messages != 1)} of theirs ({self.lines} journal "
                f"line{'s' * (self.lines != 1)}, none in the results) and {self.frames} frame"
                f"{'s' * (self.frames != 1)} that were no message")


class MasterLink:
    """The master's side: proves itself to each worker and has each prove itself (`harness.load.handshake`) before
    it sends its setup, takes in journal lines, knows who is ready and finished.

    Nothing from a node that has not proven itself reaches Locust or the run: its messages are dropped (counted in
    `strangers`), it takes no worker index. Indexes are the harness's own (0, 1, ... in the order workers proved
    themselves), so a worker's seeded stream and its journal part share one name: `w<i>`.
    """

    def __init__(self, runner: Any, setup: Callable[[int], dict[str, Any]], expected: int,
                 parts: JournalParts, apply_metrics: Callable[[list], None], say: Callable[[str], None],
                 secret: str) -> None:
        self.runner, self._setup, self.expected = runner, setup, expected
        self.parts, self._apply_metrics, self.say = parts, apply_metrics, say
        self._secret = secret
        self.index: dict[str, int] = {}
        self.sessions: dict[str, Session] = {}
        self.ready: set[int] = set()
        self.finished: set[int] = set()
        self.active: dict[int, int] = {}  # flows in flight per worker, as its last message said
        self.failed: dict[int, str] = {}  # workers that could not set up, and why
        self.gone: dict[int, str] = {}  # workers Locust lost (they quit, or their heartbeats stopped)
        self.strangers = Strangers()
        self._handshakes: dict[str, tuple[str, str]] = {}  # node -> (its nonce, the master's), until it answers
        self._held: dict[str, Any] = {}  # Locust's `client_ready` of a node, until it proves itself
        self._to_locust = gate_master(runner, self._admit)
        guard_master_listener(runner, self.strangers.garbage_frame)
        runner.register_message(HELLO, self._on_hello)
        runner.register_message(AUTH, self._on_auth)
        runner.register_message(SETUP_FAILED, self._on_setup_failed)
        runner.register_message(READY, self._on_ready)
        runner.register_message(JOURNAL, self._on_journal)
        runner.register_message(FINISHED, self._on_finished)

    def _admit(self, client_id: str, msg: Any) -> bool:
        """Whether a message goes on to Locust and the handlers: a proven worker's, or a handshake's; a node's
        `client_ready` is held (and acknowledged, so its Locust runner goes on) until it proves itself."""
        try:
            if msg.node_id != client_id or type(msg.type) is not str:
                self.strangers.drop(msg)
                return False
            if client_id in self.index:
                if msg.type == "quit":
                    self.lost(client_id, "it quit")
                return True
            if msg.type in (HELLO, AUTH):
                return True
            if msg.type == "client_ready":
                self._hold(client_id, msg)
            else:
                self.strangers.drop(msg)
            return False
        except Exception:  # noqa: BLE001 - a message no check can read is a stranger's
            self.strangers.messages += 1
            return False

    def _hold(self, node: str, msg: Any) -> None:
        if node in self._held or len(self._held) < MAX_HANDSHAKES:
            self._held[node] = msg
        self.runner.send_message("ack", {"index": -1}, client_id=node)

    def _on_hello(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        node = msg.node_id
        if node in self.index:
            return
        data = msg.data if isinstance(msg.data, dict) else {}
        version = data.get("version")
        if version != _version():
            self._refuse(node, f"harness {_shown(version)} cannot join a run of harness {_version()}")
            return
        worker_nonce = data.get("nonce")
        if not is_nonce(worker_nonce):
            self.strangers.refused += 1
            self._refuse(node, f"it sent no challenge: this master takes only workers that prove they hold "
                               f"{CLUSTER_SECRET_ENV}")
            return
        master_nonce = new_nonce()
        if len(self._handshakes) >= MAX_HANDSHAKES:
            self._handshakes.pop(next(iter(self._handshakes)))
        self._handshakes[node] = (worker_nonce, master_nonce)
        self.runner.send_message(CHALLENGE, {"nonce": master_nonce, "proof": proof(
            self._secret, "master", node, worker_nonce, master_nonce)}, client_id=node)

    def _on_auth(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        node = msg.node_id
        handshake = self._handshakes.pop(node, None)
        if node in self.index or handshake is None:
            return
        worker_nonce, master_nonce = handshake
        data = msg.data if isinstance(msg.data, dict) else {}
        if not proven(proof(self._secret, "worker", node, master_nonce, worker_nonce), data.get("proof")):
            self.strangers.refused += 1
            self._held.pop(node, None)
            self._refuse(node, f"it did not prove it holds {CLUSTER_SECRET_ENV}")
            return
        if len(self.index) >= self.expected:
            self._held.pop(node, None)
            self._refuse(node, f"this run expects {self.expected} workers, and has them")
            return
        index = self.index[node] = len(self.index)
        session = self.sessions[node] = Session(self._secret, node, worker_nonce, master_nonce)
        held = self._held.pop(node, None)
        if held is not None:
            self._to_locust(node, held)  # Locust's own: its acknowledgement, and the worker in its list
        self.parts.open(index)
        self.runner.send_message(SETUP, session.seal(SETUP, self._setup(index)), client_id=node)

    def _refuse(self, client_id: str, why: str) -> None:
        self.say(f"worker {_shown(client_id)} refused: {why}")
        self.runner.send_message(REFUSED, why, client_id=client_id)

    def _opened(self, kind: str, msg: Any) -> tuple[int, Any] | None:
        """(index, data) of a proven worker's message sealed in its session; None (counted) when it is not."""
        index, session = self.index.get(msg.node_id), self.sessions.get(msg.node_id)
        if index is None or session is None:
            return None
        try:
            data = session.open(kind, msg.data)
        except Unsealed:
            self.strangers.drop(msg)
            return None
        return (index, data) if isinstance(data, dict) else None

    def _on_setup_failed(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        index = self.index.get(msg.node_id)
        if index is not None:
            self.failed[index] = str(msg.data.get("error") if isinstance(msg.data, dict) else None)[:500]

    def _on_ready(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        index = self.index.get(msg.node_id)
        if index is not None:
            self.ready.add(index)

    def _on_journal(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        opened = self._opened(JOURNAL, msg)
        if opened is not None:
            index, data = opened
            lines = data.get("lines")
            if isinstance(lines, list):
                self.parts.append(index, [line for line in lines if isinstance(line, str) and "\n" not in line])
            self.active[index] = _count(data.get("active"))
            end = data.get("end")
            if type(end) is int:  # in the part (and flushed): the worker may let its spool's copy go
                self.runner.send_message(JOURNAL_ACK, self.sessions[msg.node_id].seal(JOURNAL_ACK, {"end": end}),
                                         client_id=msg.node_id)

    def report(self, client_id: str, data: dict[str, Any]) -> None:
        """Locust's own worker report (every few seconds) carries the worker's metrics and flows in flight, sealed."""
        if "mrtr" not in data:
            return
        opened = self._opened(REPORT, _Sealed(client_id, REPORT, data["mrtr"]))
        if opened is not None:
            index, report = opened
            self._apply_metrics(report.get("metrics") or [])
            self.active[index] = _count(report.get("active"))

    def _on_finished(self, environment: Any, msg: Any, **kwargs: Any) -> None:
        opened = self._opened(FINISHED, msg)
        if opened is not None:
            index, data = opened
            self._apply_metrics(data.get("mrtr") or [])
            self.active[index] = 0
            self.finished.add(index)

    def lost(self, node: str, why: str) -> None:
        """A proven worker was lost (it quit, its heartbeats stopped): noted in `gone` unless it had finished."""
        index = self.index.get(node)
        if index is not None and index not in self.finished:
            self.gone.setdefault(index, why)

    def finish(self, timeout: float) -> list[int]:
        """Ask every worker to finish; wait for the answers of those not lost. Returns the indexes that never
        answered (the lost ones among them, not waited for)."""
        self.runner.send_message(FINISH)
        deadline = time.monotonic() + timeout
        while len(self.finished | self.gone.keys()) < len(self.index) and time.monotonic() < deadline:
            gevent.sleep(0.05)
        return sorted(set(self.index.values()) - self.finished)


@dataclass
class _Sealed:
    """A sealed part of a message, as a message: what `MasterLink._opened` reads."""

    node_id: str
    type: str
    data: Any


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def _shown(value: object, limit: int = 60) -> str:
    """Something a node sent, for one line on the terminal: quoted, its control characters escaped, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def run_worker(master_host: str, master_port: int, spool_root: Path | None = None) -> int:
    """A worker's whole life: connect, take the master's setup, run flows, ship the journal, quit when told."""
    from locust.env import Environment
    from locust.event import Events

    def say(text: str) -> None:
        print(f"mrtr-harness worker: {text}", file=sys.stderr, flush=True)

    secret = cluster_secret(throwaway=False)  # MissingSecret (exit 2) before anything connects
    _import_setup_modules()
    env = Environment(events=Events())
    try:
        runner = env.create_worker_runner(master_host, master_port)
    except ConnectionError:
        say(f"no master answered at {master_host}:{master_port}")
        return ExitCode.TARGET
    session = WorkerSession(env, runner, spool_root, say, secret)
    session.hello()
    say(f"connected to the master at {master_host}:{master_port}; waiting for its setup")
    try:
        runner.greenlet.join()
    finally:
        shipped = session.close()
    return 0 if shipped else 1


def _import_setup_modules() -> None:
    """Import what a setup builds with before connecting: importing it takes seconds of CPU on a busy machine, and
    done while handling the setup it would hold up the worker's heartbeats."""
    import harness.config.scenario
    import harness.load.client_stack
    import harness.load.plan
    import harness.load.users
    import harness.metrics.registry  # noqa: F401 - imported for their cost, used by `_on_setup`


def _version() -> str:
    import harness

    return harness.__version__


def setup_message(scenario_json: str, urls: list[str], labels: list[str], index: int, workers: int,
                  auth_url: str | None = None) -> dict[str, Any]:
    """Everything a worker needs, for worker `index` of `workers` (`auth_url`: see `build_flow_env`)."""
    return {"scenario": scenario_json, "urls": urls, "labels": labels, "index": index, "workers": workers,
            "auth_url": auth_url}
