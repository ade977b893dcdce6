"""Following a run on a PostgreSQL home: ``LISTEN`` for the commits of the runs followed.

A notifying COMMIT takes a cluster-wide lock (``wakeups``), so commits must not
notify unless someone listens. A follower therefore says so in the store: a row
in ``meta`` under ``follow <md5 of the run id> <pid> <backend start>`` (its
listening session), written before it reads anything. Each commit's statement
that inserts its log rows also runs ``notify_statement``: ``pg_notify`` of the
md5 of each of its runs that has such a row — a scan of the few rows of ``meta``,
no extra statement or round trip, and no notification (no lock) when nobody follows.

A follower removes its row when it stops. One killed leaves its row behind: the
next follower of any run removes rows whose session is gone. A row left over only
makes commits of that run notify nobody, never a wrong answer; and a notification
is a wake-up, not the truth (the follower reads the store again, and re-reads
every few seconds anyway, which covers a commit made just before the row was seen).
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from ..base.errors import StoreError
from .connect import connect, psycopg
from .reader import SCHEMA

CHANNEL = "bide_follow"
PREFIX = "follow "  # meta keys of followers: "follow <md5 of run id> <pid> <backend start>"


def tag(run_id: str) -> str:
    """What names a run in followers' rows and notifications: the md5 of its id (a run id
    may be longer than a notification carries, or hold a NUL that text cannot)."""
    return hashlib.md5(_utf8(run_id)).hexdigest()


def _utf8(run_id: str) -> bytes:
    return run_id.encode("utf-8", "surrogateescape")  # a store-level id may hold a NUL


def notify_statement(run_ids: list[str]) -> tuple[str, tuple[Any, ...]]:
    """The SELECT a commit of ``run_ids`` sends with its log rows: notify each run some
    follower listens for (``meta`` is a handful of rows: the scan costs microseconds)."""
    return (f"SELECT pg_notify('{CHANNEL}', t) FROM unnest(%s::text[]) AS t WHERE EXISTS "
            f"(SELECT 1 FROM {SCHEMA}.meta WHERE starts_with(key, %s || t || ' '))",
            ([tag(r) for r in run_ids], PREFIX))


class PgFollowFeed:
    """The ``ChangeFeed`` of one run on a PostgreSQL home: its own connection, LISTENing,
    with the follower's row in ``meta`` while it is open.

    Raises:
        StoreError: the server cannot be reached or refuses the row.
    """

    def __init__(self, url: str, shown: str, run_id: str, *, timeout: float = 30.0) -> None:
        self.url, self.run_id, self.shown, self.timeout = url, run_id, shown, timeout
        self._pause = threading.Event()  # never set: paces reconnecting after a loss
        self._key: str | None = None  # this follower's row in meta, once written
        self._conn: psycopg.Connection[Any] | None = None
        try:
            self._connect()
        except psycopg.Error as exc:
            self.close()
            raise StoreError(f"cannot follow runs at {shown}: {exc}", path=shown) from exc

    def _connect(self) -> None:
        self._conn = connect(self.url, application_name="bide-follow",
                             connect_timeout=max(int(self.timeout), 1))
        self._key = self._register(self._conn)

    def _register(self, conn: psycopg.Connection[Any]) -> str:
        conn.execute(f"LISTEN {CHANNEL}")
        key = f"{PREFIX}{tag(self.run_id)} {_session(conn, 'pg_backend_pid()')}"
        conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES (%s, 'listening') "
                     "ON CONFLICT (key) DO NOTHING", (key,))
        self._sweep(conn)
        return key

    @staticmethod
    def _sweep(conn: psycopg.Connection[Any]) -> None:
        """Remove the rows of followers whose session is gone (killed, never closed)."""
        sessions = conn.execute(f"SELECT pid, {_STARTED} FROM pg_stat_activity").fetchall()
        live = {f"{pid} {started}" for pid, started in sessions}
        hidden = {str(pid) for pid, started in sessions if started is None}  # another role's
        rows = conn.execute(f"SELECT key FROM {SCHEMA}.meta WHERE starts_with(key, %s)",
                            (PREFIX,)).fetchall()
        gone = [key for (key,) in rows if key.split(" ", 2)[2] not in live
                and key.split(" ")[2] not in hidden]
        if gone:
            conn.execute(f"DELETE FROM {SCHEMA}.meta WHERE key = ANY(%s)", (gone,))

    def wait(self, timeout: float) -> bool:
        conn = self._conn
        if conn is None:  # lost (the server restarted): listen again, paced, then re-read
            self._pause.wait(min(timeout, 1.0))
            try:
                self._connect()
            except psycopg.Error:  # still down: the follower re-reads and comes back here
                self._lose()
            return True
        mine = tag(self.run_id)
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            while (left := deadline - time.monotonic()) > 0:
                for note in conn.notifies(timeout=left, stop_after=1):
                    if note.payload == mine:  # else another run's commit: keep waiting
                        return True
        except psycopg.OperationalError:  # the server went away: re-read, then listen again
            self._lose()
            return True
        return False

    def close(self) -> None:
        conn = self._conn
        if conn is not None and not conn.broken and self._key is not None:
            try:
                conn.execute(f"DELETE FROM {SCHEMA}.meta WHERE key = %s", (self._key,))
            except psycopg.Error:  # closing anyway; the next follower's sweep removes it
                pass
        self._lose()

    def _lose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # a dead connection: nothing left to release
                pass


_STARTED = "extract(epoch FROM backend_start)::text"


def _session(conn: psycopg.Connection[Any], pid: str) -> str:
    """``<pid> <backend start>``: names a server session for as long as it lives."""
    row = conn.execute(f"SELECT pid, {_STARTED} FROM pg_stat_activity WHERE pid = {pid}"
                       ).fetchone()
    return f"{row[0]} {row[1]}" if row else "0 0"
