"""The PostgreSQL store's tables and its ``Reader``/``Tables`` over one transaction.

Three tables in a ``bide`` schema hold a home: ``log`` (seq -> framed record),
``kv`` (every derived table and the lease renewals, as ``(tbl, key) -> value``
rows: a table ``index.DERIVED`` gains later needs no new SQL) and ``meta``.
Keys and values are the same bytes LMDB stores; ``bytea`` compares bytewise,
so key order, prefixes and the run log's ``run_id\\0seq`` layout are LMDB's.

Inside a write transaction puts and deletes are buffered (``PgTables``) and
sent in one batch before any scan or the commit: ``index.apply`` reads and
rewrites a run's head per record, and a round trip per put would be most of a
commit's cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .index import (
    seq_key,
    seq_of,
)
from .store import LOG
from .table_reads import TableReads

SCHEMA = "bide"
PAGE = 500  # rows per round trip when a scan walks a table

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
HIGH_WATER = "deleted_last_seq"  # meta: the highest seq `delete` removed (never given again)


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key that starts with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class PgReader(TableReads):
    """``store.Reader`` over one open transaction of a psycopg connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

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
            rows = self.conn.execute(sql, params).fetchall()
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
            rows = self.conn.execute(sql, [start, *([after] if after is not None else [])]
                                     ).fetchall()
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


class PgTables(PgReader):
    """A write transaction's view: ``index.Tables`` with buffered puts and deletes."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self._pending: dict[tuple[str, bytes], bytes | None] = {}

    def get(self, table: str, key: bytes) -> bytes | None:
        if (table, key) in self._pending:
            return self._pending[(table, key)]
        return super().get(table, key)

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
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
        self.conn.execute(f"DELETE FROM {SCHEMA}.kv WHERE tbl = %s", (table,))

    def append(self, rows: list[tuple[int, bytes]]) -> None:
        """Insert log records (seq, framed bytes)."""
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {SCHEMA}.log (seq, value) VALUES (%s, %s)", rows)

    def flush(self) -> None:
        """Send the buffered puts and deletes (before a scan, and before COMMIT)."""
        if not self._pending:
            return
        puts = [(t, k, v) for (t, k), v in self._pending.items() if v is not None]
        gone = [(t, k) for (t, k), v in self._pending.items() if v is None]
        self._pending = {}
        with self.conn.cursor() as cur:
            if gone:
                cur.executemany(f"DELETE FROM {SCHEMA}.kv WHERE tbl = %s AND key = %s", gone)
            if puts:
                cur.executemany(
                    f"INSERT INTO {SCHEMA}.kv (tbl, key, value) VALUES (%s, %s, %s) "
                    "ON CONFLICT (tbl, key) DO UPDATE SET value = EXCLUDED.value", puts)
