"""Fresh databases for the PostgreSQL bench: on a throwaway server, or on ``--pg URL``.

Each system measured gets an empty database of its own, so its tables and
rows are its own; all are dropped when the bench ends. Without ``--pg`` the
bench starts its own server (``pg_server.throwaway``) with autovacuum off and
no timed checkpoint, so no background write lands inside a measurement; a
server given by URL is measured as it is configured.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import pg_server
from .pg_footprint import with_database

# the bench's own server: no vacuum or timed checkpoint inside a measurement
SETTINGS = ("autovacuum=off", "checkpoint_timeout=1h", "max_wal_size=4GB")


def unavailable(url: str | None) -> str | None:
    """None if a server can be had (``url`` given, or binaries here), else why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "PostgreSQL peers skipped: psycopg is not installed (pip install 'bide[postgres]')"
    if url is None and pg_server.bin_dir() is None:
        return f"PostgreSQL peers skipped: {pg_server.missing_binaries()}; or give --pg URL"
    return None


class Databases:
    """Makes fresh databases on one server and drops them all at the end."""

    def __init__(self, admin_url: str, server: str) -> None:
        self.admin_url, self.server = admin_url, server
        self._made: list[str] = []

    def fresh(self, label: str) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"bide_bench_{os.getpid()}_{len(self._made)}_{label}"
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            try:
                conn.execute(f'CREATE DATABASE "{name}"')
            except psycopg.errors.InsufficientPrivilege as exc:
                raise RuntimeError(f"the bench makes a database per system and cannot on "
                                   f"{self.server}: {exc} (give a role with CREATEDB)") from exc
        self._made.append(name)
        return with_database(self.admin_url, name)

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            for name in self._made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._made.clear()

    def settings(self) -> dict[str, Any]:
        """What the server says about itself (version, durability settings)."""
        import psycopg

        names = ["server_version", "fsync", "synchronous_commit", "wal_sync_method",
                 "full_page_writes", "autovacuum"]
        with psycopg.connect(self.admin_url, connect_timeout=10) as conn:
            rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                                (names,)).fetchall()
        return {"server": self.server, **dict(rows)}


@contextmanager
def databases(url: str | None) -> Iterator[Databases]:
    """Databases on ``url``'s server, or on a throwaway server started for the block."""
    if url is not None:
        from ...engine.postgres.home import redacted

        dbs = Databases(url, redacted(url))
        try:
            yield dbs
        finally:
            dbs.drop_all()
        return
    try:
        with pg_server.throwaway(SETTINGS) as cluster:
            yield Databases(cluster.url(), "a throwaway server started by the bench")
    except subprocess.TimeoutExpired as exc:  # pg_ctl past its deadline
        raise RuntimeError(f"the bench's PostgreSQL server did not start or stop: {exc}") from exc
