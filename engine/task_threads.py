"""The threads a run's parallel sync tasks run in, kept from one superstep to the next.

Starting a thread costs more than a ``fast`` commit (the new thread must get
the GIL to say it started, and a fan-out superstep started one per task): a
fan-out-4 flow spent over a third of its superstep starting and joining the
four threads it had just used. A run's worker keeps one pool for its whole
time on the run and closes it when it lets the run go; a superstep that needs
more threads than the pool has gets a larger pool.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class TaskThreads:
    """A pool of named threads for one run's sync tasks (``bide-<run id>_N``)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0
        self.pools = 0  # pools made so far: a fan-out run keeps one (what a test counts)

    def map(self, fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
        """``fn`` over ``items`` on up to ``workers`` threads; results in order.

        Every call ends before this returns or raises (the first exception in
        order), as when leaving a ``ThreadPoolExecutor`` block: a Ctrl-C while
        waiting still lets the tasks finish (and commit) before the run stops.
        """
        pool = self._with(workers)
        futures = [pool.submit(fn, item) for item in items]
        try:
            return [f.result() for f in futures]
        except BaseException:  # only then may a call still run: a full list means all ended
            concurrent.futures.wait(futures)
            raise

    def start(self, fn: Callable[[T], object], items: Iterable[T], workers: int) -> None:
        """Start ``fn`` over ``items`` on up to ``workers`` threads, not waiting for them
        (engine/siblings.py waits its own way: one wake-up when the last call ends)."""
        pool = self._with(workers)
        for item in items:
            pool.submit(fn, item)

    def _with(self, workers: int) -> ThreadPoolExecutor:
        if self._pool is None or workers > self._size:
            self.close()
            self._pool = ThreadPoolExecutor(max_workers=workers,
                                            thread_name_prefix=f"bide-{self._name}")
            self._size = workers
            self.pools += 1
        return self._pool

    def close(self) -> None:
        """Let the threads go (they are idle: every ``map`` waited for its calls)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool, self._size = None, 0
