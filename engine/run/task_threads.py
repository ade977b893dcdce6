"""The threads a run's parallel sync tasks run in, kept from one superstep to the next.

Starting a thread costs more than a ``fast`` commit (the new thread must get
the GIL to say it started, and a fan-out superstep started one per task): a
fan-out-4 flow spent over a third of its superstep starting and joining the
four threads it had just used. A run's worker keeps one pool for its whole
time on the run and closes it when it lets the run go; a superstep that needs
more threads than the pool has gets a larger pool.

``start`` (a fan-out's siblings, engine/run/siblings.py) hands its calls to threads
of its own through one queue, without a ``Future`` each: the caller waits its
own way, so a future's lock, condition and result were made and set for nobody
(about a tenth of a fan-out-4 superstep in fast mode); more threads are added
when a superstep needs more. ``map`` (tasks that queue for a node's slots)
keeps a ``ThreadPoolExecutor``; ``close`` lets both go.
"""

from __future__ import annotations

import concurrent.futures
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
_Calls = queue.SimpleQueue[tuple[Callable[[object], object], object] | None]  # (None: stop)


class TaskThreads:
    """A pool of named threads for one run's sync tasks (``bide-<run id>_N``)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0
        self.pools = 0  # pools made so far: a fan-out run keeps one (what a test counts)
        self._calls: _Calls = queue.SimpleQueue()  # ``start``'s calls (None: stop)
        self._started: list[threading.Thread] = []

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
        (engine/run/siblings.py waits its own way: one wake-up when the last call ends).
        ``fn`` handles its own errors: one that escapes is reported, as a thread's."""
        if len(self._started) < workers:
            self._add(workers)
        put = self._calls.put
        for item in items:
            put((fn, item))  # type: ignore[arg-type]

    def _add(self, workers: int) -> None:
        if not self._started:
            self.pools += 1
        while len(self._started) < workers:
            thread = threading.Thread(target=_serve, args=(self._calls,), daemon=True,
                                      name=f"bide-{self._name}_{len(self._started)}")
            thread.start()
            self._started.append(thread)

    def _with(self, workers: int) -> ThreadPoolExecutor:
        if self._pool is None or workers > self._size:
            self.close()
            self._pool = ThreadPoolExecutor(max_workers=workers,
                                            thread_name_prefix=f"bide-{self._name}")
            self._size = workers
            self.pools += 1
        return self._pool

    def close(self) -> None:
        """Let the threads go (they are idle: every ``map`` waited for its calls, and
        whoever ``start``ed calls waited for them its own way)."""
        # one stop, passed on by each thread that sees it: a thread that started but was
        # never listed (a Ctrl-C inside ``Thread.start``) stops too
        self._calls.put(None)
        for thread in self._started:
            thread.join()
        self._calls, self._started = queue.SimpleQueue(), []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool, self._size = None, 0


def _serve(calls: _Calls) -> None:
    """A ``start`` thread: run calls until the stop (None), which it passes on."""
    get = calls.get
    while (call := get()) is not None:
        try:
            call[0](call[1])
        except BaseException:  # noqa: BLE001 - the thread serves on; as an ended thread's
            threading.excepthook(threading.ExceptHookArgs(
                (*sys.exc_info(), threading.current_thread())))
    calls.put(None)
