"""`hunt --shares N`: one search run as N shares at once on this machine, then merged into one hunt.

A trial mostly waits (think times, the grace for flows in flight, the logs' settle), so two or three
trials at once on two cores run nearly as fast as one each, and the search's trials a minute rise
nearly in step (the figures are in benchmarks/README.md). Each share is a child `hunt --trial-range
A:B` of the same search (contiguous spans; the draws and seeds are the whole hunt's), started with
the lifeline so none outlives this process, its folder under `<results>/<utc>-hunt-<name>-shares/`.
Its lines are relayed prefixed `[share K]`. Once a share's journal records a failure that stands (a
find that replayed, or a failed control; a find set aside as flaky does not count), the others are
stopped by SIGTERM, which a hunt reads as Ctrl-C (a trial under way rolls its chaos back); the finder
shrinks and hands over as a lone hunt does. Then the
shares are merged (`harness.hunt.merge`) into one hunt.json, hunt.jsonl and page, in a folder beside
the shares' (`<utc>-hunt-<name>-merged`), from which the trials' folders it names are found.

Only strategies whose draws do not depend on earlier trials can share (random, swarm, cover); a
corpus is replayed once, so it is refused with shares. Ctrl-C or SIGTERM stops every share: exit 130.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from harness import foreign_text
from harness.config.hunt import BOUND_FLAGS
from harness.errors import ExitCode, UsageError
from harness.hunt.records import HuntRecordType
from harness.processes.children import harness_command, kill_session, sigterm_as_ctrl_c, start_child
from harness.run.results_folder import results_folder

POLL = 0.5
"""How often (s) the shares' journals are read for a failure that stands."""
STOP_GRACE = 120.0
"""How long (s) a stopped share may take to roll its trial back and write its folder before it is killed."""
_PASSED_AS_GIVEN = ("actions", "replicas", "from_triage")
"""The hunt's flags, beside its `[hunt]` bound flags, a share is given as they were given here."""


def spans(trials: int, shares: int) -> list[tuple[int, int]]:
    """The search's trials 1..`trials` as `shares` contiguous ranges, as even as whole trials allow."""
    return [(trials * index // shares + 1, trials * (index + 1) // shares) for index in range(shares)]


def check_shares(shares: int, trials: int, strategy: str, corpus: bool, trial_range: str | None) -> None:
    """UsageError (exit 2, nothing started) for shares the search cannot be split into."""
    if shares < 2:
        raise UsageError(f"--shares {shares}: want 2 or more (one hunt is the default)")
    if shares > trials:
        raise UsageError(f"--shares {shares}: more shares than the search's {trials} trials (--trials)")
    if strategy == "lineage":
        raise UsageError("--shares: the lineage strategy draws each trial from what the earlier trials showed, so "
                         "its trials cannot run at once; use random, swarm or cover")
    if corpus:
        raise UsageError("--shares: --corpus is replayed before the search, once; run it in one hunt")
    if trial_range is not None:
        raise UsageError("--shares with --trial-range: a share is not split again; give one or the other")


def share_arguments(args: argparse.Namespace) -> list[str]:
    """The flags each share is started with: the search's own, as given to this hunt."""
    given: list[str] = []
    for dest in (*BOUND_FLAGS, *_PASSED_AS_GIVEN):
        value, flag = getattr(args, dest, None), "--" + dest.replace("_", "-")
        if isinstance(value, bool):  # --expect / --no-expect, --reuse / --no-reuse
            given.append(flag if value else f"--no-{dest}")
        elif value is not None:
            given += [flag, str(value)]
    for host in getattr(args, "allow_host", None) or ():
        given += ["--allow-host", host]
    return given


@dataclass
class Share:
    """One share: its span, folder and child process, and what its journal has shown."""

    number: int
    span: tuple[int, int]
    results: Path
    process: subprocess.Popen[str] | None = None
    failed: bool = False
    stopped: bool = False
    relay: threading.Thread | None = None

    def journal(self) -> Path | None:
        """The share's hunt.jsonl, once its hunt has made its folder."""
        found = sorted(self.results.glob("*-hunt-*/hunt.jsonl"))
        return found[0] if len(found) == 1 else None

    def folder(self) -> Path | None:
        journal = self.journal()
        return journal.parent if journal is not None else None


def journal_has_failure(path: Path) -> bool:
    """Whether a share's hunt.jsonl records a failure that stands: a control trial that failed, or a find whose
    replays failed the same way in `must_fail` of them (a find set aside as flaky does not stop the other shares: the
    search goes on past it, as one hunt's would). Any line that is not such a record is passed over: the file is
    being written."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    must_fail, replayed = 1, 0
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        kind, purpose = record.get("type"), record.get("purpose")
        if kind == HuntRecordType.START and isinstance(record.get("bounds"), dict):
            given = record["bounds"].get("must_fail")
            must_fail = given if isinstance(given, int) and given > 0 else 1
        elif kind == HuntRecordType.FLAKY:
            replayed = 0
        elif kind == HuntRecordType.TRIAL and record.get("failures") and purpose in ("control", "replay"):
            replayed += purpose == "replay"
            if purpose == "control" or replayed >= must_fail:
                return True
    return False


class SharedHunt:
    """The shares of one search, run at once (see the module)."""

    def __init__(self, scenario: Path, arguments: Sequence[str], trials: int, shares: int, results_root: Path,
                 name: str, stream: IO[str]) -> None:
        self.scenario, self.arguments, self.stream = scenario, list(arguments), stream
        self.root = results_folder(results_root, f"hunt-{name}-shares")
        self.shares = [Share(number, span, self.root / f"share-{number}")
                       for number, span in enumerate(spans(trials, shares), 1)]
        self._lock = threading.Lock()

    def say(self, line: str) -> None:
        """One line on the terminal, whole: a share's own lines are the harness's (a certificate runs long), made
        safe again here all the same."""
        with self._lock:
            print(foreign_text.line(line, foreign_text.BLOCK_LIMIT), file=self.stream, flush=True)

    def run(self) -> int:
        """Start every share, stop the others at the first failure, wait, merge: the merged hunt's exit code (4 when a
        share failed as a harness, 130 when interrupted)."""
        self.say(f"hunt: {len(self.shares)} shares at once, trials "
                 + ", ".join(f"{a}-{b}" for a, b in (share.span for share in self.shares))
                 + f"; their folders under {self.root}")
        try:
            with sigterm_as_ctrl_c():
                for share in self.shares:
                    self._start(share)
                self._watch()
        except KeyboardInterrupt:
            self._stop(self.shares, "interrupted")
            self.say(f"hunt: interrupted; the shares' folders are under {self.root}")
            return int(ExitCode.INTERRUPTED)
        finally:
            self._reap()
        return self._merge()

    def _start(self, share: Share) -> None:
        share.results.mkdir(parents=True)
        argv = harness_command("hunt", str(self.scenario), *self.arguments, "--trial-range",
                               f"{share.span[0]}:{share.span[1]}", "--results", str(share.results))
        share.process = start_child(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    encoding="utf-8", errors="replace")
        share.relay = threading.Thread(target=self._relay, args=(share,), name=f"share-{share.number}", daemon=True)
        share.relay.start()

    def _relay(self, share: Share) -> None:
        assert share.process is not None and share.process.stdout is not None
        for line in share.process.stdout:
            self.say(f"[share {share.number}] {line.rstrip()}")

    def _watch(self) -> None:
        """Wait for every share; at the first failure that stands in any, stop the others."""
        stopped = False
        while any(share.process is not None and share.process.poll() is None for share in self.shares):
            if not stopped:
                finder = next((share for share in self.shares if self._failed(share)), None)
                if finder is not None:
                    others = [share for share in self.shares if share is not finder]
                    self._stop(others, f"share {finder.number} found a failure")
                    stopped = True
            time.sleep(POLL)

    def _failed(self, share: Share) -> bool:
        journal = share.journal()
        share.failed = share.failed or (journal is not None and journal_has_failure(journal))
        return share.failed

    def _stop(self, shares: Sequence[Share], why: str) -> None:
        running = [share for share in shares if share.process is not None and share.process.poll() is None]
        if running:
            self.say(f"hunt: {why}: stopping share {', '.join(str(share.number) for share in running)}")
        for share in running:
            assert share.process is not None
            share.stopped = True
            share.process.send_signal(signal.SIGTERM)

    def _reap(self) -> None:
        """Wait for every share (a stopped one gets `STOP_GRACE` to write its folder, then is killed)."""
        deadline = time.monotonic() + STOP_GRACE
        for share in self.shares:
            if share.process is None:
                continue
            try:
                share.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                kill_session(share.process)
            if share.relay is not None:
                share.relay.join(timeout=5)

    def _merge(self) -> int:
        from harness.hunt.merge import MergeRefused, merge_hunts

        kept: list[Path] = []
        for share in self.shares:
            assert share.process is not None
            code, folder = share.process.returncode, share.folder()
            if share.stopped and (folder is None or code not in (ExitCode.INTERRUPTED, ExitCode.PASSED,
                                                                 ExitCode.FAILED)):
                # stopped before its hunt could catch the signal (starting up): what it ran is not whole
                self.say(f"hunt: share {share.number} was stopped while it started (exit {code}): left out of the "
                         "merge")
                continue
            if code not in (ExitCode.PASSED, ExitCode.FAILED, ExitCode.INTERRUPTED) or folder is None:
                self.say(f"hunt: share {share.number} ended with exit {code}"
                         + ("" if folder is not None else " and no hunt folder")
                         + f": nothing merged; its lines are above, its folder under {share.results}")
                return int(code if code in (ExitCode.USAGE, ExitCode.TARGET) else ExitCode.HARNESS)
            kept.append(folder)
        try:
            merged = merge_hunts(kept, self.root)  # beside the shares, whose trials' folders it names from there
        except MergeRefused as refused:
            self.say(f"hunt: the shares could not be merged: {refused}")
            return int(ExitCode.HARNESS)
        for line in merged.lines():
            print(line, flush=True)
        return merged.exit_code


def run_shares(args: argparse.Namespace, trials: int, name: str) -> int:
    """`hunt SCENARIO --shares N`, checked by the caller (`check_shares`)."""
    return SharedHunt(args.scenario, share_arguments(args), trials, args.shares, args.results, name,
                      sys.stderr).run()
