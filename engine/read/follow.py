"""``engine.follow(run_id)``: a run's records as they are committed, by any process.

The loop: open the store's change feed (``Store.change_feed``) first, then read
the run's records after the cursor and its status in one snapshot, yield them,
and stop if the run finished (or paused, unless asked to go on); else wait on
the feed and read again. Watching before reading means a commit is either in the
snapshot or wakes the wait. The feed is a wake-up, not the truth: a wait also
ends after ``fallback`` seconds, so a lost wake-up delays an event, never drops it.
The cursor is the seq of the last event yielded (``since``): the store gives a
run's records increasing seqs in commit order (LMDB's single writer; PostgreSQL's
lock per run), so "after the cursor" has no gaps and no repeats.

A store that cannot be read (a PostgreSQL outage longer than its reconnect time)
ends the follow with ``StoreError``: the caller holds the cursor and chooses how
long to wait for the server (``bide log --follow`` and ``bide serve``'s streams
follow again from it; a script may rather fail).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, NamedTuple

from ..base.errors import FollowTimeout, StoreError, UnknownRun
from ..base.offload import off_loop
from ..base.vocabulary import FINISHED, Status
from ..storage.store import Store
from .events import Event, read_event

FALLBACK = 2.0  # seconds between re-reads when no wake-up comes
BATCH = 500  # events read per snapshot
Events = Generator[Event, None, None]  # close() it to release the feed early
MOVING = frozenset({Status.PENDING, Status.RUNNING})  # a worker has it, or will take it


def stops(status: str, through_pauses: bool) -> bool:
    """Does a follower stop at a run in ``status``? At the end, and unless asked to go
    on, at any pause: waiting for a person or a timer, or let go by its worker."""
    return status in FINISHED or (not through_pauses and status not in MOVING)


def follow(store: Store, run_id: str, *, since: int | None = None,
           through_pauses: bool = False, timeout: float | None = None,
           fallback: float = FALLBACK, stop: threading.Event | None = None) -> Events:
    """The run's events after ``since`` (a seq; None: from its first record), live.

    Raises UnknownRun at once (not at the first ``next``) for a run that does not exist.
    See ``Engine.follow`` for the arguments; ``stop``, set from another thread, ends the
    follow after its current wait (a generator busy in another thread cannot be closed).
    """
    with store.reader() as r:
        if r.head(run_id) is None:
            raise UnknownRun(run_id)
    if fallback <= 0:
        raise ValueError(f"fallback must be a positive number of seconds, not {fallback!r}")
    return _follow(store, run_id, since, through_pauses, timeout, fallback,
                   stop or threading.Event())


class Outage(NamedTuple):
    """How ``follow_on`` waits out a store that cannot be read: the first pause, the
    longest (each pause doubles), and whom it tells when the store goes away (once per
    outage) and comes back."""

    first: float
    longest: float
    away: Callable[[StoreError], None] | None = None
    back: Callable[[], None] | None = None


def follow_on(store: Store, run_id: str, outage: Outage, *, since: int | None = None,
              through_pauses: bool = False, fallback: float = FALLBACK,
              stop: threading.Event | None = None) -> Events:
    """``follow`` that outlives the store being away: a ``StoreError`` (a PostgreSQL
    outage longer than its reconnect time) is waited out as ``outage`` says, and the
    follow goes on from the last event yielded, with no gap and no repeat.

    ``bide log --follow`` and ``bide serve``'s run stream both follow this way. It ends
    when the run stops (as ``follow``), or after ``stop`` is set; UnknownRun at once.
    """
    stop = stop or threading.Event()
    try:  # UnknownRun (and a bad fallback) now, not at the first ``next``
        follow(store, run_id, since=since, fallback=fallback).close()
    except StoreError:
        pass  # the store away already: waited out like any outage, by the loop
    return _follow_on(store, run_id, outage, since, through_pauses, fallback, stop)


def follow_with(store: Store, run_id: str, outage: Outage | None, **options: Any) -> Events:
    """``follow``, or ``follow_on`` when ``outage`` says how to wait one out (what
    ``Engine.follow`` and ``afollow`` choose between).

    Raises:
        ValueError: ``timeout`` and ``outage`` together (a follow that waits out an outage
            of unknown length has no deadline).
    """
    if outage is None:
        return follow(store, run_id, **options)
    if options.pop("timeout", None) is not None:
        raise ValueError("follow takes a timeout or an outage, not both: a follow that "
                         "waits out an outage has no deadline")
    return follow_on(store, run_id, outage, **options)


def _follow_on(store: Store, run_id: str, outage: Outage, since: int | None,
               through_pauses: bool, fallback: float, stop: threading.Event) -> Events:
    cursor, pause, away = since, outage.first, False
    while not stop.is_set():
        events = None
        try:
            events = follow(store, run_id, since=cursor, through_pauses=through_pauses,
                            fallback=fallback, stop=stop)
            for event in events:
                if away:
                    away, pause = False, outage.first
                    if outage.back is not None:
                        outage.back()
                yield event
                cursor = event.seq
            return
        except StoreError as exc:
            if not away and outage.away is not None:
                outage.away(exc)
            away = True
        finally:
            if events is not None:
                events.close()
        stop.wait(pause)
        pause = min(pause * 2, outage.longest)


def _follow(store: Store, run_id: str, since: int | None, through_pauses: bool,
            timeout: float | None, fallback: float, stop: threading.Event) -> Events:
    deadline = None if timeout is None else time.monotonic() + timeout
    feed = store.change_feed(run_id)
    cursor = since
    try:
        while True:
            events, status = _read(store, run_id, cursor)
            for event in events:
                yield event
                cursor = event.seq
            if len(events) == BATCH:  # more may be there already: read on before deciding
                continue
            if stops(status, through_pauses):
                return
            wait = fallback
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    raise FollowTimeout(run_id, timeout or 0.0, status, cursor)
            feed.wait(wait)
            if stop.is_set():
                return
    finally:
        feed.close()


def _read(store: Store, run_id: str, cursor: int | None) -> tuple[list[Event], str]:
    """Up to ``BATCH`` of the run's events after ``cursor``, and its status, from one
    snapshot (a long run's history is read a batch at a time, not all in memory)."""
    with store.reader() as r:
        head = r.head(run_id)
        if head is None:  # removed while followed (prune of a finished run)
            raise UnknownRun(run_id)
        start = 0 if cursor is None else cursor + 1
        entries = itertools.islice(r.run_entries(run_id, start), BATCH)
        return [read_event(r, run_id, seq, kind) for seq, kind in entries], head.status


async def afollow(store: Store, run_id: str, outage: Outage | None = None,
                  **options: Any) -> AsyncIterator[Event]:
    """``follow`` for async code: each wait happens in bide's thread pool, never on the loop
    (an ``outage``'s pauses too, and its ``away`` and ``back`` are called there).

    Closing the iterator early (``break``, cancellation) ends the follow, and closes its
    feed, once the wait under way ends (at most ``fallback`` seconds; pass a small
    one where that matters).
    """
    stop = threading.Event()
    events = await off_loop(follow_with, store, run_id, outage, stop=stop, **options)
    done = object()
    try:
        while (event := await off_loop(next, events, done)) is not done:
            yield event
    finally:
        stop.set()  # the thread still inside ``next`` (a cancellation) returns after its wait
        await _close(events)


async def _close(events: Events) -> None:
    """Close the sync generator in the pool: the thread still inside its ``next`` (after a
    cancellation) must leave it first, or ``close`` would raise "already executing"."""
    while True:
        try:
            await off_loop(events.close)
            return
        except ValueError:  # generator already executing: it stops after its wait
            await asyncio.sleep(0.05)
