"""Each edge in `harness/_compat/` against the installed library: what the harness relies on is there and acts so.

A library's private parts may change in any release. These fail when the installed
prometheus_client, ddsketch, MCP SDK or Locust no longer has, or no longer means, a private
name the harness uses; pyproject.toml caps each of them at the minor release they passed on.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import subprocess
import sys
import threading
from collections import Counter as Tally
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from ddsketch import DDSketch
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, enable_created_metrics
from prometheus_client.samples import Sample

from harness._compat.ddsketch import OpenSketch
from harness._compat.mcp import create_mcp_http_client
from harness._compat.prometheus import (
    CustomCounter,
    CustomGauge,
    CustomHistogram,
    created_samples,
    label_names,
    upper_bounds,
    use_value_lock,
)
from tests.harness_run import ROOT

# --- the edges stay in one place -------------------------------------------------------------------------------


def _private_imports(path: Path) -> list[str]:
    """Other packages' private modules (a dotted part starting with `_`) a harness module imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        found += [name for name in names if not name.startswith("harness") and name != "__future__"
                  and any(part.startswith("_") for part in name.split("."))]
    return found


def test_only_harness_compat_imports_another_librarys_private_modules():
    outside = {str(path.relative_to(ROOT)): names for path in sorted((ROOT / "harness").rglob("*.py"))
               if "_compat" not in path.parts and (names := _private_imports(path))}
    assert outside == {}
    assert _private_imports(ROOT / "harness" / "_compat" / "mcp.py") == ["mcp.shared._httpx_utils"]  # it sees them


# --- prometheus_client -----------------------------------------------------------------------------------------


class _Held(CustomCounter):
    """A counter child holding one number, made and read through the hooks only."""

    made: list[Any] = []

    def start_child(self) -> None:
        self.held = 0.0
        _Held.made.append(self)

    def child_samples(self) -> Iterable[Sample]:
        return (Sample("_total", {}, self.held, None, None),)


class _Level(CustomGauge):
    def start_child(self) -> None:
        self.level = 0.0

    def child_samples(self) -> Iterable[Sample]:
        return (Sample("", {}, self.level, None, None),)


class _Spread(CustomHistogram):
    def start_child(self) -> None:
        self.seen_bounds = list(self.bounds)

    def child_samples(self) -> Iterable[Sample]:
        return tuple(Sample("_bucket", {"le": str(bound)}, 0.0, None, None) for bound in self.seen_bounds)


def test_prometheus_makes_each_child_through_start_child_and_scrapes_it_through_child_samples():
    registry = CollectorRegistry()
    _Held.made.clear()
    held = _Held("compat_held", "A number per label set.", ["kind"], registry=registry)
    assert _Held.made == []  # the labelled parent holds no values
    held.labels(kind="a").held = 3.0
    held.labels(kind="b")
    assert len(_Held.made) == 2
    assert registry.get_sample_value("compat_held_total", {"kind": "a"}) == 3.0
    assert registry.get_sample_value("compat_held_total", {"kind": "b"}) == 0.0
    level = _Level("compat_level", "One number.", registry=registry)  # unlabelled: its child is itself, made at once
    level.level = 2.5
    assert registry.get_sample_value("compat_level") == 2.5


def test_a_histogram_child_knows_its_bounds_before_start_child():
    registry = CollectorRegistry()
    spread = _Spread("compat_spread", "Buckets.", ["kind"], buckets=(0.1, 1.0), registry=registry)
    assert spread.labels(kind="a").seen_bounds == [0.1, 1.0, math.inf]
    assert registry.get_sample_value("compat_spread_bucket", {"kind": "a", "le": "1.0"}) == 0.0


def test_created_samples_follow_prometheus_clients_own_switch():
    was_on = bool(created_samples(1.0))
    registry = CollectorRegistry()
    try:
        disable_created_metrics()
        assert created_samples(1.0) == ()
        Counter("compat_off", "No _created.", registry=registry)
        assert registry.get_sample_value("compat_off_created") is None  # the library agrees
        enable_created_metrics()
        assert created_samples(1.0) == (Sample("_created", {}, 1.0, None, None),)
    finally:
        (enable_created_metrics if was_on else disable_created_metrics)()


def test_label_names_and_bounds_are_read_off_the_metric():
    registry = CollectorRegistry()
    histogram = Histogram("compat_seconds", "Seconds.", ["flow", "round"], buckets=(0.5, 2.0), registry=registry)
    counter = Counter("compat_count", "Count.", ["outcome"], registry=registry)
    assert label_names(histogram) == ("flow", "round")
    assert label_names(counter) == ("outcome",)
    assert upper_bounds(histogram) == [0.5, 2.0, math.inf]
    assert upper_bounds(counter) == []


class _CountingLock:
    entered = 0

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> bool:
        _CountingLock.entered += 1
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


def test_values_made_after_use_value_lock_take_that_lock():
    before = use_value_lock(_CountingLock)
    try:
        counter = Counter("compat_locked", "Guarded.", registry=CollectorRegistry())
    finally:
        assert use_value_lock(before) is _CountingLock
    _CountingLock.entered = 0
    counter.inc()
    assert _CountingLock.entered == 1


# --- ddsketch --------------------------------------------------------------------------------------------------

FLOOR = 1e-6
VALUES = [0.0, 5e-7, 0.0012, 0.003, 0.003, 0.25, 1.5, 3600.0, 2e-6, 0.0012]
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 1.0)


def _filled(values: list[float]) -> OpenSketch:
    sketch = OpenSketch(0.01, FLOOR)
    for value in values:
        sketch.add_floored(value)
    return sketch


def test_add_floored_builds_the_sketch_the_librarys_add_builds():
    ours, theirs = _filled(VALUES), DDSketch(0.01)
    floored = [value if value >= FLOOR else 0.0 for value in VALUES]
    for value in floored:
        theirs.add(value)
    assert ours.count == theirs.count == len(VALUES)
    assert ours.nanoseconds == sum(round(value * 1e9) for value in floored) and ours.sum == pytest.approx(theirs.sum)
    assert [ours.get_quantile_value(q) for q in QUANTILES] == [theirs.get_quantile_value(q) for q in QUANTILES]
    assert (ours.zero_count, ours.minimum, ours.maximum) == (floored.count(0.0), 0.0, 3600.0)
    key, bins = ours.bins_in_use()
    keys = Tally(ours.mapping.key(value) for value in floored if value)
    assert key == min(keys) and len(bins) == max(keys) - min(keys) + 1
    assert {key + index: n for index, n in enumerate(bins) if n} == keys
    assert ours.key_at_rank(0) == ours.mapping.key(2e-6) and ours.key_at_rank(7) == ours.mapping.key(3600.0)


def test_sketches_filled_apart_and_merged_equal_one_filled_whole_to_the_last_bit():
    """The sum is whole nanoseconds: halves merged in either order give the whole's bytes (`report DIR` folds a
    journal's segments in several processes and merges them)."""
    values = [0.1 * 1.0001 ** n + 1e-9 * (n % 7) for n in range(5000)] + VALUES
    whole = _filled(values)
    for cut in (1, 1234, 4999):
        first, second = _filled(values[:cut]), _filled(values[cut:])
        second.merge(first)
        assert (second.nanoseconds, second.count, second.bins_in_use()) == (whole.nanoseconds, whole.count,
                                                                             whole.bins_in_use())
    assert float(sum(values)) != sum(reversed(values))  # float sums taken in another order differ: why ints


def test_add_floored_counts_each_value_in_the_bin_the_mappings_key_names():
    values = [FLOOR * 1.37 ** n for n in range(90)] + [0.0123 * (1 + n / 997) for n in range(997)]
    values += [2.0 ** n for n in range(-19, 13)] + [1e-6, 1.0000001e-6, 3599.999, 3600.0]
    sketch, keys = OpenSketch(0.01, FLOOR), Tally()
    for value in values:  # each widens the range, or lands inside it in place
        sketch.add_floored(value)
        keys[sketch.mapping.key(value)] += 1
    key, bins = sketch.bins_in_use()
    assert {key + index: n for index, n in enumerate(bins) if n} == keys
    assert (sketch.count, sketch.zero_count) == (len(values), 0)


def test_a_restored_sketch_is_the_sketch_it_was_read_from():
    original = _filled(VALUES)
    key, bins = original.bins_in_use()
    copy = OpenSketch(0.01, FLOOR)
    copy.restore(count=original.count, zero=original.zero_count, total=original.nanoseconds, low=original.minimum,
                 high=original.maximum, key=key, bins=[int(n) for n in bins])
    for sketch in (original, copy):
        sketch.add_floored(0.7)  # and it goes on as the original does
        sketch.merge(_filled([0.0, 9.0, 1e-3]))
    figures = [(s.count, s.nanoseconds, s.zero_count, s.minimum, s.maximum, s.bins_in_use()) for s in (original, copy)]
    assert figures[0] == figures[1]
    assert [original.get_quantile_value(q) for q in QUANTILES] == [copy.get_quantile_value(q) for q in QUANTILES]


def test_an_empty_sketch_restores_empty():
    empty = OpenSketch(0.01, FLOOR)
    empty.restore(count=0, zero=0, total=0, low=None, high=None, key=0, bins=[])
    assert (empty.count, empty.bins_in_use(), empty.get_quantile_value(0.5)) == (0, (0, []), None)
    assert (empty.minimum, empty.maximum) == (math.inf, -math.inf)


# --- the MCP SDK -----------------------------------------------------------------------------------------------


def test_the_sdk_makes_its_transport_client_with_the_headers_timeout_and_auth_given():
    auth = httpx2.BasicAuth("lead", "secret")
    timeout = httpx2.Timeout(5.0, read=None)
    client = create_mcp_http_client(headers={"X-Lead": "7"}, timeout=timeout, auth=auth)
    try:
        assert isinstance(client, httpx2.AsyncClient)
        assert client.headers["X-Lead"] == "7"
        assert client.timeout == timeout
        assert client.auth is auth
        assert not client.follow_redirects
    finally:
        asyncio.run(client.aclose())


# --- Locust ----------------------------------------------------------------------------------------------------

LOCUST_CHECKS = """
import locust  # patches gevent before anything else, as the harness's load processes do

import inspect, json, sys
from locust import argument_parser, web
from locust.runners import WorkerRunner
from harness._compat.locust import clear_command_line_for_web_ui, release_master_port
from locust.env import Environment
from locust.event import Events
from harness.processes.children import free_port

found = {}
port = free_port()
master = Environment(events=Events()).create_master_runner("127.0.0.1", port)
master.quit()
release_master_port(master)
again = Environment(events=Events()).create_master_runner("127.0.0.1", port)  # raises if the port is still bound
again.quit()
found["rebound"] = True
from locust.runners import STATE_MISSING, MasterRunner
listener = inspect.getsource(MasterRunner.client_listener)
found["listener"] = ["self.server.recv_from_client()" in listener, "self.handle_message(client_id, msg)" in listener]
found["reset"] = "self.server = rpc.Server(" in inspect.getsource(MasterRunner.reset_connection)
found["missing"] = [STATE_MISSING, hasattr(again.clients, "get")]
handling = inspect.getsource(MasterRunner.handle_message)
found["liveness"] = ["WorkerNode(client_id, heartbeat_liveness=HEARTBEAT_LIVENESS)" in handling,
                     "c.heartbeat = HEARTBEAT_LIVENESS" in handling]
own = WorkerRunner.__dict__.get("_send_stats")
found["send_stats"] = None if own is None else list(inspect.signature(own).parameters)
found["web_reads_argv"] = "argument_parser.ui_extra_args_dict()" in inspect.getsource(web)
sys.argv = ["mrtr-harness", "run", "scenarios/smoke.toml", "--web", "8089"]
try:
    argument_parser.ui_extra_args_dict()
    found["refused"] = False
except SystemExit:
    found["refused"] = True
clear_command_line_for_web_ui()
found["argv"] = sys.argv
found["extra"] = argument_parser.ui_extra_args_dict()
print(json.dumps(found))
"""
"""Run in a process of its own: importing Locust patches gevent, which a pytest worker must not have."""


@pytest.fixture(scope="module")
def locust_edges() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", LOCUST_CHECKS], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_locust_master_reads_every_frame_through_its_server_and_hands_it_to_handle_message(locust_edges):
    """`gate_master` and `guard_master_listener` sit on these: the listener's one read and one hand-over, and the
    new socket a reset makes (guarded again)."""
    assert locust_edges["listener"] == [True, True]
    assert locust_edges["reset"]


def test_a_locust_master_marks_a_worker_whose_heartbeats_stopped_missing(locust_edges):
    assert locust_edges["missing"] == ["missing", True]  # what `missing_workers` reads


def test_a_locust_master_reads_how_long_to_wait_for_heartbeats_from_its_module_each_time(locust_edges):
    """`wait_for_heartbeats` sets the module's constant: a worker's hello and each heartbeat read it then."""
    assert locust_edges["liveness"] == [True, True]


def test_a_locust_worker_sends_its_stats_report_when_asked_with_no_arguments(locust_edges):
    assert locust_edges["send_stats"] == ["self"]  # WorkerRunner's own, called as `send_stats_now` calls it


def test_a_locust_master_that_quit_releases_its_port_for_the_next_master(locust_edges):
    assert locust_edges["rebound"]  # `capacity --master`: each step's master binds the port the last one held


def test_locusts_web_ui_reads_the_process_command_line_which_the_harness_empties(locust_edges):
    assert locust_edges["web_reads_argv"]  # called with no arguments: it parses sys.argv
    assert locust_edges["refused"]  # the harness's command line is not Locust's
    assert locust_edges["argv"] == ["mrtr-harness"]
    assert locust_edges["extra"] == {}  # an empty one is: no extra options to show


def test_locusts_page_has_the_words_the_page_script_finds_its_controls_and_user_count_by():
    """`PAGE_SCRIPT` hides Locust's Edit, Reset and New buttons and renames the `Users` label (a Typography) by
    their text: the built page must still say them, and have a `</body>` to put the script before."""
    import importlib.util

    from harness._compat.locust import PAGE_SCRIPT

    spec = importlib.util.find_spec("locust")  # found, not imported: importing Locust patches gevent
    assert spec is not None and spec.origin is not None
    dist = Path(spec.origin).parent / "webui" / "dist"
    bundle = "".join(path.read_text(encoding="utf-8") for path in (dist / "assets").glob("*.js"))
    for word in ("Edit", "Reset", "New", "Users"):
        assert f"children:`{word}`" in bundle and f'"{word}"' in PAGE_SCRIPT, word
    assert "`Stop`" in bundle and "name:`MuiTypography`" in bundle
    assert "</body>" in (dist / "index.html").read_text(encoding="utf-8")


# --- the OpenTelemetry SDK ------------------------------------------------------------------------------------------


def test_a_meter_provider_runs_handle_fork_in_a_forked_child_and_the_quiet_one_runs_nothing(tmp_path):
    """The SDK registers `MeterProvider._handle_fork` with `os.register_at_fork`: a real fork runs it in the child,
    unless the provider is `ForkQuietMeterProvider`."""
    import os

    from opentelemetry.sdk.metrics import MeterProvider

    from harness._compat.opentelemetry import ForkQuietMeterProvider

    class Marking(MeterProvider):
        def _handle_fork(self) -> None:
            (tmp_path / "loud").touch()

    class QuietMarking(ForkQuietMeterProvider):
        pass

    providers = [Marking(shutdown_on_exit=False), QuietMarking(shutdown_on_exit=False)]
    pid = os.fork()
    if pid == 0:  # the child: the fork hooks have run; leave at once
        os._exit(0)
    os.waitpid(pid, 0)
    assert (tmp_path / "loud").exists()
    assert QuietMarking._handle_fork is ForkQuietMeterProvider._handle_fork is not MeterProvider._handle_fork
    del providers
