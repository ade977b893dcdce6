"""What a system keeps in one PostgreSQL database, and the WAL the server wrote for it.

Every system under ``bide bench peers`` on PostgreSQL gets a fresh database of
its own on the same server, so three figures measured before and after a run
are that run's, whatever tables the system uses:

- ``rows``: the bytes of every live row of every user table
  (``sum(pg_column_size(row))``: records and derived-index rows alike);
- ``tables``: ``pg_total_relation_size`` of every user table (heap, indexes,
  TOAST; dead row versions left by updates count until a vacuum);
- ``wal``: the server's WAL insert position (``pg_current_wal_insert_lsn``).
  WAL is the cluster's, not the database's: measure one system at a time.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

_TABLES = ("SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n "
           "ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND n.nspname "
           "NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'")


class Footprint(NamedTuple):
    rows: int
    tables: int
    wal: str  # an LSN; subtract two with ``wal_bytes``

    def minus(self, before: Footprint, conn: Any) -> dict[str, int]:
        """Bytes added since ``before``: rows, tables, WAL."""
        return {"rows": self.rows - before.rows, "tables": self.tables - before.tables,
                "wal": wal_bytes(conn, before.wal, self.wal)}


def footprint(conn: Any) -> Footprint:
    """The database's rows and tables now, and the server's WAL position (no write)."""
    rows = tables = 0
    for (table,) in conn.execute(_TABLES).fetchall():
        size, total = conn.execute(
            f"SELECT (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t), "
            "pg_total_relation_size(%s::regclass)", (table,)).fetchone()
        rows, tables = rows + int(size), tables + int(total)
    (lsn,) = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    return Footprint(rows, tables, lsn)


def wal_bytes(conn: Any, before: str, after: str) -> int:
    (diff,) = conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)",
                           (after, before)).fetchone()
    return int(diff)


def with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead (host, user, options kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
