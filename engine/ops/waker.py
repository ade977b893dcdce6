"""The watcher's wake path on a store that announces changes (PostgreSQL).

Without it a watcher finds runs to advance by rescanning its home every second.
With a store that has ``changes()`` the waker, a thread of ``bide watch``,
finds them by being told, and rescans rarely:

- an announced run (``wakeups``: submitted, decided, let go) is read and, if it
  can go on, offered to the dispatcher at once;
- what no commit announces has a timer: a run under a live lease is looked at
  again when that lease would expire (its worker may be dead, on another
  host), a run waiting for an approval with a deadline when it passes; a run
  announced is looked at again after one lease time (another host may have
  taken it, and die);
- a full rescan at start (after ``LISTEN``, so nothing falls between the two),
  after every reconnect (notifications sent meanwhile are lost), and every
  ``rescan`` seconds (30 by default: a run leased since the last rescan by a
  worker that then died is found there at the latest).

An idle watcher over any number of finished runs sends the server nothing but
one rescan (and a ping) per ``rescan`` seconds.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from ...formats.errors import BideError
from ..api.runtime import Engine
from ..base.errors import raised_at
from ..run.run_view import RunView
from ..storage import attention
from ..storage.index import RunHead

RESCAN = 30.0  # seconds between full rescans when changes are announced
SLICE = 0.5  # the longest a stop goes unseen while waiting
SLACK = 0.01  # look this long after a lease or deadline ends (it must have ended)
RETRY = 1.0  # after a failed read (the server restarting), try again this soon
GRID = 0.01  # timers fall due on a 10 ms grid: runs due together are read in one snapshot
# (a sleeping run is due to the millisecond: ``ctx.sleep`` promises 100 ms)


class Heard(Protocol):
    runs: tuple[str, ...]
    missed: bool


class Changes(Protocol):
    """What a store's ``changes(stop)`` returns (``pg_listen.PgListener``)."""

    def wait(self, timeout: float) -> Heard: ...
    def ping(self) -> None: ...
    def close(self) -> None: ...


Offer = Callable[[str, str], object]  # (run_id, flow): the dispatcher's offer


def survey(engine: Engine, run_ids: Iterable[str] | None = None
           ) -> tuple[list[RunHead], list[tuple[float, str]]]:
    """The runs that can go on now, and when others can (engine clock), in one snapshot.

    Args:
        run_ids: these runs only; None: every run that is not finished.
    """
    now = engine.clock()
    ready, later = [], []
    with engine.store.reader() as r:
        for run_id in attention.run_ids(r) if run_ids is None else run_ids:
            head = r.head(run_id)
            if head is None:
                continue
            if not engine.works_on(head):
                continue  # a LangGraph thread, and no graph here for it
            view = RunView(r, head)
            if view.needs_work(now):
                ready.append(head)
            elif (at := view.workable_at(now)) is not None:
                later.append((at, run_id))
    return ready, later


class Waker:
    """Offer runs as the store announces them, and when their timers fall due."""

    def __init__(self, engine: Engine, changes: Changes, offer: Offer, *,
                 stop: threading.Event, rescan: float = RESCAN,
                 log: Callable[[str], None] = print) -> None:
        self.engine, self.changes, self.offer, self.stop = engine, changes, offer, stop
        self.rescan, self.log = rescan, log
        self.ready = threading.Event()  # set after the first full rescan
        self.failure: Exception | None = None
        self._timers: list[tuple[float, str]] = []  # (monotonic due, run_id), a heap
        self._due: dict[str, float] = {}  # the live entry of each run in the heap
        self._full_at = 0.0  # monotonic time of the next full rescan
        self._failing = False
        self.thread = threading.Thread(target=self._serve, name="bide-watch-waker",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end (after ``stop``); True if it has."""
        if self.thread.ident is not None:
            self.thread.join(timeout)
        alive = self.thread.is_alive()
        if not alive:
            self.changes.close()
        return not alive

    # -- the loop ---------------------------------------------------------------
    def _serve(self) -> None:
        try:
            self._loop()
        except Exception as exc:
            # a watcher that no longer hears would look alive and do nothing: stop it
            self.log(f"wake-ups failed ({type(exc).__name__}: {exc}; raised at "
                     f"{raised_at(exc)}); stopping the watcher")
            self.failure = exc  # raised again by Watcher.serve, in its own thread
            self.stop.set()

    def _loop(self) -> None:
        self._full()
        self.ready.set()
        self.log(f"listening for wake-ups; a full rescan every {self.rescan:g}s")
        while not self.stop.is_set():
            now = time.monotonic()
            due = min(self._full_at, self._timers[0][0] if self._timers else self._full_at)
            heard = self.changes.wait(max(0.0, min(due - now, SLICE)))
            if self.stop.is_set():
                return
            if heard.missed:
                self._full()
                continue
            if heard.runs:
                self._look(heard.runs, announced=True)
            now = time.monotonic()
            if now >= self._full_at:
                self.changes.ping()
                self._full()
            elif self._timers and self._timers[0][0] <= now:
                self._look(self._pop_due(now))

    def _full(self) -> None:
        """Rescan every run that is not finished; timers start again from what it saw."""
        self._timers, self._due = [], {}
        if self._read(None):
            self._full_at = time.monotonic() + self.rescan
        else:
            self._full_at = time.monotonic() + RETRY

    def _look(self, run_ids: Iterable[str], *, announced: bool = False) -> None:
        run_ids = list(run_ids)
        if not self._read(run_ids):
            for run_id in run_ids:  # not read: try these again soon
                self._arm(run_id, time.monotonic() + RETRY, keep_sooner=True)
        if announced:  # whoever takes it may die before any rescan: look again later
            for run_id in run_ids:
                self._arm(run_id, time.monotonic() + self.engine.lease_ttl, keep_sooner=True)

    def _read(self, run_ids: list[str] | None) -> bool:
        """Offer what can go on, arm timers for the rest; False if the store failed."""
        try:
            ready, later = survey(self.engine, run_ids)
        except BideError as exc:  # the server away, or a damaged entry: doctor says which
            if not self._failing:  # said once per outage, not at every retry
                self.log(f"wake-ups: cannot read the runs ({exc}); trying again")
            self._failing = True
            return False
        self._failing = False
        for head in ready:
            if self.stop.is_set():
                return True
            self.offer(head.run_id, head.flow)
        clock_now, mono_now = self.engine.clock(), time.monotonic()
        for at, run_id in later:
            self._arm(run_id, mono_now + max(0.0, at - clock_now) + SLACK)
        return True

    # -- timers -----------------------------------------------------------------
    def _arm(self, run_id: str, due: float, *, keep_sooner: bool = False) -> None:
        have = self._due.get(run_id)
        due = math.ceil(due / GRID) * GRID  # never earlier than asked
        if keep_sooner and have is not None and have <= due:
            return
        self._due[run_id] = due
        heapq.heappush(self._timers, (due, run_id))

    def _pop_due(self, now: float) -> list[str]:
        out = []
        while self._timers and self._timers[0][0] <= now:
            due, run_id = heapq.heappop(self._timers)
            if self._due.get(run_id) == due:  # else a stale entry, re-armed since
                del self._due[run_id]
                out.append(run_id)
        return out
