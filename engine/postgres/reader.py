"""The PostgreSQL store's tables and its ``Reader``/``Tables`` over one transaction.

Three tables in a ``bide`` schema hold a home: ``log`` (seq -> framed record),
``kv`` (every derived table and the lease renewals, as ``(tbl, key) -> value``
rows: a table ``index.DERIVED`` gains later needs no new SQL) and ``meta``.
Keys and values are the same bytes LMDB stores; ``bytea`` compares bytewise,
so key order, prefixes and the run log's ``run_id\\0seq`` layout are LMDB's.

Inside a write transaction reads are cached and prefetched, and log rows, puts
and deletes are buffered and sent with the COMMIT in one round trip
(``PgTables``): ``index.apply`` reads and rewrites a run's head per record, and
a round trip per read or put would be most of a commit's cost. ``run_of`` names
the run each derived key belongs to: the store locks those runs (pg_store).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ...formats import unpack_value
from ..base.errors import StoreError
from ..storage.attention import ATTENTION
from ..storage.index import (
    APPROVALS,
    RUNS,
    ApprovalState,
    seq_key,
    seq_of,
)
from ..storage.langgraph_index import LG_TABLES
from ..storage.store import LEASES, LOG
from ..storage.table_reads import TableReads
from .connect import psycopg

SCHEMA = "bide"
PAGE = 500  # rows per round trip when a scan walks a table
LARGE = 8192  # bytes: a value over this is not prefetched with a whole range

CREATE = (
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (key text PRIMARY KEY, value text NOT NULL)",
    # one global sequence; gaps (rolled-back commits) and commit-order skew between
    # runs are tolerated by every reader: see pg_store's module docstring
    f"CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.seq MINVALUE 0 START 0",
    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.log (seq bigint PRIMARY KEY, value bytea NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.kv (tbl text NOT NULL, key bytea NOT NULL, "
    "value bytea NOT NULL, PRIMARY KEY (tbl, key))",
)
T = TypeVar("T")
_WHOLE_KEY = (RUNS, ATTENTION, LEASES)
_TAGGED = LG_TABLES  # a one-byte tag, then the thread (the run id of its records)
HIGH_WATER = "deleted_last_seq"  # meta: the highest seq `delete` removed (never given again)
# The server's clock in epoch seconds: every host judges leases by this one clock
# (clock_timestamp(): when the statement runs, i.e. after the locks before it were granted)
SERVER_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key that starts with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class PgReader(TableReads):
    """``store.Reader`` over one open transaction of a psycopg connection.

    A read snapshot given ``reopen`` survives a lost connection (a cut, a server
    restart): it takes a new snapshot on a new connection and runs again every query
    it had answered, and goes on only if each answer is the same. The caller has
    then seen one snapshot, the new one, as if the read had been retried whole. If an
    answer changed meanwhile, ``ReadChanged`` says so (the caller reads again).
    """

    def __init__(self, conn: Any, *, reopen: Callable[[], Any] | None = None) -> None:
        self.conn = conn
        self.server_now: float | None = None
        self._reopen = reopen  # a new connection, its snapshot begun; None: fail as is
        self._answered: list[tuple[str, Any, bytes]] = []  # (sql, params, digest of rows)

    def now(self) -> float:
        """The server's clock: when this snapshot began (``now()`` is the transaction's
        start), so every lease judged through one reader is judged at one time."""
        if self.server_now is None:
            rows = self._rows("SELECT extract(epoch FROM now())::float8", (), keep=False)
            self.server_now = float(rows[0][0])
        return self.server_now

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        rows = self._rows(sql, params)
        return rows[0][0] if rows else None

    def _rows(self, sql: str, params: Any, *, keep: bool = True) -> list[Any]:
        """Every row of a query; on a lost connection, the same answer from a new one."""
        if self._reopen is None:
            return list(self.conn.execute(sql, params).fetchall())
        try:
            rows = list(self.conn.execute(sql, params).fetchall())
        except psycopg.OperationalError:
            if not self.conn.broken:
                raise
            rows = self._again(sql, params)
        if keep:
            self._answered.append((sql, params, _digest(rows)))
        return rows

    def _again(self, sql: str, params: Any) -> list[Any]:
        """Reconnect, answer the earlier queries again (they must not have changed), then
        this one. The store's ``reopen`` gives up with ``StoreError`` past its deadline."""
        assert self._reopen is not None
        while True:
            self.conn = self._reopen()
            try:
                for before, args, digest in self._answered:
                    if _digest(list(self.conn.execute(before, args).fetchall())) != digest:
                        raise ReadChanged(before)
                return list(self.conn.execute(sql, params).fetchall())
            except psycopg.OperationalError:
                if not self.conn.broken:
                    raise

    def get(self, table: str, key: bytes) -> bytes | None:
        if table == LOG:
            return self.raw(seq_of(key))
        raw = self._one(f"SELECT value FROM {SCHEMA}.kv WHERE tbl = %s AND key = %s",
                        (table, key))
        return None if raw is None else bytes(raw)

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        if table == LOG:
            for seq, raw in self._log_pages(reverse):
                if seq_key(seq).startswith(prefix):
                    yield seq_key(seq), raw
            return
        end = prefix_end(prefix)
        cmp, order = ("<", "DESC") if reverse else (">", "ASC")
        after: bytes | None = None
        while True:
            sql = (f"SELECT key, value FROM {SCHEMA}.kv WHERE tbl = %s AND key >= %s"
                   + (" AND key < %s" if end is not None else "")
                   + (f" AND key {cmp} %s" if after is not None else "")
                   + f" ORDER BY key {order} LIMIT {PAGE}")
            params = [table, prefix, *([end] if end is not None else []),
                      *([after] if after is not None else [])]
            rows = self._rows(sql, params)
            for key, value in rows:
                yield bytes(key), bytes(value)
            if len(rows) < PAGE:
                return
            after = bytes(rows[-1][0])

    def _log_pages(self, reverse: bool = False, start: int = 0) -> Iterator[tuple[int, bytes]]:
        cmp, order = ("<", "DESC") if reverse else (">", "ASC")
        after: int | None = None
        while True:
            sql = (f"SELECT seq, value FROM {SCHEMA}.log WHERE seq >= %s"
                   + (f" AND seq {cmp} %s" if after is not None else "")
                   + f" ORDER BY seq {order} LIMIT {PAGE}")
            rows = self._rows(sql, [start, *([after] if after is not None else [])])
            for seq, value in rows:
                yield int(seq), bytes(value)
            if len(rows) < PAGE:
                return
            after = int(rows[-1][0])

    def raw(self, seq: int) -> bytes | None:
        raw = self._one(f"SELECT value FROM {SCHEMA}.log WHERE seq = %s", (seq,))
        return None if raw is None else bytes(raw)

    def log(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        yield from self._log_pages(start=max(start, 0))

    def last_seq(self) -> int:
        """The highest seq in the log, or removed from its end by ``delete``; -1 if none.

        Reads the log's index, not the sequence: a snapshot's answer, which a
        rolled-back commit's gap never changes.
        """
        found = self._one(
            f"SELECT greatest((SELECT max(seq) FROM {SCHEMA}.log), "
            f"(SELECT value::bigint FROM {SCHEMA}.meta WHERE key = %s), -1)", (HIGH_WATER,))
        return int(found)


class ReadChanged(StoreError):
    """A read lost its connection, and what it had read was no longer so on a new one."""

    def __init__(self, sql: str) -> None:
        super().__init__(f"a read of the PostgreSQL store lost its connection and the store "
                         f"changed before it was back ({sql.split(' WHERE')[0][:60]}...); "
                         "read again")


class PgTables(PgReader):
    """A write transaction's view: ``index.Tables`` with a read cache and buffered writes.

    Reads are cached for the transaction (the store holds the lock of every run
    whose rows it read, so they cannot change under it: ``runs_read``), and
    ``prefetch`` fills the cache with many keys in one round trip. Log rows,
    puts and deletes are buffered and sent together with the COMMIT
    (``write_and_commit``), or before a scan, which must see them.
    """

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self._pending: dict[tuple[str, bytes], bytes | None] = {}
        self._cache: dict[tuple[str, bytes], bytes | None] = {}
        self._log: dict[int, bytes] = {}
        self._whole: set[tuple[str, bytes]] = set()  # (table, prefix) cached in full...
        self._large: set[tuple[str, bytes]] = set()  # ...but these (read when asked)
        self.runs_read: set[str] = set()  # whose rows this transaction's reads depend on
        self.leases_taken: set[str] = set()  # whose lease this transaction grants
        self.unbounded = False  # a scan not confined to one run's keys
        self.seqs: list[int] = []  # seqs taken with the locks, when the records were known
        # a SELECT sent with the log rows (one statement: a WITH that inserts them), or
        # alone before COMMIT if no log row is left to send
        self.with_log: tuple[str, tuple[Any, ...]] | None = None

    def get(self, table: str, key: bytes) -> bytes | None:
        if table == LOG:
            return self.raw(seq_of(key))
        if (table, key) in self._pending:
            return self._pending[(table, key)]
        if (table, key) not in self._cache:
            known = ((table, key[:key.find(b"\x00") + 1]) in self._whole
                     and (table, key) not in self._large)
            self._cache[(table, key)] = None if known else super().get(table, key)
        value = self._cache[(table, key)]
        run = run_of(table, key, value)
        if run is not None:
            self.runs_read.add(run)
        return value

    def prefetch(self, keys: Iterable[tuple[str, bytes]], *,
                 also: tuple[str, Any] | None = None) -> list[Any]:
        """Read every key not yet known in ONE round trip, into the cache (absent ones too).

        Args:
            also: another query ``(sql, params)`` sent in the same round trip.

        Returns:
            The rows of ``also`` (empty without it).
        """
        want = [k for k in dict.fromkeys(keys)
                if k[0] != LOG and k not in self._cache and k not in self._pending]
        def send() -> tuple[Any, Any]:
            return (None if also is None else self.conn.execute(*also),
                    self.conn.execute(*prefetch_query(want)) if want else None)

        extra, found = pipelined(self.conn, send)
        self.cache(want, [] if found is None else found.fetchall())
        return [] if extra is None else extra.fetchall()

    def cache(self, keys: Iterable[tuple[str, bytes]], found: list[Any]) -> None:
        """Take the rows a ``prefetch_query`` of ``keys`` found (the others are absent)."""
        self._cache.update(dict.fromkeys(k for k in keys if k not in self._cache))
        self._cache.update(_rows(found))

    def cache_whole(self, table: str, prefixes: Iterable[bytes], found: list[Any]) -> None:
        """Take every row of ``table`` under ``prefixes`` (a ``range_query``): a key
        under one of them not found is known to be absent. Each prefix ends with NUL."""
        self._cache.update(_rows(r for r in found if r[2] is not None))
        self._large.update((str(t), bytes(k)) for t, k, v in found if v is None)
        self._whole.update((table, p) for p in prefixes)

    def raw(self, seq: int) -> bytes | None:
        if seq in self._log:
            return self._log[seq]
        return super().raw(seq)

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        run = scan_run(table, prefix)
        if run is None:
            self.unbounded = True
        else:
            self.runs_read.add(run)
        self.flush()
        yield from super().scan(table, prefix, reverse=reverse)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._pending[(table, key)] = value

    def delete(self, table: str, key: bytes) -> None:
        if table == LOG:
            self.flush()
            self.conn.execute(f"DELETE FROM {SCHEMA}.log WHERE seq = %s", (seq_of(key),))
            return
        self._pending[(table, key)] = None

    def clear(self, table: str) -> None:
        self.flush()
        self._cache = {k: v for k, v in self._cache.items() if k[0] != table}
        self._whole = {w for w in self._whole if w[0] != table}
        self.conn.execute(f"DELETE FROM {SCHEMA}.kv WHERE tbl = %s", (table,))

    def append(self, rows: list[tuple[int, bytes]]) -> None:
        """Log records (seq, framed bytes), inserted with the other writes."""
        self._log.update(rows)

    def flush(self) -> None:
        """Send the buffered writes now (before a scan, which must see them)."""
        if self._pending or self._log:
            pipelined(self.conn, self._send)

    def _send(self) -> None:
        """Queue the buffered writes on the connection (inside a pipeline)."""
        puts = [(t, k, v) for (t, k), v in self._pending.items() if v is not None]
        gone = [(t, k) for (t, k), v in self._pending.items() if v is None]
        logged = sorted(self._log.items())
        self._cache.update(self._pending)
        self._pending, self._log = {}, {}
        if logged:  # one statement each, whatever the number of rows
            sql = (f"INSERT INTO {SCHEMA}.log (seq, value) "
                   "SELECT * FROM unnest(%s::bigint[], %s::bytea[])")
            params: tuple[Any, ...] = ([q for q, _ in logged], [v for _, v in logged])
            if self.with_log is not None:  # runs even though the SELECT reads none of it
                sql, params = f"WITH logged AS ({sql}) {self.with_log[0]}", \
                    params + self.with_log[1]
                self.with_log = None
            self.conn.execute(sql, params)
        if gone:
            self.conn.execute(f"DELETE FROM {SCHEMA}.kv USING unnest(%s::text[], %s::bytea[]) "
                              "AS d(tbl, key) WHERE kv.tbl = d.tbl AND kv.key = d.key",
                              ([t for t, _ in gone], [k for _, k in gone]))
        if puts:
            self.conn.execute(f"INSERT INTO {SCHEMA}.kv (tbl, key, value) "
                              "SELECT * FROM unnest(%s::text[], %s::bytea[], %s::bytea[]) "
                              "ON CONFLICT (tbl, key) DO UPDATE SET value = EXCLUDED.value",
                              ([t for t, _, _ in puts], [k for _, k, _ in puts],
                               [v for _, _, v in puts]))

    def write_and_commit(self) -> None:
        """Send the buffered writes and COMMIT in one round trip."""
        def send() -> None:
            self._send()
            if self.with_log is not None:
                self.conn.execute(*self.with_log)
            self.conn.execute("COMMIT")

        pipelined(self.conn, send)


def pipelined(conn: Any, send: Callable[[], T]) -> T:
    """Run ``send``'s statements in one pipeline (one round trip) and return its result.

    An error is raised only once the pipeline has ended: one escaping psycopg's
    pipeline block makes it print "error ignored terminating <Pipeline>" to stderr
    while it unwinds.

    Raises:
        psycopg.Error: the first statement that failed (the rest were skipped).
    """
    failed: Exception | None = None
    try:
        with conn.pipeline():
            try:
                result = send()  # the block's end sends them with one Sync and waits
            except psycopg.Error as exc:
                failed = exc
    except psycopg.Error:  # the pipeline aborted by ``failed``, or the connection lost
        if failed is None:
            raise
    if failed is not None:
        raise failed
    return result


def prefetch_query(keys: list[tuple[str, bytes]]) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters reading many ``(tbl, key)`` rows of the kv table at once."""
    return (f"SELECT kv.tbl, kv.key, kv.value FROM {SCHEMA}.kv JOIN "
            "unnest(%s::text[], %s::bytea[]) AS w(tbl, key) USING (tbl, key)",
            ([t for t, _ in keys], [k for _, k in keys]))


def range_query(table: str, prefixes: list[bytes]) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters reading every row of ``table`` under any of ``prefixes``
    (a value over ``LARGE`` bytes as NULL: it is read if it is asked for)."""
    ends = [prefix_end(p) for p in prefixes]
    assert None not in ends  # each ends with NUL
    return (f"SELECT kv.tbl, kv.key, CASE WHEN length(kv.value) <= {LARGE} THEN kv.value END "
            f"FROM {SCHEMA}.kv JOIN "
            "unnest(%s::bytea[], %s::bytea[]) AS p(lo, hi) ON kv.key >= p.lo AND kv.key < p.hi "
            "WHERE kv.tbl = %s", (prefixes, ends, table))


def _digest(rows: list[Any]) -> bytes:
    return hashlib.blake2b(repr(rows).encode(), digest_size=16).digest()


def _rows(found: Iterable[Any]) -> dict[tuple[str, bytes], bytes]:
    return {(str(t), bytes(k)): bytes(v) for t, k, v in found}


def run_of(table: str, key: bytes, value: bytes | None) -> str | None:
    """The run whose lock keeps the row ``(table, key)`` stable (None: nothing to lock).

    Every derived key names its run: the key itself (heads, attention, lease
    renewals), its part before the first NUL (run log, intents, latest state),
    after a one-byte tag (LangGraph's thread); an approval's value names it. An
    approval id not there yet names none: ids are unique to the run asking.
    """
    if table in _WHOLE_KEY:
        return key.decode(errors="surrogateescape")
    if table == APPROVALS:
        if value is None:
            return None
        return str(unpack_value(value, ApprovalState, table=table, key=key).run_id)
    if table in _TAGGED:
        key = key[1:]
    return key.split(b"\x00", 1)[0].decode(errors="surrogateescape")


def scan_run(table: str, prefix: bytes) -> str | None:
    """The one run a scan of ``prefix`` stays within, or None (it may cross runs)."""
    if table in _WHOLE_KEY or table == APPROVALS:
        return None
    if table in _TAGGED:
        prefix = prefix[1:]
    if b"\x00" not in prefix:
        return None
    return prefix.split(b"\x00", 1)[0].decode(errors="surrogateescape")


def run_keys(run_id: str) -> list[tuple[str, bytes]]:
    """What nearly every commit of a run reads first: its head, lease renewal and
    attention entry (fetched with the run's lock, in the same round trip; and its whole
    ``state`` table, ``run_prefix``: the latest-state fold reads and compares most of it)."""
    rid = run_id.encode(errors="surrogateescape")
    return [(RUNS, rid), (LEASES, rid), (ATTENTION, rid)]


def run_prefix(run_id: str) -> bytes:
    return run_id.encode(errors="surrogateescape") + b"\x00"
