"""The PostgreSQL implementation of ``Store``: one home shared by workers on many hosts.

Decisions (DESIGN.md, "Beyond one machine"), and why:

- **One global sequence for seqs, gaps and skew tolerated.** A seq names a
  record everywhere (``Reader.record``, checkpoint bases, the run log's keys),
  as in LMDB, so the record formats and ``index.apply`` stay the same. The
  sequence is not transactional, so allocating a seq never waits for another
  commit; the price is gaps (a rolled-back commit's seqs are never used) and,
  between runs, commit order that differs from seq order. Nothing reads the
  log across runs expecting commit order: a run's own records are ordered by
  its head-row lock below, and ``last_seq`` is read from the log, not the
  sequence. Per-run sequences were rejected: every seq in the formats would
  become a pair.
- **Runs lock themselves, nothing else does.** Every write transaction is READ
  COMMITTED and first takes a transaction advisory lock per run it touches
  (``lock_key``: 64 bits of a hash of the run id, so a run not created yet is
  lockable and two creators of one id queue), all in one statement in one
  order (no deadlock between commits), after the home's lock taken shared
  (``delete`` and ``rebuild_indexes`` take it exclusively). Once a run is
  locked no other transaction can change its rows, so what ``check`` and
  ``apply`` read of it is stable until COMMIT, as under LMDB's single writer,
  and commits of different runs never wait for nor abort each other.
  SERIALIZABLE was dropped: its predicate locks are index *pages* of the one
  shared kv table, so runs sharing no row aborted each other (0.5 retries per
  commit with 4 workers). Which runs: the fence's and the records' when known
  up front; the transaction's reads name the rest (``pg_reader.run_of``: every
  derived key belongs to one run; an approval by its value). A transaction that
  read a run it had not locked, or scanned across runs, is rolled back and run
  again holding those locks too (or the home's exclusively) before anything it
  decided counts, its exceptions included (``relocks`` counts these).
- **Fencing in the transaction.** The fence is checked (``run_view.check_fence``)
  after the run's lock, in the same transaction as the write.
- **Leases by the server's clock.** A grant's expiry, a renewal's, the fence's "is it
  live" and a takeover's "has it ended" are all judged by ``clock_timestamp()``, read
  in the transaction once its locks are held (``PgTables.now``): hosts' clocks differ,
  and a host minutes off must neither take over a live lease nor keep a dead one.
- **A lease has a lock of its own** (``lease_lock_key``). A renewal takes only that
  one, so it never waits behind the run's commits (a worker's renewals must not queue
  behind its own slow commit); a transaction that grants a lease (``LeaseAcquired``)
  takes both, so a takeover and a renewal of one run are serialized: whichever comes
  second sees the other. A commit's fence reads the renewal without that lock: a
  renewal only extends the holder's lease, so a stale read can only refuse it.
- **Few round trips.** BEGIN, the locks and the rows a commit of those runs
  reads first go in one pipeline; the keys ``apply`` will read
  (``index.keys_of``) and the seqs in a second; the log rows, index writes and
  COMMIT in a third. Reads are cached for the transaction (``PgTables``).
- **Durability.** ``durable`` is the server's ``synchronous_commit=on``; ``fast``
  sets ``synchronous_commit=off`` on this store's connections (a server crash
  may lose the last commits, never half of one).
- **A COMMIT whose connection died has an unknown outcome.** It is not assumed
  either way: the store waits until the old server process is gone, then looks
  for the commit's first seq (seqs are unique to one transaction). Found: it
  committed, and the seqs are returned. Not found: nothing of it exists and the
  whole transaction (check included) is run again. Other writes (delete, lease
  renewal, rebuild) are idempotent and are simply run again.
- **Wake-ups by NOTIFY in the commit.** A commit that leaves a run needing a
  watcher (submitted, decided, let go: ``wakeups``) sends ``NOTIFY`` with the
  run id in the same transaction; watchers ``LISTEN`` on a connection of their
  own (``pg_listen``). Other commits send nothing: a notifying COMMIT takes a
  cluster-wide lock, so most commits must not. A run someone follows
  (``pg_follow``) is notified at each commit, in the commit's last round trip.
- Connections are kept in a small pool, one per thread at a time (a thread
  that reads while it commits holds two), reconnecting within
  ``reconnect_timeout`` when the server restarts.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from ...formats import Checkpoint, LeaseAcquired, Record, encode
from ..base.errors import NewerStore, NotAHome, StoreError
from ..storage.index import DERIVED, RUNLOG, RUNS, apply, keys_of, refold_without
from ..storage.latest import STATE
from ..storage.leases import check_fence, renew_if_held, stamp_grants
from ..storage.restore import COPY_MARKER, Row, restore_rows
from ..storage.store import LEASES, Check, Later, Logged, Observed, WriteEvent, numbered
from ..storage.wakeups import announced
from .connect import connect, pgerrors, psycopg
from .follow import PgFollowFeed, notify_statement
from .listen import CHANNEL, PgListener, payload
from .reader import (
    CREATE,
    HIGH_WATER,
    SCHEMA,
    SERVER_NOW,
    PgReader,
    PgTables,
    pipelined,
    prefetch_query,
    range_query,
    run_keys,
    run_prefix,
)
from .url import is_url, redacted

# 2: records may be short frames (formats/envelope.py) a bide of format 1 cannot read, so
# the first writable open of a format-1 home marks it 2 and older bides stop at open
PG_FORMAT = 2
DURABILITIES = ("durable", "fast")
_IDLE = 8  # connections kept open for reuse
_HOME_LOCK = 0x62696465  # "bide": taken shared by every write, exclusively by delete/rebuild
_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
T = TypeVar("T")


class _Conn(NamedTuple):
    """A connection and the server process serving it (to know when it is gone)."""

    conn: psycopg.Connection[Any]
    pid: int
    started: Any


class _Pool:
    """Connections for one store object; a broken one is dropped, never reused."""

    def __init__(self, url: str, shown: str, durability: str, timeout: float) -> None:
        self.url, self.shown, self.durability, self.timeout = url, shown, durability, timeout
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()

    def connect(self, deadline: float | None = None) -> _Conn:
        """A new connection, retried until ``deadline`` while the server is unreachable.

        A connection the server drops while it is being set up (a restart under way)
        is tried again too: its error was once raised as it was, a psycopg error no
        caller expects, and it stopped a watcher's schedules thread.
        """
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout
        pause = 0.05
        while True:
            try:
                return self._set_up(connect(self.url, application_name="bide"))
            except psycopg.OperationalError as exc:  # refused or down: the server restarts
                if time.monotonic() + pause > deadline:
                    raise StoreError(f"cannot reach PostgreSQL at {self.shown}: {exc}",
                                     path=self.shown) from exc
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _set_up(self, conn: psycopg.Connection[Any]) -> _Conn:
        try:
            if self.durability == "fast":
                conn.execute("SET synchronous_commit TO off")
            row = conn.execute("SELECT pid, backend_start FROM pg_stat_activity "
                               "WHERE pid = pg_backend_pid()").fetchone()
        except BaseException:
            conn.close()  # a half-set-up connection is never pooled nor leaked
            raise
        assert row is not None  # our own session is always listed
        return _Conn(conn, int(row[0]), row[1])

    def take(self) -> _Conn:
        with self._lock:
            while self._idle:
                c = self._idle.pop()
                if not c.conn.closed and not c.conn.broken:
                    return c
        return self.connect()

    def give(self, c: _Conn) -> None:
        if c.conn.closed or c.conn.broken:
            return
        with self._lock:
            if len(self._idle) < _IDLE:
                self._idle.append(c)
                return
        c.conn.close()

    def drop(self, c: _Conn) -> None:
        try:
            c.conn.close()
        except psycopg.Error:  # closing a dead connection: nothing left to release
            pass

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            self.drop(c)


class PostgresStore(Observed):
    """A home's records in a PostgreSQL database (see the module docstring)."""

    readonly: str | None = None
    retries = 0  # transactions run again after the server refused them (deadlock, conflict)
    relocks = 0  # transactions run again holding the lock of a run they read unlocked

    def __init__(self, url: str, *, durability: str = "durable", create: bool = True,
                 clock: Callable[[], float] = time.time,
                 reconnect_timeout: float = 30.0) -> None:
        if not is_url(url):
            raise ValueError(f"a PostgreSQL home is a postgresql:// URL, not {url!r}")
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
        self.url = url
        self.home = self.path = redacted(url)
        self.durability, self.clock = durability, clock
        self.reconnect_timeout = reconnect_timeout
        self._pool = _Pool(url, self.home, durability, reconnect_timeout)
        self._closed = False
        self._pid = os.getpid()
        self.retries = self.relocks = 0
        try:
            self._open(create)
        except BaseException:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------
    def _open(self, create: bool) -> None:
        c = self._pool.take()
        try:
            conn = c.conn
            if conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,):
                self.readonly = "the server is a read-only standby"
            if conn.execute(f"SELECT to_regclass('{SCHEMA}.meta')").fetchone() == (None,):
                if not create or self.readonly is not None:
                    raise NotAHome(self.home, "the database has no bide store; open it once "
                                   "with create=True (bide.open does) to make one")
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('bide.create'))")
                    for sql in CREATE:
                        conn.execute(sql)
                    conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('format', %s), "
                                 "('created', %s) ON CONFLICT DO NOTHING",
                                 (str(PG_FORMAT), repr(time.time())))
            row = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'format'").fetchone()
            if row is not None and int(row[0]) > PG_FORMAT:
                raise NewerStore(self.home, int(row[0]), PG_FORMAT)
            if row is not None and int(row[0]) < PG_FORMAT and self.readonly is None:
                with conn.transaction():
                    conn.execute(f"UPDATE {SCHEMA}.meta SET value = %s WHERE key = 'format' "
                                 "AND value::int < %s", (str(PG_FORMAT), PG_FORMAT))
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error at {self.home}: {exc}", path=self.home) from exc
        finally:
            self._pool.give(c)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()

    def _guard(self) -> None:
        if self._closed:
            raise StoreError(f"the store at {self.home} is closed", path=self.home)
        if os.getpid() != self._pid:  # a forked child would share the parent's sockets
            raise StoreError("this store was opened before fork(); open it again in the child",
                             path=self.home)

    # -- reading -----------------------------------------------------------
    @contextmanager
    def reader(self) -> Iterator[PgReader]:
        """A REPEATABLE READ snapshot; a connection the server dropped is replaced, before
        the first query or during the read (``PgReader``: it is read again, as a write is
        run again), within ``reconnect_timeout``."""
        self._guard()
        held = [self._begin(_SNAPSHOT)]
        deadline = time.monotonic() + self.reconnect_timeout

        def reopen() -> psycopg.Connection[Any]:
            self._pool.drop(held[0])
            if time.monotonic() > deadline:
                raise StoreError(f"a read of {self.home} lost its connection and could not "
                                 f"read again within {self.reconnect_timeout}s", path=self.home)
            held[0] = self._begin(_SNAPSHOT)
            return held[0].conn

        try:
            yield PgReader(held[0].conn, reopen=reopen)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error at {self.home}: {exc}", path=self.home) from exc
        finally:
            self._end(held[0])

    def _begin(self, sql: str) -> _Conn:
        """A connection with a transaction begun; an idle one found dead is replaced."""
        deadline = time.monotonic() + self.reconnect_timeout
        while True:
            c = self._pool.take()
            try:
                _begin_snapshot(c.conn, sql)
                return c
            except psycopg.OperationalError as exc:
                self._pool.drop(c)
                if not c.conn.broken or time.monotonic() > deadline:
                    raise StoreError(f"PostgreSQL error at {self.home}: {exc}",
                                     path=self.home) from exc

    def _end(self, c: _Conn) -> None:
        """Roll back whatever is open and give the connection back (or drop it)."""
        if not c.conn.broken:
            try:
                c.conn.execute("ROLLBACK")
            except psycopg.Error:  # the server went away meanwhile
                self._pool.drop(c)
                return
        self._pool.give(c)

    # -- writing -----------------------------------------------------------
    def _write(self, body: Callable[[PgTables], T], *, runs: Iterable[str] = (),
               leases: Iterable[str] = (), leases_only: bool = False,
               whole_home: bool = False,
               landed: Callable[[PgReader, T], bool] | None = None,
               reads: Sequence[tuple[str, bytes]] = (), seqs: int = 0,
               whole_state: bool = False) -> T:
        """Run ``body`` in one READ COMMITTED transaction holding the lock of every run
        it reads, and commit it (see the module docstring).

        Args:
            runs: the runs known up front to be touched (locked before ``body`` runs).
            leases: the runs whose lease lock to take up front (a grant or a renewal).
            leases_only: ``body`` reads runs under their lease locks alone (renewals).
            whole_home: take the home's lock exclusively (delete, rebuild).
            reads, seqs, whole_state: what to read and take with the locks
                (``_begin_write``).
            landed: after a COMMIT whose connection died, whether ``body``'s result
                is in the store (read on a new connection once the old session is
                gone); None: run ``body`` again (idempotent writes).
        """
        self._guard()
        if self.readonly is not None:
            raise StoreError(f"the store at {self.home} is read-only: {self.readonly}",
                             path=self.home)
        locks = _Locks(set(runs), set(leases), whole_home, leases_only)
        deadline = time.monotonic() + self.reconnect_timeout
        attempt = 0
        while time.monotonic() <= deadline:
            attempt += 1
            c, committing = self._pool.take(), False
            try:
                txn = self._begin_write(c, locks, reads, seqs, whole_state)
                try:
                    result = body(txn)
                except Exception:
                    if locks.missing(txn):
                        raise _Relock() from None  # what it saw may be stale: see again
                    raise
                if locks.missing(txn):
                    raise _Relock()
                committing = True
                txn.write_and_commit()
            except _Relock:
                locks.add(txn)
                self.relocks += 1
                self._end(c)
                continue
            except (pgerrors.SerializationFailure, pgerrors.DeadlockDetected):
                self._end(c)
                self.retries += 1
                _backoff(attempt)
                continue
            except psycopg.OperationalError as exc:
                if not c.conn.broken:
                    self._end(c)
                    raise StoreError(f"PostgreSQL error at {self.home}: {exc}",
                                     path=self.home) from exc
                self._pool.drop(c)
                if committing and landed is not None and self._landed(c, landed, result):
                    return result
                continue  # not committed (or idempotent): run the whole transaction again
            except psycopg.Error as exc:
                self._end(c)
                raise StoreError(f"PostgreSQL error at {self.home}: {exc}",
                                 path=self.home) from exc
            except BaseException:
                self._end(c)
                raise
            self._pool.give(c)
            return result
        raise StoreError(f"could not commit to {self.home} within {self.reconnect_timeout}s "
                         "(the server kept refusing or was unreachable)", path=self.home)

    def _begin_write(self, c: _Conn, locks: _Locks,
                     reads: Sequence[tuple[str, bytes]], seqs: int,
                     whole_state: bool) -> PgTables:
        """BEGIN, the home's lock, the runs' and leases' locks (in one order: no deadlock
        between commits), the server's clock, the rows their commits read first,
        ``reads`` and ``seqs`` seqs (``PgTables.seqs``): one round trip. ``whole_state``:
        each run's whole latest-state table too (a checkpoint's fold reads and compares
        most of it)."""
        txn = PgTables(c.conn)
        runs = sorted(locks.runs)
        keys = [*(k for run in runs for k in run_keys(run)), *reads]
        prefixes = [run_prefix(run) for run in runs] if whole_state else []
        if not whole_state:
            keys += [(STATE, run_prefix(run)) for run in runs]  # its directory
        keyed = sorted({*map(lock_key, runs), *map(lease_lock_key, locks.leases)})

        def send() -> Any:
            c.conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            c.conn.execute("SELECT pg_advisory_xact_lock(%s, 0)" if locks.exclusive
                           else "SELECT pg_advisory_xact_lock_shared(%s, 0)", (_HOME_LOCK,))
            if keyed:  # each statement's snapshot is taken once the one before has ended
                c.conn.execute("SELECT count(pg_advisory_xact_lock(k)) FROM "
                               "unnest(%s::bigint[]) AS k", (keyed,))
            return (c.conn.execute(SERVER_NOW),
                    c.conn.execute(*prefetch_query(keys)) if keys else None,
                    c.conn.execute(*range_query(STATE, prefixes)) if prefixes else None,
                    c.conn.execute(*_next_seqs(seqs)) if seqs else None)

        clock, found, state, given = pipelined(c.conn, send)
        txn.server_now = float(clock.fetchone()[0])
        if found is not None:
            txn.cache(keys, found.fetchall())
        if state is not None:
            txn.cache_whole(STATE, prefixes, state.fetchall())
        if given is not None:
            txn.seqs = sorted(int(row[0]) for row in given.fetchall())
        return txn

    def _landed(self, lost: _Conn, found: Callable[[PgReader, T], bool], result: T) -> bool:
        """Did a commit whose connection died land? Asked once its session has ended."""
        deadline = time.monotonic() + self.reconnect_timeout
        try:
            return self._wait_and_look(lost, found, result, deadline)
        except psycopg.Error as exc:
            raise StoreError(f"a commit to {self.home} has an unknown outcome: the server "
                             f"could not be asked ({exc}); read the run before going on",
                             path=self.home) from exc

    def _wait_and_look(self, lost: _Conn, found: Callable[[PgReader, T], bool], result: T,
                       deadline: float) -> bool:
        c = self._pool.connect(deadline)
        try:
            while c.conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND "
                                 "backend_start = %s", (lost.pid, lost.started)).fetchone():
                if time.monotonic() > deadline:
                    raise StoreError(f"a commit to {self.home} has an unknown outcome: its "
                                     f"server process {lost.pid} is still running",
                                     path=self.home)
                time.sleep(0.05)
            return found(PgReader(c.conn), result)
        finally:
            self._pool.give(c)

    def commit(self, records: Sequence[Record] | Callable[[PgReader], Sequence[Record | Later]],
               *, check: Check | None = None,
               fence: tuple[str, int] | None = None) -> list[int]:
        framed = None if callable(records) else [encode(r) for r in records]

        def body(txn: PgTables) -> list[int]:
            if fence is not None:
                check_fence(txn, *fence, txn.now())
            if check is not None:
                check(txn)
            given = records(txn) if callable(records) else records
            if not given:
                return []
            known = [r for r in given if not callable(r)]  # a Later one is built below
            txn.runs_read.update(_runs_of(known))
            if len(txn.seqs) == len(given):  # taken with the locks (records known up front)
                seqs = txn.seqs
            else:  # what apply will read, and the seqs, in one round trip
                seqs = sorted(int(row[0]) for row in txn.prefetch(
                    _reads_of(known), also=_next_seqs(len(given))))
            batch = numbered(given, seqs)
            txn.runs_read.update(_runs_of(batch))  # a Later record's run must be locked too
            txn.leases_taken.update(_leases_of(batch))
            raws = framed if framed is not None else [encode(r) for r in batch]
            if (stamped := stamp_grants(batch, txn.now())) is not None:  # the server's clock
                batch, raws = stamped, [encode(r) for r in stamped]
            txn.append(list(zip(seqs, raws, strict=True)))
            for seq, record, raw in zip(seqs, batch, raws, strict=True):
                apply(txn, seq, len(raw), record)
            _announce(txn, batch)
            _notify_followers(txn, batch)
            return seqs

        def landed(r: PgReader, seqs: list[int]) -> bool:
            return not seqs or r.raw(seqs[0]) is not None

        runs = {fence[0]} if fence is not None else set()
        reads: list[tuple[str, bytes]] = []
        leases: set[str] = set()
        if not callable(records):
            runs |= _runs_of(records)
            reads = _reads_of(records)
            leases = _leases_of(records)
        size = 0 if callable(records) else len(records)
        folds = not callable(records) and any(isinstance(r, Checkpoint) for r in records)
        return self._observed_commit(
            lambda: self._write(body, runs=runs, leases=leases, landed=landed, reads=reads,
                                seqs=size, whole_state=folds), fence)

    def delete(self, select: Callable[[PgReader], Iterable[int]]) -> list[int]:
        """Remove log records and refold their runs, as ``LMDBStore.delete`` does."""
        def body(txn: PgTables) -> list[int]:
            doomed = refold_without(txn, txn, select(txn))
            if doomed:
                txn.conn.execute(f"DELETE FROM {SCHEMA}.log WHERE seq = ANY(%s)", (list(doomed),))
                txn.conn.execute(
                    f"INSERT INTO {SCHEMA}.meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                    f"SET value = greatest({SCHEMA}.meta.value::bigint, "
                    "EXCLUDED.value::bigint)::text", (HIGH_WATER, str(max(doomed))))
            return sorted(doomed)

        removed = self._write(body, whole_home=True)
        self._notify(WriteEvent("delete", tuple(removed)))
        return removed

    def renew_leases(self, leases: Sequence[tuple[str, int, float]]) -> list[bool]:
        """Renew under the runs' lease locks alone (see the module docstring): a renewal
        never waits for a run's commit, only for a takeover of that run."""
        def body(txn: PgTables) -> list[bool]:
            now = txn.now()
            return [renew_if_held(txn, txn, run_id, token, now + ttl)
                    for run_id, token, ttl in leases]

        runs = {run_id for run_id, _, _ in leases}
        reads = [(table, run_id.encode(errors="surrogateescape"))
                 for run_id in sorted(runs) for table in (RUNS, LEASES)]
        renewed = self._write(body, leases=runs, reads=reads, leases_only=True) if leases \
            else []
        self._notify_renewals(leases, renewed)
        return renewed

    def rebuild_indexes(self, load: Callable[[PgReader], Iterable[Logged]]) -> int:
        def body(txn: PgTables) -> int:
            records = list(load(txn))
            for name in DERIVED:
                txn.clear(name)
            for seq, size, record in records:
                apply(txn, seq, size, record)
            return len(records)

        return self._write(body, whole_home=True)

    # -- the home's settings (signing.SharedSettings): what every host must see ----
    def setting(self, key: str) -> str | None:
        with self.reader() as r:
            return _meta(r.conn, key)

    def set_once(self, key: str, value: str) -> str:
        def body(txn: PgTables) -> str:
            txn.conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES (%s, %s) "
                             "ON CONFLICT (key) DO NOTHING", (key, value))
            found = _meta(txn.conn, key)
            assert found is not None  # inserted now, or there before
            return found

        return self._write(body)


    def changes(self, stop: threading.Event) -> PgListener:
        """Wake-ups for a watcher: what commits announce, on a connection of its own."""
        self._guard()
        return PgListener(self.url, self.home, stop, timeout=self.reconnect_timeout)


    def change_feed(self, run_id: str) -> PgFollowFeed:
        """Wake-ups for a follower of ``run_id``: its commits, on a connection of its own."""
        self._guard()
        return PgFollowFeed(self.url, self.home, run_id, timeout=self.reconnect_timeout)

    def restore(self, rows: Sequence[Row], *, marker: str | None, last_seq: int = -1) -> None:
        """Put framed records back at their own seqs (``bide copy``), as ``LMDBStore.restore``;
        the sequence is moved past them (and ``last_seq``) so no seq is given twice."""
        top = max([last_seq, *(seq for seq, _ in rows)])

        def body(txn: PgTables) -> None:
            restore_rows(txn, txn.last_seq(), rows, lambda batch: txn.append(list(batch)))
            if top >= 0:
                txn.conn.execute(f"SELECT setval('{SCHEMA}.seq', greatest(%s, "
                                 f"(SELECT last_value FROM {SCHEMA}.seq)))", (top,))
            if top > (rows[-1][0] if rows else -1):
                txn.conn.execute(
                    f"INSERT INTO {SCHEMA}.meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                    f"SET value = greatest({SCHEMA}.meta.value::bigint, "
                    "EXCLUDED.value::bigint)::text", (HIGH_WATER, str(top)))
            txn.conn.execute(f"DELETE FROM {SCHEMA}.meta WHERE key = %s", (COPY_MARKER,))
            if marker is not None:
                txn.conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES (%s, %s)",
                                 (COPY_MARKER, marker))

        def landed(r: PgReader, _: None) -> bool:
            return r.raw(rows[0][0]) is not None

        self._write(body, landed=landed if rows else None, whole_home=True)
        self._notify(WriteEvent("restore", tuple(seq for seq, _ in rows)))

    def copy_marker(self) -> str | None:
        """The copy marker ``restore`` left (an interrupted ``bide copy``), or None."""
        with self.reader() as r:
            found = r.conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = %s",
                                   (COPY_MARKER,)).fetchone()
        return None if found is None else str(found[0])

    # -- maintenance -------------------------------------------------------
    def spend_reserve(self) -> bool:
        return False  # the server manages its own disk

    def info(self) -> dict[str, Any]:
        with self.reader() as r:
            used, readers = r.conn.execute(
                f"SELECT pg_total_relation_size('{SCHEMA}.log') + "
                f"pg_total_relation_size('{SCHEMA}.kv') + pg_total_relation_size('{SCHEMA}.meta'), "
                "(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database())"
            ).fetchone()
        return {"map_size": int(used), "used_bytes": int(used), "page_size": 8192,
                "file_bytes": int(used), "readers": int(readers), "durability": self.durability}

    def reader_check(self) -> int:
        return 0  # the server ends a dead client's session itself


def _meta(conn: psycopg.Connection[Any], key: str) -> str | None:
    row = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def _announce(txn: PgTables, batch: Sequence[Record]) -> None:
    """NOTIFY the runs this commit announces (``wakeups``), in its own transaction: a
    rolled-back or retried commit wakes nobody, a committed one wakes every listener."""
    woken = [payload(run_id) for run_id in announced(txn, batch)]
    if woken:
        txn.conn.execute("SELECT pg_notify(%s, w) FROM unnest(%s::text[]) AS w",
                         (CHANNEL, woken))


def _notify_followers(txn: PgTables, batch: Sequence[Record]) -> None:
    """Notify, at COMMIT, the followers of this commit's runs (``pg_follow``): a SELECT
    joined to the statement that inserts the commit's log rows (``PgTables.with_log``)."""
    txn.with_log = notify_statement(sorted(_runs_of(batch)))


def _begin_snapshot(conn: psycopg.Connection[Any], sql: str) -> None:
    """BEGIN and a first query, one round trip: the snapshot is taken at the first
    query, not at BEGIN."""
    def send() -> None:
        conn.execute(sql)
        conn.execute("SELECT 1")

    pipelined(conn, send)


class _Relock(Exception):
    """The transaction read a run it had not locked: run it again holding that lock too."""


@dataclass
class _Locks:
    """The locks a write transaction takes up front, grown by each ``_Relock``."""

    runs: set[str]  # the runs' locks: commits of one run are serialized by them
    leases: set[str]  # the leases' locks: a grant and the renewals of one run
    exclusive: bool  # the home's lock exclusively (delete, rebuild)
    leases_only: bool = False  # the body reads runs under their lease locks alone

    def missing(self, txn: PgTables) -> bool:
        """Did ``txn`` read rows, or grant a lease, that no lock it holds keeps stable?"""
        stable = self.runs | self.leases if self.leases_only else self.runs
        return bool(txn.runs_read - stable) or bool(txn.leases_taken - self.leases) or \
            (txn.unbounded and not self.exclusive)

    def add(self, txn: PgTables) -> None:
        """Hold, on the next attempt, every lock ``txn`` turned out to need."""
        if not self.leases_only:
            self.runs |= txn.runs_read
        self.leases |= txn.leases_taken | (txn.runs_read if self.leases_only else set())
        self.exclusive = self.exclusive or txn.unbounded


def _runs_of(records: Iterable[Record]) -> set[str]:
    return {r.run_id for r in records}  # type: ignore[attr-defined]


def _leases_of(records: Iterable[Record | Later]) -> set[str]:
    """The runs whose lease these records grant: their lease locks must be held."""
    return {r.run_id for r in records if isinstance(r, LeaseAcquired)}


def _reads_of(records: Sequence[Record]) -> list[tuple[str, bytes]]:
    """The keys ``apply`` may read for these records (``index.keys_of``, less the
    run log's new keys, which depend on the seq and are never read)."""
    return [k for r in records for k in keys_of(0, r) if k[0] != RUNLOG]


def _next_seqs(n: int) -> tuple[str, tuple[int]]:
    return f"SELECT nextval('{SCHEMA}.seq') FROM generate_series(1, %s)", (n,)


def lock_key(run_id: str) -> int:
    """The advisory lock key of a run: 64 bits of a hash of its id (a collision only
    makes two runs wait for each other)."""
    digest = hashlib.blake2b(run_id.encode(errors="surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lease_lock_key(run_id: str) -> int:
    """The advisory lock key of a run's lease: another 64 bits of a hash of its id."""
    digest = hashlib.blake2b(run_id.encode(errors="surrogateescape"), digest_size=8,
                             person=b"bide-lease").digest()
    return int.from_bytes(digest, "big", signed=True)


def _backoff(attempt: int) -> None:
    """Wait a little before retrying a conflict, more after each (with jitter)."""
    time.sleep(random.uniform(0, min(0.001 * 2 ** min(attempt, 10), 0.1)))
