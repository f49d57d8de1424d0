"""Shared records of the reference deployment ("the shop").

The shop runs one API process and N MCP server replicas.  A Multi Round-Trip
Request may be retried on a different replica than the one that started it,
and any process may be restarted mid-run by the chaos scenarios.  So the
records that make the flow correct -- the quote store, the once-only record of
answered input states, payment flows and the API's refund ledger -- cannot
live in one process's memory: they live in a :class:`Store` that every process
opens from the same spec string.

Three backends, chosen by the spec given to :func:`open_store`:

``sqlite:PATH``
    One file shared by every local process (the default for local runs).
    Survives restarts, needs no server.
``redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=NAME]``
    A real Redis server, for replicas on several hosts or containers.
``memory``
    A dict inside this process only.  It is deliberately *not* shared: it
    reproduces the bug class "records that only one replica sees", so a run
    can show what breaks when a retry lands on a replica that never saw the
    first attempt.

Values are text (callers store JSON).  Keys are grouped in namespaces
("quote", "answered", "refund", "payflow", ...).  Counters kept with
:meth:`Store.incr` share the key space of their namespace and read back with
:meth:`Store.get` as decimal text.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "MemoryStore",
    "RedisStore",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreSpecError",
    "StoreUnavailable",
    "describe",
    "open_store",
]

SPEC_HELP = "use sqlite:PATH, redis://HOST:PORT[/DB] or memory"
DEFAULT_REDIS_PORT = 6379
DEFAULT_REDIS_PREFIX = "mrtr"
# How long a sqlite writer waits for another process's write lock before
# giving up.  Writes are single short statements, so a wait this long only
# happens when something is badly wrong; failing fast would turn ordinary
# contention between replicas into spurious "database is locked" errors.
SQLITE_BUSY_TIMEOUT_S = 30.0
# Rows fetched per round trip by items(); keeps memory flat for big ledgers.
ITEMS_BATCH = 1000
REDIS_CONNECT_TIMEOUT_S = 5.0
REDIS_SOCKET_TIMEOUT_S = 10.0


class StoreError(Exception):
    """Base class of every error raised by this module."""


class StoreSpecError(StoreError, ValueError):
    """The spec string does not name a store this module knows how to open."""


class StoreUnavailable(StoreError, ConnectionError):
    """The store exists on paper but cannot be reached or written right now."""


@runtime_checkable
class Store(Protocol):
    """Text records grouped by namespace, shared (or not) between processes."""

    kind: str

    def get(self, namespace: str, key: str) -> str | None:
        """The value stored under key, or None."""
        ...

    def put(self, namespace: str, key: str, value: str) -> None:
        """Insert or overwrite."""
        ...

    def add(self, namespace: str, key: str, value: str) -> bool:
        """Insert only if absent; True if this call inserted it.

        This is the once-only claim: when two replicas race to answer the same
        input state, exactly one of them must get True, even when they are
        different processes.  A get-then-put would let both win.
        """
        ...

    def swap(self, namespace: str, key: str, expected: str, new: str) -> bool:
        """Compare-and-set: replace only if the current value equals expected."""
        ...

    def discard(self, namespace: str, key: str) -> None:
        """Remove the key if present."""
        ...

    def incr(self, namespace: str, key: str, by: int = 1) -> int:
        """Atomically add `by` to a counter (missing counts as 0); the new value."""
        ...

    def items(self, namespace: str) -> Iterator[tuple[str, str]]:
        """Every (key, value) of the namespace, in no particular order."""
        ...

    def close(self) -> None:
        """Release connections; the store must not be used afterwards."""
        ...


# --------------------------------------------------------------------------
# Spec parsing


@dataclass(frozen=True)
class _Spec:
    kind: str
    path: Path | None = None
    host: str = ""
    port: int = DEFAULT_REDIS_PORT
    db: int = 0
    username: str | None = None
    password: str | None = None
    prefix: str = DEFAULT_REDIS_PREFIX
    tls: bool = False


def _redact(spec: str) -> str:
    """The spec with any URL password replaced by ***, for error messages."""
    scheme, sep, rest = spec.partition("://")
    if not sep:
        return spec
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if not at:
        return spec
    user, colon, _password = userinfo.partition(":")
    shown = f"{user}:***" if colon else user
    return f"{scheme}://{shown}@{hostport}{slash}{tail}"


def _parse(spec: str) -> _Spec:
    if not isinstance(spec, str):
        raise StoreSpecError(f"store spec must be a string, not {type(spec).__name__}: {SPEC_HELP}")
    text = spec.strip()
    lowered = text.lower()
    if lowered in ("memory", "memory:", "memory://"):
        return _Spec(kind="memory")
    if lowered.startswith("sqlite:"):
        return _parse_sqlite(text)
    if lowered.startswith(("redis://", "rediss://")):
        return _parse_redis(text)
    raise StoreSpecError(f"unknown store {_redact(text)!r}: {SPEC_HELP}")


def _parse_sqlite(text: str) -> _Spec:
    raw = text[len("sqlite:"):]
    if raw.startswith("//"):  # tolerate sqlite:///abs/path and sqlite://rel/path
        raw = raw[2:]
    if not raw.strip():
        raise StoreSpecError(f"store {text!r} has no file path: use sqlite:PATH, e.g. sqlite:results/shop.db")
    return _Spec(kind="sqlite", path=Path(raw).expanduser().resolve())


def _parse_redis(text: str) -> _Spec:
    shown = _redact(text)
    parts = urlsplit(text)
    try:
        port = parts.port or DEFAULT_REDIS_PORT
    except ValueError:
        raise StoreSpecError(f"store {shown!r} has a bad port: {SPEC_HELP}") from None
    if not parts.hostname:
        raise StoreSpecError(f"store {shown!r} has no host: {SPEC_HELP}")
    db_text = parts.path.strip("/") or "0"
    if not db_text.isdigit():
        raise StoreSpecError(f"store {shown!r}: the database must be a number like /0, not {db_text!r}")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"prefix"})
    if unknown:
        raise StoreSpecError(f"store {shown!r}: unknown option(s) {', '.join(unknown)}; "
                             "only ?prefix=NAME is understood")
    prefix = query.get("prefix", [DEFAULT_REDIS_PREFIX])[-1]
    if not prefix:
        raise StoreSpecError(f"store {shown!r}: prefix must not be empty")
    return _Spec(
        kind="redis",
        host=parts.hostname,
        port=port,
        db=int(db_text),
        username=parts.username or None,
        password=parts.password or None,
        prefix=prefix,
        tls=parts.scheme.lower() == "rediss",
    )


def _describe(parsed: _Spec) -> str:
    if parsed.kind == "memory":
        return "memory store (this process only, not shared)"
    if parsed.kind == "sqlite":
        return f"sqlite store {parsed.path}"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    scheme = "rediss" if parsed.tls else "redis"
    auth = " (with password)" if parsed.password else ""
    return f"redis store {scheme}://{host}:{parsed.port}/{parsed.db} prefix {parsed.prefix!r}{auth}"


def describe(spec: str) -> str:
    """A short human description of the store a spec names, safe for logs.

    Never includes a password.  Raises StoreSpecError for a bad spec, like
    open_store, so a typo is reported before anything is started.
    """
    return _describe(_parse(spec))


def open_store(spec: str) -> Store:
    """Open the store named by spec.

    Raises StoreSpecError for a spec it cannot parse and StoreUnavailable when
    the store cannot be reached or created (Redis down, unwritable path), so a
    misconfigured run fails at start-up rather than on its first request.
    """
    parsed = _parse(spec)
    if parsed.kind == "memory":
        return MemoryStore()
    if parsed.kind == "sqlite":
        assert parsed.path is not None
        return SqliteStore(parsed.path)
    return RedisStore(parsed)


def _check_text(value: Any, what: str = "value") -> str:
    if not isinstance(value, str):
        raise TypeError(f"store {what} must be str (store JSON text), not {type(value).__name__}")
    return value


def _as_counter(current: str | None, namespace: str, key: str) -> int:
    if current is None:
        return 0
    try:
        return int(current)
    except ValueError:
        raise ValueError(f"{namespace}/{key} holds {current[:40]!r}, not a counter") from None


class _Closing:
    """Context-manager support shared by the backends."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------
# memory


class MemoryStore(_Closing):
    """Records in a dict of this process only, guarded by a lock.

    Exists to reproduce "records that only one process sees": give each
    replica a memory store and a retry that lands on another replica finds
    nothing.  Safe to share between threads of one process.
    """

    kind = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, str]] = {}

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self._data.get(namespace, {}).get(key)

    def put(self, namespace: str, key: str, value: str) -> None:
        _check_text(value)
        with self._lock:
            self._data.setdefault(namespace, {})[key] = value

    def add(self, namespace: str, key: str, value: str) -> bool:
        _check_text(value)
        with self._lock:
            records = self._data.setdefault(namespace, {})
            if key in records:
                return False
            records[key] = value
            return True

    def swap(self, namespace: str, key: str, expected: str, new: str) -> bool:
        _check_text(new)
        with self._lock:
            records = self._data.get(namespace, {})
            if records.get(key) != expected:
                return False
            records[key] = new
            return True

    def discard(self, namespace: str, key: str) -> None:
        with self._lock:
            self._data.get(namespace, {}).pop(key, None)

    def incr(self, namespace: str, key: str, by: int = 1) -> int:
        with self._lock:
            records = self._data.setdefault(namespace, {})
            value = _as_counter(records.get(key), namespace, key) + by
            records[key] = str(value)
            return value

    def items(self, namespace: str) -> Iterator[tuple[str, str]]:
        with self._lock:  # a snapshot, so callers may write while iterating
            snapshot = list(self._data.get(namespace, {}).items())
        return iter(snapshot)

    def close(self) -> None:
        """Nothing to release; the records die with the object."""


# --------------------------------------------------------------------------
# sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    namespace TEXT NOT NULL,
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""


class SqliteStore(_Closing):
    """Records in one sqlite file shared by every local process.

    Why these settings:

    * WAL journal: readers never block the writer and vice versa, so many
      replicas can read quotes while one writes.
    * busy_timeout: a writer that finds another process holding the write
      lock waits for it instead of failing with "database is locked".
    * autocommit with single-statement writes (and BEGIN IMMEDIATE for the
      one read-modify-write, incr): each operation is one atomic transaction
      that takes the write lock up front, so add() and swap() are atomic
      across processes, not just threads.
    * synchronous=NORMAL: in WAL mode a committed write survives a crash or
      kill of the process (what the chaos scenarios do); only an OS crash or
      power loss can lose the last commits.
    * one connection per thread: sqlite connections must not be used by two
      threads at once, and a lock around one connection would serialise all
      readers.  Connections opened before a fork are never reused by the child.
    """

    kind = "sqlite"

    def __init__(self, path: Path, busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._closed = False
        self._reset_connections()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"sqlite store {self.path}: cannot create folder: {exc}") from exc
        self._conn()  # fail now, not on the first request; creates the schema

    def _reset_connections(self) -> None:
        self._pid = os.getpid()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,  # autocommit: we control transactions
                check_same_thread=False,  # only so close() may close every thread's connection
            )
            _set_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite store {self.path}: cannot open: {exc}") from exc
        return conn

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"sqlite store {self.path} is closed")
        if self._pid != os.getpid():  # forked: the parent's connections are not ours
            self._reset_connections()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _run(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, read-only...
            raise StoreUnavailable(f"sqlite store {self.path}: {exc}") from exc

    def get(self, namespace: str, key: str) -> str | None:
        row = self._run("SELECT value FROM records WHERE namespace = ? AND key = ?", (namespace, key)).fetchone()
        return None if row is None else row[0]

    def put(self, namespace: str, key: str, value: str) -> None:
        self._run(
            "INSERT INTO records (namespace, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
            (namespace, key, _check_text(value)),
        )

    def add(self, namespace: str, key: str, value: str) -> bool:
        cursor = self._run(
            "INSERT OR IGNORE INTO records (namespace, key, value) VALUES (?, ?, ?)",
            (namespace, key, _check_text(value)),
        )
        return cursor.rowcount == 1

    def swap(self, namespace: str, key: str, expected: str, new: str) -> bool:
        cursor = self._run(
            "UPDATE records SET value = ? WHERE namespace = ? AND key = ? AND value = ?",
            (_check_text(new), namespace, key, expected),
        )
        return cursor.rowcount == 1

    def discard(self, namespace: str, key: str) -> None:
        self._run("DELETE FROM records WHERE namespace = ? AND key = ?", (namespace, key))

    def incr(self, namespace: str, key: str, by: int = 1) -> int:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")  # take the write lock before reading
            try:
                row = conn.execute(
                    "SELECT value FROM records WHERE namespace = ? AND key = ?", (namespace, key)
                ).fetchone()
                value = _as_counter(None if row is None else row[0], namespace, key) + by
                conn.execute(
                    "INSERT INTO records (namespace, key, value) VALUES (?, ?, ?) "
                    "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
                    (namespace, key, str(value)),
                )
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"sqlite store {self.path}: {exc}") from exc
        return value

    def items(self, namespace: str) -> Iterator[tuple[str, str]]:
        """Pages through the namespace by key, so no read transaction stays
        open while the caller works and memory stays flat for big ledgers."""
        last: str | None = None
        while True:
            if last is None:
                rows = self._run(
                    "SELECT key, value FROM records WHERE namespace = ? ORDER BY key LIMIT ?",
                    (namespace, ITEMS_BATCH),
                ).fetchall()
            else:
                rows = self._run(
                    "SELECT key, value FROM records WHERE namespace = ? AND key > ? ORDER BY key LIMIT ?",
                    (namespace, last, ITEMS_BATCH),
                ).fetchall()
            yield from rows
            if len(rows) < ITEMS_BATCH:
                return
            last = rows[-1][0]

    def close(self) -> None:
        """Close every thread's connection, checkpointing the write-ahead log into the file first.

        The last process to close the file deletes its `-wal` (sqlite does); one closing while
        others still use it leaves the log empty (TRUNCATE), never megabytes of pages beside it.
        """
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        if conns:
            with contextlib.suppress(sqlite3.Error):  # busy or gone: the next closer, or sqlite at open, does it
                conns[0].execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass


# --------------------------------------------------------------------------
# redis

# Compare-and-set in one server-side step: Redis runs a script atomically, so
# no other client can write between the HGET and the HSET.
_SWAP_LUA = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current == ARGV[2] then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    return 1
end
return 0
"""


class RedisStore(_Closing):
    """Records in a Redis server: one hash per namespace, named PREFIX:NAMESPACE.

    Every operation is a single Redis primitive (HSETNX for the once-only
    add, HINCRBY for counters, a Lua script for compare-and-set), so each is
    atomic for every client of the server, on any host.

    Automatic retries are switched off on purpose: redis-py would otherwise
    resend a command whose reply was lost, and for add() or incr() that is
    not harmless -- the resent HSETNX answers 0 for a claim this client
    actually won, and a resent HINCRBY counts twice.  A lost connection
    surfaces as StoreUnavailable and the caller decides.
    """

    kind = "redis"

    def __init__(self, spec: _Spec) -> None:
        import redis  # imported here so sqlite/memory runs do not need it
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # AuthenticationError and BusyLoadingError are ConnectionErrors too.
        self._unreachable: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
        self._refused: tuple[type[BaseException], ...] = (redis.ResponseError,)
        self.description = _describe(spec)
        self.prefix = spec.prefix
        self._client = redis.Redis(
            host=spec.host,
            port=spec.port,
            db=spec.db,
            username=spec.username,
            password=spec.password,
            ssl=spec.tls,
            decode_responses=True,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
            socket_timeout=REDIS_SOCKET_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )
        self._swap = self._client.register_script(_SWAP_LUA)
        self._call(self._client.ping)  # fail now if the server is not there

    def _key(self, namespace: str) -> str:
        return f"{self.prefix}:{namespace}"

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._unreachable as exc:
            raise StoreUnavailable(f"{self.description} unavailable: {exc}") from exc
        except self._refused as exc:
            raise StoreError(f"{self.description}: {exc}") from exc

    def get(self, namespace: str, key: str) -> str | None:
        return self._call(self._client.hget, self._key(namespace), key)

    def put(self, namespace: str, key: str, value: str) -> None:
        self._call(self._client.hset, self._key(namespace), key, _check_text(value))

    def add(self, namespace: str, key: str, value: str) -> bool:
        return bool(self._call(self._client.hsetnx, self._key(namespace), key, _check_text(value)))

    def swap(self, namespace: str, key: str, expected: str, new: str) -> bool:
        args = [key, _check_text(expected, "expected value"), _check_text(new)]
        return bool(self._call(lambda: self._swap(keys=[self._key(namespace)], args=args)))

    def discard(self, namespace: str, key: str) -> None:
        self._call(self._client.hdel, self._key(namespace), key)

    def incr(self, namespace: str, key: str, by: int = 1) -> int:
        try:
            return int(self._call(self._client.hincrby, self._key(namespace), key, by))
        except StoreError as exc:
            if "not an integer" in str(exc):
                raise ValueError(f"{namespace}/{key} is not a counter: {exc}") from exc
            raise

    def items(self, namespace: str) -> Iterator[tuple[str, str]]:
        """HSCAN, never HGETALL/KEYS: a ledger of thousands of refunds must not
        block the server for every other replica while it is listed.

        HSCAN may return a field twice when the hash is resized mid-scan; the
        seen-set drops repeats so a ledger total never counts a refund twice.
        """
        seen: set[str] = set()
        cursor = 0
        while True:
            cursor, page = self._call(self._client.hscan, self._key(namespace), cursor, None, ITEMS_BATCH)
            for key, value in page.items():
                if key not in seen:
                    seen.add(key)
                    yield key, value
            if cursor == 0:
                return

    def close(self) -> None:
        self._client.close()


WAL_ATTEMPTS = 20


def _set_wal(conn: sqlite3.Connection) -> None:
    """Switch a fresh connection to WAL. Processes opening a new database at once can be refused `database is
    locked` at once, without SQLite's busy wait (the switch is a lock upgrade), so it is retried, briefly and
    a bounded number of times; any other error, or the last refusal, is raised."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
