"""Hand runs to a fixed set of worker threads: never one run twice at once, and at most
``limits[flow]`` runs of a flow at once.

Short resumes run one at a time; a run that has taken longer than ``overlap_after``
seconds (it waits on a tool, a model, a slow disk) lets one more worker start. A burst
of short resumes on several threads at once is slower than on one on a 2-core machine:
each is mostly Python, so the threads only pass the GIL to one another (bide bench
watch: 325–409 ms for 200 decisions on four workers, 204–258 ms on one), while runs
that wait overlap as before, up to ``workers`` at once. ``overlap_after=0``: every
worker takes runs at once.

The watcher's inbox loop and its rescans ``offer`` runs; a worker takes the oldest
offer whose flow is under its limit. A run offered while a worker has it is
offered again when that worker is done (it may have paused and been decided
meanwhile), not run twice at once. Within one process this set of run ids is the
guard; between processes the run's lease is.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping

Work = Callable[[str], None]
OVERLAP_AFTER = 0.025  # seconds a resume runs before another worker may start one


class Dispatcher:
    """N named worker threads taking run ids from one queue (see the module docstring)."""

    def __init__(self, work: Work, *, workers: int, limits: Mapping[str, int] | None = None,
                 log: Callable[[str], None] = print, name: str = "bide-worker",
                 overlap_after: float = OVERLAP_AFTER) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a whole number of at least 1, not {workers!r}")
        if isinstance(overlap_after, bool) or not isinstance(overlap_after, int | float) or \
                not overlap_after >= 0:
            raise ValueError(f"overlap_after must be a number of seconds of at least 0, "
                             f"not {overlap_after!r}")
        self.overlap_after = float(overlap_after)
        self._started: dict[str, float] = {}  # run id -> when its worker took it
        self.limits = check_limits(limits or {})
        self._work, self._log = work, log
        self._cond = threading.Condition()
        self._queued: dict[str, str] = {}  # run id -> flow, oldest first
        self._busy: dict[str, str] = {}  # run id -> flow, held by a worker now
        self._again: set[str] = set()  # offered while busy: queue again when done
        self._per_flow: Counter[str] = Counter()
        self._closing = False
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
                         for i in range(workers)]

    @property
    def workers(self) -> int:
        return len(self._threads)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def offer(self, run_id: str, flow: str) -> bool:
        """Queue ``run_id`` unless it is queued already; False if it was not queued now."""
        with self._cond:
            if self._closing or run_id in self._queued:
                return False
            if run_id in self._busy:
                self._again.add(run_id)
                return False
            self._queued[run_id] = flow
            self._cond.notify()  # one worker is enough: all are alike (fewer GIL hand-offs)
            return True

    def busy(self) -> set[str]:
        """The runs workers hold right now."""
        with self._cond:
            return set(self._busy)

    def idle(self) -> bool:
        """Nothing queued and no worker busy."""
        with self._cond:
            return not self._queued and not self._busy

    def close(self, timeout: float) -> bool:
        """Take no more runs; wait up to ``timeout`` seconds for the workers to finish theirs.

        Returns:
            True if every worker has stopped.
        """
        with self._cond:
            self._closing = True
            self._queued.clear()
            self._cond.notify_all()
        for t in self._threads:
            if t.ident is not None:
                t.join(timeout)
        return not any(t.is_alive() for t in self._threads)

    def _room(self, now: float) -> float:
        """0 if a worker may take a run now, else seconds until one may (the lock is held):
        one run at a time, one more for each run that has gone on past ``overlap_after``."""
        if not self._busy or self.overlap_after == 0:
            return 0.0
        long_ago = now - self.overlap_after
        if len(self._busy) <= sum(1 for t in self._started.values() if t <= long_ago):
            return 0.0
        soonest = min(t for t in self._started.values() if t > long_ago)
        return max(1e-3, soonest + self.overlap_after - now)

    def _take(self) -> tuple[str, str] | None:
        """The oldest queued run whose flow is under its limit (the lock is held)."""
        if self._room(time.monotonic()) > 0:
            return None
        for run_id, flow in self._queued.items():
            if self._per_flow[flow] < self.limits.get(flow, len(self._threads)):
                del self._queued[run_id]
                self._busy[run_id] = flow
                self._per_flow[flow] += 1
                self._started[run_id] = time.monotonic()
                return run_id, flow
        return None

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (taken := self._take()) is None:
                    # woken by offer/finish, or when a busy run has gone on long enough to
                    # let one more start; the 1 s timeout is a guard
                    wait = self._room(time.monotonic()) if self._queued else 0.0
                    self._cond.wait(timeout=min(1.0, wait) if wait > 0 else 1.0)
                if self._closing or taken is None:
                    return
            run_id, flow = taken
            try:
                self._work(run_id)
            except Exception as exc:  # a store error, a bug: this run's worker logs it, serves on
                self._log(f"run {run_id}: worker error, left for the next rescan: "
                          f"{type(exc).__name__}: {exc}")
            finally:
                self._done(run_id, flow)

    def _done(self, run_id: str, flow: str) -> None:
        with self._cond:
            del self._busy[run_id]
            self._started.pop(run_id, None)
            self._per_flow[flow] -= 1
            if run_id in self._again and not self._closing:
                self._queued[run_id] = flow
            self._again.discard(run_id)
            self._cond.notify()


def check_limits(limits: Mapping[str, int]) -> dict[str, int]:
    """Per-flow limits as given, or ValueError naming the bad one."""
    out = {}
    for flow, n in limits.items():
        if not isinstance(flow, str) or not flow:
            raise ValueError(f"a concurrency limit needs a flow name, not {flow!r}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"the concurrency limit of flow {flow!r} must be a whole number "
                             f"of at least 1, not {n!r}")
        out[flow] = n
    return out
