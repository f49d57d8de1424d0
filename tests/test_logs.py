"""The log pipeline a run reads its rejections through: only this run's lines, every shape, one poller.

Real files written while they are followed, real commands, a real `mrtr-harness run`
against a real MRTR server (the garden) as an external target, and `mrtr-harness
validate` as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness.config.logs import LogSource, parse_labelled_file, parse_log_location
from harness.journal.writer import read_journal
from harness.logs.changes import FileChanges
from harness.logs.collector import Collector, RejectionEvent
from tests.harness_run import ROOT
from tests.servers import start_server
from tests.services import fail_or_skip

WAIT_SECONDS = 30.0
HOUR = 3600.0


def shop_line(t: float, reason: str, replica: str = "r1") -> str:
    """A rejection as the shop's replicas log it, stamped `t`."""
    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return (f"{stamp} WARNING replica={replica} mcp.server.request_state: "
            f"requestState rejected on tools/call: {reason}\n")


def python_default_line(t: float, reason: str) -> str:
    """Python's default `%(asctime)s` format (local time, comma before the milliseconds)."""
    moment = datetime.fromtimestamp(t)
    return (moment.strftime("%Y-%m-%d %H:%M:%S") + f",{moment.microsecond // 1000:03d} WARNING "
            f"mcp.server.request_state: requestState rejected on tools/call: {reason}\n")


def json_line(t: float, reason: str, key: str = "time") -> str:
    return json.dumps({key: datetime.fromtimestamp(t, UTC).isoformat(), "level": "WARNING",
                       "message": f"requestState rejected on tools/call: {reason}", "pod": "shop-1"}) + "\n"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def append(path: Path, *lines: str) -> None:
    with path.open("a") as out:
        out.write("".join(lines))


# --- a whole run -------------------------------------------------------------------------------

SCENARIO = """
name = "history"
seed = 3
duration = "6s"
grace = "2s"

[target]
kind = "external"
urls = ["{url}"]
logs = ["file:{log}@app"]

[load]
arrival_rate = 2

[[flows]]
kind = "call"
tool = "water"
arguments = {{ bed_id = "B-3" }}
"""


@pytest.fixture(scope="module")
def garden(tmp_path_factory):
    folder = tmp_path_factory.mktemp("garden")
    running = start_server("tests.servers.garden", "--sse", env={"GARDEN_REQUEST_STATE_KEY": "ab" * 32},
                           log=folder / "garden.log")
    try:
        yield running
    finally:
        running.stop()


def test_a_run_counts_the_rejections_logged_during_it_not_the_logs_history(garden, tmp_path):
    log = tmp_path / "app.log"
    an_hour_ago = time.time() - HOUR
    log.write_text("".join(shop_line(an_hour_ago + n, "unknown key") for n in range(40)))
    scenario = tmp_path / "history.toml"
    scenario.write_text(SCENARIO.format(url=garden.url, log=log))
    results = tmp_path / "results"
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results),
                            "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: _journal_has(results, "load-started"), "the load to start")
        written = time.time()
        stamps = [written - 0.5 + n * 0.1 for n in range(5)]
        append(log, *(shop_line(t, "expired") for t in stamps))
        append(log, shop_line(time.time() - HOUR, "seal"))  # written now, but an old line (shipped late)
        output, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, output
    journal = list(read_journal(next(results.iterdir()) / "journal.jsonl"))
    rejections = [record for record in journal if record["type"] == "rejection"]
    assert [(record["replica"], record["reason"]) for record in rejections] == [("r1", "expired")] * 5
    assert [record["t"] for record in rejections] == pytest.approx(stamps, abs=1e-3), \
        "each rejection keeps the time its line says it was logged"
    reconciliation = next(record for record in journal if record["type"] == "reconciliation")
    assert reconciliation["logged"] == 5


def _journal_has(results: Path, event: str) -> bool:
    journals = list(results.glob("*/journal.jsonl")) if results.exists() else []
    return bool(journals) and f'"{event}"' in journals[0].read_text()


# --- the collector, source by source ------------------------------------------------------------


def collect(since: float) -> tuple[Collector, list[RejectionEvent]]:
    events: list[RejectionEvent] = []
    lock = threading.Lock()

    def on_rejection(event: RejectionEvent) -> None:
        with lock:
            events.append(event)

    return Collector(on_rejection, since=since), events


def test_a_followed_file_is_read_from_its_end_and_old_stamps_are_dropped_in_every_shape(tmp_path):
    log = tmp_path / "app.log"
    began = time.time()
    log.write_text(shop_line(began - 1, "seal"))  # there before it was followed: history
    collector, events = collect(since=began)
    collector.follow(LogSource("file", str(log), "app"))
    now = time.time()
    append(log,
           shop_line(now, "expired", replica="r2"),
           python_default_line(now, "audience"),
           json_line(now, "malformed"),
           json_line(now, "unknown key", key="@timestamp"),
           "requestState rejected on tools/call: principal drift\n",  # no time of its own: kept, read now
           shop_line(began - HOUR, "seal"),
           python_default_line(began - HOUR, "seal"),
           json_line(began - HOUR, "seal", key="ts"),
           "[pod/shop-7d9f-abcde/shop] " + shop_line(began - HOUR, "seal"))
    collector.stop(settle=0.3)
    assert sorted((event.replica, event.reason) for event in events) == [
        ("app", "audience"), ("app", "principal drift"), ("r2", "expired"), ("shop-1", "malformed"),
        ("shop-1", "unknown key")]
    assert collector.dropped == 4
    assert all(now - 0.01 <= event.t <= time.time() for event in events), [event.t - now for event in events]


def test_a_followed_rejection_line_brings_the_trace_id_it_carries(tmp_path):
    log = tmp_path / "app.log"
    log.write_text("")
    collector, events = collect(since=time.time())
    collector.follow(LogSource("file", str(log), "app"))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    append(log, shop_line(time.time(), "seal").replace("replica=r1 ", f"replica=r1 trace_id={trace_id} "),
           shop_line(time.time(), "expired"))
    collector.stop(settle=0.3)
    assert [(event.replica, event.reason, event.trace_id) for event in events] == [
        ("r1", "seal", trace_id), ("r1", "expired", None)]


def utc_container_line(t: float, reason: str) -> str:
    """Python's default format in a container whose clock is UTC: a naive stamp, in UTC."""
    moment = datetime.fromtimestamp(t, UTC)
    return (moment.strftime("%Y-%m-%d %H:%M:%S") + f",{moment.microsecond // 1000:03d} WARNING "
            f"mcp.server.request_state: requestState rejected on tools/call: {reason}\n")


@pytest.fixture
def local_zone():
    """Sets this process's local time zone (a POSIX TZ string: no zone database needed); restores it after."""
    before = os.environ.get("TZ")

    def set_zone(zone: str) -> None:
        os.environ["TZ"] = zone
        time.tzset()

    yield set_zone
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.mark.parametrize("zone", ["CET-1", "JST-9", "EST5", "UTC0"])
def test_a_stamp_without_a_zone_is_read_as_utc_or_local_time_whichever_the_run_can_have_seen(
        tmp_path, local_zone, zone):
    local_zone(zone)  # the machine reading the logs: Berlin in winter, Tokyo, New York, UTC
    log = tmp_path / "app.log"
    log.write_text("")
    began = time.time()
    collector, events = collect(since=began)
    collector.follow(LogSource("file", str(log), "app"))
    now = time.time()
    append(log,
           utc_container_line(now, "seal"),  # a container's fresh line, its clock in UTC
           python_default_line(now, "expired"),  # a local process's fresh line, in local time
           # a container's history, replayed (a command, a shipper late): before the run in any zone
           *(utc_container_line(began - hours * HOUR, "audience") for hours in (0.5, 1, 3, 10)))
    collector.stop(settle=0.3)
    assert sorted(event.reason for event in events) == ["expired", "seal"]
    assert all(event.t == pytest.approx(now, abs=0.01) for event in events), [event.t - now for event in events]
    assert collector.dropped == 4


def test_a_file_that_appears_after_it_is_followed_is_read_from_its_start(tmp_path):
    log = tmp_path / "later.log"
    collector, events = collect(since=time.time())
    collector.follow(LogSource("file", str(log), "app"))
    log.write_text(shop_line(time.time(), "expired") + shop_line(time.time(), "seal"))
    wait_for(lambda: len(events) == 2, "both lines of the new file")
    collector.stop(settle=0)
    assert [event.reason for event in events] == ["expired", "seal"]


def test_a_command_that_replays_history_counts_only_lines_stamped_since_the_run_began(tmp_path):
    backlog = tmp_path / "backlog.log"
    began = time.time()
    backlog.write_text(shop_line(began - HOUR, "seal") * 30 + shop_line(began + 0.2, "expired"))
    collector, events = collect(since=began)
    collector.follow(parse_log_location(f"command:cat {backlog}", 0))
    wait_for(lambda: collector.lines_read == 31, "the command's output")
    collector.stop(settle=0)
    assert [(event.replica, event.reason) for event in events] == [("r1", "expired")]
    assert events[0].t == pytest.approx(began + 0.2, abs=1e-3)
    assert collector.dropped == 30


def test_one_poller_thread_follows_every_file(tmp_path):
    logs = [tmp_path / f"r{n}.log" for n in range(1, 7)]
    for log in logs:
        log.write_text("")
    before = set(threading.enumerate())
    collector, events = collect(since=time.time())
    for n, log in enumerate(logs, start=1):
        collector.follow(LogSource("file", str(log), f"r{n}"))
    started = [thread for thread in threading.enumerate() if thread not in before]
    for log in logs:
        append(log, shop_line(time.time(), "expired", replica=log.stem))
    wait_for(lambda: len(events) == len(logs), "a line from every file")
    collector.stop(settle=0)
    assert [thread.name for thread in started] == ["logs-file-poller"], "one thread for six files"
    assert sorted(event.replica for event in events) == [log.stem for log in logs]
    assert not any(thread.is_alive() for thread in started), "the poller ends with the collector"


def test_the_kernel_says_when_a_followed_name_changes_and_nothing_else_wakes_the_wait(tmp_path):
    """inotify on the folder: a write to a followed file ends the wait; one to another file there does not."""
    followed, other = tmp_path / "r1.log", tmp_path / "api.log"
    changes = FileChanges()
    if not changes.available:
        fail_or_skip("no inotify here: every wait is the poller's timer")  # CI's Linux has it: a failure there
    try:
        assert changes.watch([followed])
        append(other, "not followed\n")
        assert changes.wait(0.3) is False
        append(followed, "followed\n")
        assert changes.wait(WAIT_SECONDS) is True
        threading.Timer(0.2, changes.wake).start()
        assert changes.wait(WAIT_SECONDS) is False, "wake() ends a wait"
        assert not changes.watch([tmp_path / "not yet" / "r2.log"]), "a folder that is not there cannot be watched"
    finally:
        changes.close()


def test_a_followed_file_is_read_after_quiet_rotation_truncation_and_a_folder_that_came_later(tmp_path):
    """However a followed file changes, its lines are read while the run goes on (not only at the stop)."""
    log, late = tmp_path / "r1.log", tmp_path / "later" / "r2.log"
    log.write_text("")
    collector, events = collect(since=time.time())
    collector.follow(LogSource("file", str(log), "r1"))
    collector.follow(LogSource("file", str(late), "r2"))
    reasons = lambda: [event.reason for event in events]  # noqa: E731
    time.sleep(0.5)  # quiet: the poller waits on the kernel
    append(log, shop_line(time.time(), "expired"))
    wait_for(lambda: reasons() == ["expired"], "a line after a quiet spell")
    log.rename(tmp_path / "r1.log.1")
    append(tmp_path / "r1.log.1", shop_line(time.time(), "seal"))  # the writer still held the old file
    append(log, shop_line(time.time(), "audience"))
    wait_for(lambda: sorted(reasons()) == ["audience", "expired", "seal"], "both sides of a rotation")
    log.write_text("requestState rejected on tools/call: malformed\n")  # truncated, shorter: rewritten in place
    wait_for(lambda: "malformed" in reasons(), "a line after a truncation")
    late.parent.mkdir()
    append(late, shop_line(time.time(), "unknown key", replica="r2"))
    wait_for(lambda: "unknown key" in reasons(), "a file whose folder appeared after it was followed")
    collector.stop(settle=0)
    assert sorted(reasons()) == ["audience", "expired", "malformed", "seal", "unknown key"]


# --- the scenario's log entries ---------------------------------------------------------------


@pytest.mark.parametrize("entry, expected", [
    ("file:logs/r1.log@r1", LogSource("file", "logs/r1.log", "r1")),
    ("file:logs/app.log", LogSource("file", "logs/app.log", "log2")),
    ("file:/var/log/user@host/r1.log", LogSource("file", "/var/log/user@host/r1.log", "log2")),
    ("command:kubectl logs -f deploy/mcp --since=1s --prefix",
     LogSource("command", "kubectl logs -f deploy/mcp --since=1s --prefix", "log2")),
    ("docker:com.docker.compose.service=replica", LogSource("docker", "docker:com.docker.compose.service=replica",
                                                             "log2")),
])
def test_a_log_entry_names_its_kind_location_and_replica(entry, expected):
    assert parse_log_location(entry, 1) == expected


@pytest.mark.parametrize("entry, message", [
    ("sytem:/var/log/x", "unknown kind 'sytem'"),
    ("/var/log/app.log", "unknown kind"),
    ("command:", "nothing after 'command:'"),
    ("docker:replica", "write docker:LABEL=VALUE"),
    ("file:logs/r1.log@", "nothing after '@' in 'logs/r1.log@'"),
    ("file:logs/r1.log@r 1", "the replica label 'r 1' in 'logs/r1.log@r 1' holds characters a label cannot"),
])
def test_a_bad_log_entry_is_refused_with_the_forms_it_may_take(entry, message):
    with pytest.raises(ValueError, match=message):
        parse_log_location(entry, 0)


@pytest.mark.parametrize("text", ["logs/r1.log@r1", "/var/log/mcp/r2.log@shop-eu.2", "logs/app.log"])
def test_a_files_replica_is_written_the_same_in_a_scenario_and_on_triages_command_line(text):
    """One spelling, one parser: `file:PATH@LABEL` in a scenario's logs is `triage --file PATH@LABEL`."""
    entry = parse_log_location(f"file:{text}", 0)
    given = parse_labelled_file(text)
    assert (given.path, given.label or "log1", given.old_form) == (entry.path, entry.replica, False)


def test_validate_refuses_an_unknown_log_kind_with_exit_2_and_its_line(tmp_path):
    scenario = tmp_path / "typo.toml"
    text = SCENARIO.format(url="http://127.0.0.1:9/mcp", log="app.log").replace('"file:app.log@app"',
                                                                               '"sytem:/var/log/x"')
    scenario.write_text(text)
    line = next(n for n, row in enumerate(text.splitlines(), start=1) if row.startswith("logs ="))
    finished = subprocess.run([sys.executable, "-m", "harness", "validate", str(scenario)], check=False, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 2, output
    assert f"{scenario}:{line}: target.logs" in output and "unknown kind 'sytem'" in output, output
    assert "Traceback" not in output
