"""The shop's shared records: same semantics on every backend, atomic across
processes where the backend is shared, and honest errors when it is not there."""

from __future__ import annotations

import multiprocessing
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.shop.store import (
    ITEMS_BATCH,
    Store,
    StoreError,
    StoreSpecError,
    StoreUnavailable,
    describe,
    open_store,
)

try:  # tests/ on sys.path (rootdir-less layout) or tests as a package
    from services import free_port, redis_server
except ImportError:  # pragma: no cover
    from tests.services import free_port, redis_server

WORKERS = 4
REDIS = pytest.param("redis", marks=pytest.mark.services)
SHARED_BACKENDS = ["sqlite", REDIS]
ALL_BACKENDS = ["sqlite", REDIS, "memory"]


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """One throwaway redis-server for the module; tests isolate by prefix."""
    with redis_server() as url:
        yield url


@pytest.fixture
def spec_for(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """backend name -> a fresh spec for this test (own sqlite file / own redis prefix).

    Redis is only started when a test asks for it, so sqlite and memory tests
    still run where redis-server is missing.
    """
    prefix = f"test-{uuid.uuid4().hex[:12]}"

    def make(backend: str) -> str:
        if backend == "sqlite":
            return f"sqlite:{tmp_path / 'shop' / 'store.db'}"
        if backend == "redis":
            return f"{request.getfixturevalue('redis_url')}?prefix={prefix}"
        return "memory"

    return make


@pytest.fixture(params=ALL_BACKENDS)
def store(request: pytest.FixtureRequest, spec_for: Callable[[str], str]) -> Iterator[Store]:
    opened = open_store(spec_for(request.param))
    yield opened
    opened.close()


@pytest.fixture(params=SHARED_BACKENDS)
def shared_spec(request: pytest.FixtureRequest, spec_for: Callable[[str], str]) -> str:
    return spec_for(request.param)


# --------------------------------------------------------------------------
# workers for the cross-process tests (module level so spawn can import them)


def _claim_worker(spec: str, worker: int, keys: int, barrier: Any, results: Any) -> None:
    store = open_store(spec)
    barrier.wait()
    won = [k for k in range(keys) if store.add("answered", f"state-{k}", f"worker-{worker}")]
    store.close()
    results.put((worker, won))


def _incr_worker(spec: str, worker: int, times: int, barrier: Any, results: Any) -> None:
    store = open_store(spec)
    barrier.wait()
    for _ in range(times):
        store.incr("refund", "count")
    store.close()
    results.put((worker, times))


def _swap_worker(spec: str, worker: int, keys: int, barrier: Any, results: Any) -> None:
    store = open_store(spec)
    barrier.wait()
    won = [k for k in range(keys) if store.swap("payflow", f"flow-{k}", "pending", f"paid-by-{worker}")]
    store.close()
    results.put((worker, won))


def _write_and_die(spec: str) -> None:
    """Write, then exit without closing anything: a killed replica."""
    store = open_store(spec)
    store.put("quote", "q-1", '{"total": 42}')
    store.incr("refund", "count", 3)
    os._exit(0)


def _run_workers(target: Callable[..., None], spec: str, arg: int) -> dict[int, Any]:
    """Run WORKERS spawned processes that start together; {worker: result}."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(spec, w, arg, barrier, results)) for w in range(WORKERS)]
    for proc in procs:
        proc.start()
    try:
        collected = dict(results.get(timeout=60) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=10)
    assert all(proc.exitcode == 0 for proc in procs), [proc.exitcode for proc in procs]
    return collected


# --------------------------------------------------------------------------
# semantics, on every backend


def test_get_of_a_missing_key_is_none(store: Store) -> None:
    assert store.get("quote", "nope") is None


def test_put_inserts_then_overwrites(store: Store) -> None:
    store.put("quote", "q-1", '{"total": 10}')
    assert store.get("quote", "q-1") == '{"total": 10}'
    store.put("quote", "q-1", '{"total": 12}')
    assert store.get("quote", "q-1") == '{"total": 12}'


def test_namespaces_keep_the_same_key_apart(store: Store) -> None:
    store.put("quote", "k", "a")
    store.put("refund", "k", "b")
    assert (store.get("quote", "k"), store.get("refund", "k")) == ("a", "b")


def test_add_inserts_only_when_absent(store: Store) -> None:
    assert store.add("answered", "s-1", "first") is True
    assert store.add("answered", "s-1", "second") is False
    assert store.get("answered", "s-1") == "first"


def test_swap_replaces_only_the_expected_value(store: Store) -> None:
    assert store.swap("payflow", "f-1", "pending", "paid") is False  # missing key
    assert store.get("payflow", "f-1") is None
    store.put("payflow", "f-1", "pending")
    assert store.swap("payflow", "f-1", "other", "paid") is False
    assert store.get("payflow", "f-1") == "pending"
    assert store.swap("payflow", "f-1", "pending", "paid") is True
    assert store.get("payflow", "f-1") == "paid"
    assert store.swap("payflow", "f-1", "pending", "paid-again") is False


def test_discard_removes_and_ignores_missing_keys(store: Store) -> None:
    store.put("quote", "q-1", "x")
    store.discard("quote", "q-1")
    store.discard("quote", "never-there")
    assert store.get("quote", "q-1") is None
    assert store.add("quote", "q-1", "again") is True


def test_incr_counts_from_zero_and_reads_back_as_text(store: Store) -> None:
    assert store.incr("refund", "count") == 1
    assert store.incr("refund", "count", 5) == 6
    assert store.incr("refund", "count", -2) == 4
    assert store.get("refund", "count") == "4"


def test_incr_of_a_non_counter_raises_value_error(store: Store) -> None:
    store.put("refund", "r-1", '{"amount": 5}')
    with pytest.raises(ValueError):
        store.incr("refund", "r-1")
    assert store.get("refund", "r-1") == '{"amount": 5}'


def test_items_lists_every_key_of_its_namespace_only(store: Store) -> None:
    count = ITEMS_BATCH * 2 + 7  # several pages of SCAN / keyset paging
    for i in range(count):
        store.put("refund", f"r-{i}", f'{{"n": {i}}}')
    store.put("quote", "r-0", "other namespace")
    listed = list(store.items("refund"))
    assert len(listed) == count
    assert dict(listed) == {f"r-{i}": f'{{"n": {i}}}' for i in range(count)}
    assert list(store.items("empty")) == []


def test_values_must_be_text(store: Store) -> None:
    with pytest.raises(TypeError):
        store.put("quote", "q-1", {"total": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.add("quote", "q-1", 1)  # type: ignore[arg-type]


def test_one_store_is_safe_to_share_between_threads(store: Store) -> None:
    threads, rounds = 8, 50
    wins: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [k for k in range(rounds) if store.add("answered", f"s-{k}", "t")]
        for _ in range(rounds):
            store.incr("refund", "count")
        with lock:
            wins.extend(mine)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert sorted(wins) == list(range(rounds))
    assert store.get("refund", "count") == str(threads * rounds)


def test_store_reports_its_kind_and_closes_as_a_context_manager(spec_for: Callable[[str], str]) -> None:
    for backend in ("sqlite", "memory"):
        with open_store(spec_for(backend)) as opened:
            assert opened.kind == backend
            assert isinstance(opened, Store)


# --------------------------------------------------------------------------
# atomic across processes (the reason sqlite and redis exist)


def test_add_claims_each_key_exactly_once_across_processes(shared_spec: str) -> None:
    keys = 200
    # sqlite: the workers also race to create the brand-new file and schema
    won = _run_workers(_claim_worker, shared_spec, keys)
    all_wins = sorted(k for ks in won.values() for k in ks)
    assert all_wins == list(range(keys))
    with open_store(shared_spec) as check:
        for worker, ks in won.items():
            assert all(check.get("answered", f"state-{k}") == f"worker-{worker}" for k in ks)


def test_incr_is_exact_across_processes(shared_spec: str) -> None:
    times = 250
    _run_workers(_incr_worker, shared_spec, times)
    with open_store(shared_spec) as check:
        assert check.get("refund", "count") == str(WORKERS * times)


def test_only_one_of_concurrent_swaps_from_the_same_value_wins(shared_spec: str) -> None:
    keys = 100
    with open_store(shared_spec) as setup:
        for k in range(keys):
            setup.put("payflow", f"flow-{k}", "pending")
    won = _run_workers(_swap_worker, shared_spec, keys)
    assert sorted(k for ks in won.values() for k in ks) == list(range(keys))
    with open_store(shared_spec) as check:
        for worker, ks in won.items():
            assert all(check.get("payflow", f"flow-{k}") == f"paid-by-{worker}" for k in ks)


# --------------------------------------------------------------------------
# who sees what


def test_two_stores_on_one_shared_backend_see_each_others_writes(shared_spec: str) -> None:
    with open_store(shared_spec) as a, open_store(shared_spec) as b:
        a.put("quote", "q-1", "from a")
        assert b.get("quote", "q-1") == "from a"
        assert b.add("quote", "q-1", "from b") is False


def test_two_memory_stores_do_not_share_records() -> None:
    with open_store("memory") as a, open_store("memory") as b:
        a.put("quote", "q-1", "from a")
        assert b.get("quote", "q-1") is None
        assert b.add("quote", "q-1", "from b") is True


@pytest.mark.services
def test_redis_prefixes_keep_runs_apart(redis_url: str) -> None:
    with open_store(f"{redis_url}?prefix=run-a") as a, open_store(f"{redis_url}?prefix=run-b") as b:
        a.put("quote", "q-1", "run a")
        assert b.get("quote", "q-1") is None


def test_sqlite_records_survive_a_killed_writer_and_a_reopen(spec_for: Callable[[str], str]) -> None:
    spec = spec_for("sqlite")
    proc = multiprocessing.get_context("spawn").Process(target=_write_and_die, args=(spec,))
    proc.start()
    proc.join(timeout=30)
    assert proc.exitcode == 0
    with open_store(spec) as reopened:
        assert reopened.get("quote", "q-1") == '{"total": 42}'
        assert reopened.get("refund", "count") == "3"
        reopened.put("quote", "q-2", "second life")
    with open_store(spec) as again:
        assert dict(again.items("quote")) == {"q-1": '{"total": 42}', "q-2": "second life"}


def test_open_sqlite_creates_the_missing_folder_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "shop.db"
    with open_store(f"sqlite:{path}") as opened:
        assert opened.add("quote", "q", "v")
    assert path.exists()
    with open_store(f"sqlite:///{path}") as same:  # URL-ish form names the same file
        assert same.get("quote", "q") == "v"


def test_closing_a_sqlite_store_folds_its_write_ahead_log_into_the_file(tmp_path: Path) -> None:
    """A results folder holds the shop's records, not megabytes of log beside them: a store closing while another
    process still has the file leaves the log empty, and the last one to close removes it."""
    path = tmp_path / "shop.db"
    wal = tmp_path / "shop.db-wal"
    first, second = open_store(f"sqlite:{path}"), open_store(f"sqlite:{path}")
    for n in range(2000):
        assert first.add("quote", f"q{n}", "v" * 100)
    assert wal.stat().st_size > 100_000
    first.close()
    assert wal.stat().st_size == 0
    assert second.get("quote", "q1999") == "v" * 100
    second.close()
    assert not wal.exists()
    with open_store(f"sqlite:{path}") as reopened:
        assert reopened.get("quote", "q0") == "v" * 100


def test_a_closed_sqlite_store_refuses_work(spec_for: Callable[[str], str]) -> None:
    opened = open_store(spec_for("sqlite"))
    opened.close()
    with pytest.raises(StoreError, match="closed"):
        opened.get("quote", "q")


# --------------------------------------------------------------------------
# specs and errors


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("foo", "unknown store 'foo': use sqlite:PATH, redis://HOST:PORT[/DB] or memory"),
        ("", "unknown store ''"),
        ("postgres://db/x", "unknown store"),
        ("sqlite:", "no file path"),
        ("redis://", "no host"),
        ("redis://127.0.0.1:notaport/0", "bad port"),
        ("redis://127.0.0.1:6379/zero", "database must be a number"),
        ("redis://127.0.0.1:6379/0?prefx=a", "unknown option(s) prefx"),
    ],
)
def test_bad_specs_raise_store_spec_error_saying_why(spec: str, says: str) -> None:
    with pytest.raises(StoreSpecError) as caught:
        open_store(spec)
    assert says in str(caught.value)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(StoreSpecError):
        describe(spec)


def test_spec_errors_never_show_a_redis_password() -> None:
    with pytest.raises(StoreSpecError) as caught:
        open_store("redis://admin:hunter2@127.0.0.1:notaport/0")
    assert "hunter2" not in str(caught.value)
    assert "admin:***@" in str(caught.value)


def test_describe_is_short_and_hides_passwords(tmp_path: Path) -> None:
    assert "this process only" in describe("memory")
    assert describe(f"sqlite:{tmp_path / 'x.db'}") == f"sqlite store {tmp_path / 'x.db'}"
    text = describe("redis://admin:hunter2@10.0.0.5:6380/2?prefix=run42")
    assert "hunter2" not in text
    assert "10.0.0.5:6380/2" in text and "run42" in text


def test_redis_down_raises_store_unavailable_naming_the_store() -> None:
    port = free_port()  # nothing listens here
    with pytest.raises(StoreUnavailable) as caught:
        open_store(f"redis://:s3cret@127.0.0.1:{port}/0")
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.mark.services
def test_redis_lost_mid_run_raises_store_unavailable() -> None:
    with redis_server() as url:
        opened = open_store(url)
        opened.put("quote", "q", "v")
    # the server is stopped now
    with pytest.raises(StoreUnavailable):
        opened.get("quote", "q")
    with pytest.raises(StoreUnavailable):
        opened.add("answered", "s", "v")
    opened.close()


def test_unwritable_sqlite_path_raises_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreUnavailable, match="sqlite store"):
        open_store(f"sqlite:{blocker / 'sub' / 'shop.db'}")
