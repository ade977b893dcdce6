"""One thread per store renews the leases of every run this process is advancing on it.

A thread per run cost more than the run itself when a watcher resumes a burst of
short runs: starting it waits for it to be scheduled (~1.5 ms under the GIL, more
under load), twice the rest of a resume. Leases are renewed every third of their
time to live, so one thread keeps hundreds of runs leased.

**Batches.** Every lease due within a third of its interval is renewed in one
transaction (``Store.renew_leases``): over a slow link a renewal costs its round
trips, and one renewal per run, one after another, fell behind with a few dozen runs
at 100 ms (``python -m bide.bench.renewals`` measures both). A renewal the store
refuses (the lease was taken over) ends that run's renewals and marks its
``LeaseClock`` lost, so the worker calls no tool on it.

**Timed from the start.** A renewal's expiry is the store's time of its commit plus
the lease's time to live, so the worker's ``LeaseClock`` is raised from the moment
the renewal was *sent*, and the next renewal is due an interval after that moment, not
after the reply: a slow reply must not push the next renewal past the lease's end.

A renewal that raises ``StoreError`` (the server is away longer than the store's
reconnect time) is tried again, backing off up to the renewal interval, for as long as
the run's worker goes on: giving up left a long-running worker without a lease after a
PostgreSQL outage, so another watcher took the run over needlessly. The renewer says
so once per outage (``logging``, logger ``bide.renewer``) and once when renewals
succeed again. A worker whose lease was taken over meanwhile learns it at its next
commit (the fencing token refuses it) or before its next tool call (its
``LeaseClock`` has run out). Any other exception (a bug, a store object torn down)
ends those runs' renewals.

A renewer's thread ends when it has had no lease for ``IDLE`` seconds, and a new
lease starts it again.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import StoreError
from .lease_clock import LeaseClock

FIRST_RETRY = 0.05  # seconds before a failed renewal is tried again; doubles up to the interval
IDLE = 5.0  # seconds with no lease before the renewer's thread ends
MIN_INTERVAL = 0.05  # seconds: renewals of a very short lease come no more often than this
NAME = "bide-lease-renewer"  # its thread's name, then the store's home

log = logging.getLogger("bide.renewer")


@dataclass(order=True)
class _Due:
    at: float
    order: int
    lease: _Lease = field(compare=False)


@dataclass(eq=False)
class _Lease:
    run_id: str
    token: int
    ttl: float
    clock: LeaseClock
    interval: float
    ended: bool = False
    retry: float = 0.0  # the wait before the next try after a failure (0: none failed)


class Renewer:
    """Renew each added lease every third of its time to live, in batches, until ended."""

    def __init__(self, store: Any, clock: Callable[[], float] = time.monotonic,
                 name: str = NAME) -> None:
        self._store = weakref.ref(store)
        self._clock, self._name = clock, name
        self._cond = threading.Condition()
        self._heap: list[_Due] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._failing = False  # in an outage: said once, until a renewal succeeds
        self.batches = 0  # renew_leases calls made (the bench reads it)

    def add(self, run_id: str, token: int, ttl: float, clock: LeaseClock) -> Callable[[], None]:
        """Start renewing ``run_id``'s lease; returns the function that stops it (idempotent)."""
        lease = _Lease(run_id, token, ttl, clock, max(ttl / 3, MIN_INTERVAL))
        with self._cond:
            self._push(lease, self._clock() + lease.interval)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name,
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

        def end() -> None:
            lease.ended = True  # read by the renewer under no lock: a stale read renews once more

        return end

    def _push(self, lease: _Lease, at: float) -> None:
        heapq.heappush(self._heap, _Due(at, next(self._order), lease))

    def _due(self) -> list[_Lease] | None:
        """Wait for the leases that are due, with those due soon (the lock is held);
        None once idle for ``IDLE`` seconds (the thread then ends)."""
        idle_since = None
        while True:
            while self._heap and self._heap[0].lease.ended:
                heapq.heappop(self._heap)
            now = self._clock()
            if not self._heap:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= IDLE:
                    self._thread = None
                    return None
                self._cond.wait(timeout=IDLE)
                continue
            idle_since = None
            first = self._heap[0]
            if first.at > now:
                self._cond.wait(timeout=first.at - now)
                continue
            taken: list[_Lease] = []
            while self._heap and self._heap[0].at <= now + self._heap[0].lease.interval / 3:
                lease = heapq.heappop(self._heap).lease
                if not lease.ended:
                    taken.append(lease)
            return taken

    def _serve(self) -> None:
        while True:
            with self._cond:
                leases = self._due()
            if leases is None:
                return
            if leases:
                self._renew(leases)

    def _renew(self, leases: list[_Lease]) -> None:
        """One transaction for the batch; each lease learns its own outcome."""
        store = self._store()
        if store is None:  # the store object is gone: nothing to renew on
            for lease in leases:
                lease.ended = True
            return
        started = self._clock()
        try:
            self.batches += 1
            renewed = store.renew_leases([(x.run_id, x.token, x.ttl) for x in leases])
        except StoreError as exc:  # the store is away (an outage): try again, backing off
            live = [x for x in leases if not x.ended]  # (ended meanwhile: its run is over,
            if live:  # its store may be closed; that is no outage to report)
                self._failed(live, exc)
            return
        except Exception:  # noqa: BLE001 - not an outage: the next commit will say what is wrong
            for lease in leases:
                lease.ended = True
            return
        if self._failing:
            self._failing = False
            log.warning("lease renewals succeed again")
        with self._cond:
            for lease, ok in zip(leases, renewed, strict=True):
                lease.retry = 0.0
                if ok:
                    lease.clock.renewed(started)
                    if not lease.ended:
                        self._push(lease, started + lease.interval)
                else:
                    lease.clock.lost()
                    lease.ended = True

    def _failed(self, leases: list[_Lease], exc: Exception) -> None:
        if not self._failing:
            self._failing = True
            log.warning("lease renewals failing (%s: %s); trying again until the store is back",
                        type(exc).__name__, exc)
        with self._cond:
            for lease in leases:
                lease.retry = min(lease.interval, max(FIRST_RETRY, lease.retry * 2))
                self._push(lease, self._clock() + lease.retry)


_renewers: dict[int, Renewer] = {}
_lock = threading.Lock()


def renewer_for(store: Any) -> Renewer:
    """The renewer of ``store`` in this process (made on first use)."""
    with _lock:
        found = _renewers.get(id(store))
        if found is None or found._store() is not store:
            for key in [k for k, r in _renewers.items() if r._store() is None]:
                del _renewers[key]  # stores no longer open: their renewers are idle
            found = _renewers[id(store)] = Renewer(store, name=f"{NAME} {store.home}")
        return found
