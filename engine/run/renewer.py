"""One thread renews the leases of every run this process is advancing.

A thread per run cost more than the run itself when a watcher resumes a burst of
short runs: starting it waits for it to be scheduled (~1.5 ms under the GIL, more
under load), twice the rest of a resume. Leases are renewed every third of their
time to live, so one thread keeps hundreds of runs leased; a renewal the store
refuses (the lease was taken over) ends that run's renewals, as its own thread used
to end.

A renewal that raises ``StoreError`` (the server is away longer than the store's
reconnect time) is tried again, backing off up to the renewal interval, for as long as the run's
worker goes on: giving up left a long-running worker without a lease after a
PostgreSQL outage, so another watcher took the run over needlessly. The renewer says
so once per outage (``logging``, logger ``bide.renewer``) and once when renewals
succeed again. A worker whose lease was taken over meanwhile learns it at its next
commit: the fencing token refuses it (``StaleLease``). Any other exception (a bug, a
store object torn down) ends that run's renewals, as before.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..base.errors import StoreError

Renew = Callable[[], bool]  # renew once; False when the lease is no longer ours
FIRST_RETRY = 0.05  # seconds before a failed renewal is tried again; doubles up to the interval

log = logging.getLogger("bide.renewer")


@dataclass(order=True)
class _Due:
    at: float
    order: int
    lease: _Lease = field(compare=False)


@dataclass(eq=False)
class _Lease:
    renew: Renew
    interval: float
    ended: bool = False
    retry: float = 0.0  # the wait before the next try after a failure (0: none failed)


class Renewer:
    """Call each registered ``renew`` every ``interval`` seconds until it is ended."""

    def __init__(self, clock: Callable[[], float], name: str = "bide-lease-renewer") -> None:
        self._clock, self._name = clock, name
        self._cond = threading.Condition()
        self._heap: list[_Due] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._failing = False  # in an outage: said once, until a renewal succeeds

    def add(self, renew: Renew, interval: float) -> Callable[[], None]:
        """Start renewing; returns the function that stops it (idempotent)."""
        lease = _Lease(renew, interval)
        with self._cond:
            heapq.heappush(self._heap, _Due(self._clock() + interval, next(self._order), lease))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

        def end() -> None:
            lease.ended = True  # read by the renewer under no lock: a stale read renews once more

        return end

    def _next(self) -> _Lease:
        """Wait for the earliest lease that is due (the lock is held)."""
        while True:
            while self._heap and self._heap[0].lease.ended:
                heapq.heappop(self._heap)
            wait = None if not self._heap else self._heap[0].at - self._clock()
            if wait is not None and wait <= 0:
                return heapq.heappop(self._heap).lease
            self._cond.wait(timeout=wait if wait is not None else 60.0)

    def _serve(self) -> None:
        while True:
            with self._cond:
                lease = self._next()
            if lease.ended:
                continue
            try:
                ok = lease.renew()
            except StoreError as exc:  # the store is away (an outage): try again, backing off
                if not lease.ended:  # (ended meanwhile: its run is over, its store may be
                    self._failed(lease, exc)  # closed; that is no outage to report)
                continue
            except Exception:  # not an outage: the next commit will say what is wrong
                continue
            lease.retry = 0.0
            if ok and self._failing:
                self._failing = False
                log.warning("lease renewals succeed again")
            if ok:
                self._again(lease, lease.interval)

    def _failed(self, lease: _Lease, exc: Exception) -> None:
        if not self._failing:
            self._failing = True
            log.warning("lease renewals failing (%s: %s); trying again until the store is back",
                        type(exc).__name__, exc)
        lease.retry = min(lease.interval, max(FIRST_RETRY, lease.retry * 2))
        self._again(lease, lease.retry)

    def _again(self, lease: _Lease, after: float) -> None:
        if lease.ended:
            return
        with self._cond:
            heapq.heappush(self._heap, _Due(self._clock() + after, next(self._order), lease))


_renewer: Renewer | None = None
_lock = threading.Lock()


def renewer() -> Renewer:
    """This process's one renewer (made on first use; ``time.monotonic`` paces it)."""
    global _renewer
    with _lock:
        if _renewer is None:
            import time

            _renewer = Renewer(time.monotonic)
        return _renewer
