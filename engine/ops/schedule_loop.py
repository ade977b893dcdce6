"""The thread of ``bide watch`` that starts schedules' runs when their slots come.

It reads the schedules (one small table), starts every due slot's run
(``schedules.start_slot``: one commit, exactly once per slot whoever races), offers
the runs it started to the watcher's workers, and sleeps until the next slot of
any schedule. A change to the schedules wakes it early: it waits on the store's
change feed for the schedule records' run (``SCHEDULES_RUN``): ``LISTEN`` on
PostgreSQL, so a schedule recorded on another host re-arms every watcher at once;
inotify on the LMDB file, which wakes on any commit, so reads are spaced by
``MIN_GAP``. A full read every ``REREAD`` seconds covers a lost wake-up. A feed
that cannot be opened (the server restarting) is tried again with a bounded backoff
while the schedules fire on their timer; a feed whose connection drops reconnects
itself. Neither ever stops the thread.

A schedule whose flow this watcher's app does not have is logged once and skipped
(another watcher with the flow starts it); it never stops the thread.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from ...formats.errors import BideError
from ...formats.schedule_records import SCHEDULES_RUN
from ..api.runtime import Engine
from ..base.errors import raised_at
from ..run import schedules
from ..storage.change_feed import ChangeFeed

REREAD = 30.0  # seconds between reads of the schedules when nothing wakes the thread
MIN_GAP = 0.1  # at most this many reads per second when woken by commits (LMDB: any commit)
SLICE = 0.5  # the longest a stop goes unseen while waiting
PAST_DUE = 0.002  # look this long after a slot's time (a slot is due once its time came)
RETRY = 1.0  # after a failed read (the server restarting), try again this soon
REOPEN_MAX = 8.0  # the longest pause between tries to open the change feed again


class ScheduleLoop:
    """Start schedules' runs at their slots; ``offer(run_id, flow)`` hands them on."""

    def __init__(self, engine: Engine, offer: Callable[[str, str], object], *,
                 stop: threading.Event, log: Callable[[str], None] = print) -> None:
        self.engine, self.offer, self.stop, self.log = engine, offer, stop, log
        self._told: set[tuple[str, str]] = set()  # (schedule, flow) said to be unknown
        self._failing = False
        self._feed_lost = False  # the change feed could not be opened (said once)
        self._reopen_at, self._reopen_pause = 0.0, RETRY
        self.thread = threading.Thread(target=self._serve, name="bide-watch-schedules",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end (after ``stop``); True if it has."""
        if self.thread.ident is not None:
            self.thread.join(timeout)
        return not self.thread.is_alive()

    def fire(self, *, offer: bool = True) -> float:
        """Start every due slot's run now (offered to the workers unless ``offer`` is
        False); the engine-clock time of the next slot (inf: none). Safe to call from
        several processes at once."""
        now = self.engine.clock()
        with self.engine.store.reader() as r:
            found = schedules.states(r)
        soonest = math.inf
        for s in found:
            if s.flow not in self.engine.flows:
                if (s.name, s.flow) not in self._told:
                    self._told.add((s.name, s.flow))
                    self.log(f"schedule {s.name}: skipped, this watcher has no flow "
                             f"{s.flow!r} (a watcher that has it starts its runs)")
                continue
            self._start_due(s, now, offer)
            soonest = min(soonest, schedules.slot_after(s, now))
        return soonest

    def _start_due(self, s: schedules.ScheduleState, now: float, offer: bool) -> None:
        slots, skipped = schedules.due_slots(s, now)
        if skipped:
            many = skipped if skipped <= schedules.COUNT_CAP else f"over {schedules.COUNT_CAP}"
            self.log(f"schedule {s.name}: catching up {len(slots)} missed slots; "
                     f"{many} older ones skipped (at most {schedules.CATCH_UP_CAP})")
        elif len(slots) > 1:
            self.log(f"schedule {s.name}: catching up {len(slots)} missed slots")
        for slot in slots:
            rid = schedules.start_slot(self.engine._create, s, slot, now=now)
            if rid is not None:
                self.log(f"schedule {s.name}: started run {rid} (slot {slot})")
                if offer:
                    self.offer(rid, s.flow)

    # -- the thread ----------------------------------------------------------------
    def _serve(self) -> None:
        feed: ChangeFeed | None = None
        try:
            while not self.stop.is_set():
                if feed is None:
                    feed = self._open_feed()
                try:
                    self._sleep(feed, self._next())
                except BideError as exc:  # the feed's own read failed (LMDB's version, say)
                    if feed is not None:
                        feed.close()
                    feed = None
                    self._feed_failed(exc)
        except Exception as exc:
            # a watcher that silently stopped starting schedules would look alive: stop it
            self.log(f"schedules failed ({type(exc).__name__}: {exc}; raised at "
                     f"{raised_at(exc)}); stopping the watcher")
            self.stop.set()
        finally:
            if feed is not None:
                feed.close()

    def _open_feed(self) -> ChangeFeed | None:
        """The schedules' change feed; None while the store cannot give one (the server
        restarting): the thread then reads on a timer and tries again, backing off up to
        ``REOPEN_MAX``, saying so once per outage."""
        if time.monotonic() < self._reopen_at:
            return None
        try:
            feed = self.engine.store.change_feed(SCHEDULES_RUN)
        except BideError as exc:  # the server away: the schedules still fire on time
            self._feed_failed(exc)
            return None
        self._feed_lost, self._reopen_pause = False, RETRY
        return feed

    def _feed_failed(self, exc: BideError) -> None:
        """No feed until the next try (backing off); said once per outage."""
        if not self._feed_lost:
            self.log(f"schedules: cannot hear changes ({exc}); trying again")
        self._feed_lost = True
        self._reopen_at = time.monotonic() + self._reopen_pause
        self._reopen_pause = min(self._reopen_pause * 2, REOPEN_MAX)

    def _next(self) -> float:
        """Fire what is due; the monotonic time to look again."""
        try:
            soonest = self.fire()
        except BideError as exc:  # the server away, a damaged entry: doctor says which
            if not self._failing:
                self.log(f"schedules: cannot read or start them ({exc}); trying again")
            self._failing = True
            return time.monotonic() + RETRY
        self._failing = False
        wait = min(REREAD, soonest - self.engine.clock() + PAST_DUE)
        return time.monotonic() + max(0.0, wait)

    def _sleep(self, feed: ChangeFeed | None, until: float) -> None:
        """Wait until ``until`` (monotonic), or a schedule change (spaced by MIN_GAP).
        Without a feed, until ``until`` or the next try to open one."""
        if feed is None:
            until = min(until, max(self._reopen_at, time.monotonic() + MIN_GAP))
        read_at, woken = time.monotonic(), False
        while not self.stop.is_set():
            now = time.monotonic()
            end = min(until, read_at + MIN_GAP) if woken else until
            if now >= end:
                return
            if feed is None:
                self.stop.wait(min(SLICE, end - now))
            else:
                woken = feed.wait(min(SLICE, end - now)) or woken
