"""Hearing a PostgreSQL home's wake-ups: ``LISTEN`` on a connection of its own.

``PostgresStore.commit`` sends ``NOTIFY bide_wake, '<run id>'`` in the commit's
own transaction for the runs it announces (``wakeups``), so a rolled-back commit
wakes nobody. A watcher listens here, on a dedicated connection that never
carries a commit (a pooled connection would lose what arrives while it is lent
out, and would be busy when a notification lands).

Notifications are wake-ups, not the truth: one sent while this connection was
down (the server restarted, the network dropped) is gone. So after every
reconnect ``wait`` says ``missed`` and the watcher rescans every run; ``ping``
(called at each periodic rescan) finds a connection that died silently.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from ..base.errors import StoreError
from .connect import connect, psycopg

CHANNEL = "bide_wake"
EVERYTHING = ""  # a payload that names no run: look at every run
MAX_PAYLOAD = 7999  # bytes PostgreSQL takes in one notification's payload


@dataclass(frozen=True)
class Heard:
    """What one ``wait`` brought: runs announced, or that some may have been missed."""

    runs: tuple[str, ...] = ()
    missed: bool = False  # reconnected (or a run too long to name): rescan every run


def payload(run_id: str) -> str:
    """The notification that announces ``run_id``; ``EVERYTHING`` if it cannot name it (too
    long, or a NUL, which PostgreSQL text cannot hold)."""
    fits = "\x00" not in run_id and len(run_id.encode("utf-8", "replace")) <= MAX_PAYLOAD
    return run_id if fits else EVERYTHING


class PgListener:
    """``LISTEN`` on its own connection; ``wait`` for what the home's commits announce.

    Used by one thread (the watcher's waker). Connecting happens in ``__init__``
    (a StoreError if the server cannot be reached within ``timeout``) and again
    after any loss, paced, until ``stop`` is set.
    """

    def __init__(self, url: str, shown: str, stop: threading.Event, *,
                 timeout: float = 30.0) -> None:
        self.url, self.shown, self.stop = url, shown, stop
        self._conn: psycopg.Connection[Any] | None = None
        self._pause = 0.05
        self._next_try = 0.0  # monotonic: no reconnect attempt before this
        deadline = time.monotonic() + timeout
        while not self._connect():
            if time.monotonic() > deadline or self.stop.wait(self._pause):
                raise StoreError(f"cannot listen for wake-ups at {shown}: the server is "
                                 "unreachable", path=shown)
            self._pause = min(self._pause * 2, 1.0)

    def wait(self, timeout: float) -> Heard:
        """Wait up to ``timeout`` seconds for announcements; after a reconnect, ``missed``."""
        if self._conn is None:
            early = self._next_try - time.monotonic()
            if early > 0:  # paced: never a busy loop of connection attempts
                self.stop.wait(min(early, timeout))
                return Heard()
            if not self._connect():
                self._pause = min(self._pause * 2, 1.0)
                self._next_try = time.monotonic() + self._pause
                return Heard()
            return Heard(missed=True)
        try:
            got = [n.payload for n in self._conn.notifies(timeout=timeout, stop_after=1)]
            if got:  # take what else has arrived, without waiting
                got += [n.payload for n in self._conn.notifies(timeout=0.0)]
        except psycopg.OperationalError:  # the server went away: reconnect on the next wait
            self._lose()
            return Heard()
        runs = tuple(dict.fromkeys(p for p in got if p != EVERYTHING))
        return Heard(runs, missed=EVERYTHING in got)

    def ping(self) -> None:
        """Ask the server something, so a connection that died silently is noticed."""
        if self._conn is None:
            return
        try:
            self._conn.execute("SELECT 1")
        except psycopg.OperationalError:
            self._lose()

    def close(self) -> None:
        self._lose()

    def _connect(self) -> bool:
        try:
            conn = connect(self.url, application_name="bide-listen")  # (dead peers: pg_connect)
        except psycopg.OperationalError:  # down or restarting: the caller paces the next try
            return False
        try:
            conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.OperationalError:
            conn.close()
            return False
        self._conn, self._pause = conn, 0.05
        return True

    def _lose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # closing a dead connection: nothing left to release
                pass
