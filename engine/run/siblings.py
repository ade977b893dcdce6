"""A fan-out superstep's sync tasks, whose held outputs the waiting thread watches.

A finished task's output waits up to a bound for its siblings, to ride in the
checkpoint that follows (one commit for the superstep). It used to wait in its
own thread, on a condition the last sibling woke: with four small nodes, three
threads went to sleep and woke again every superstep (about ten more context
switches than the same superstep run in memory, the most of a fan-out's extra
cost). Now a finished task returns at once, and the thread that waits for the
superstep anyway (the executor's) commits a held output alone once its bound
has passed while a sibling still runs: the same outputs are committed alone,
at the same times, by one thread that was waiting already.

That thread first runs the superstep's last task itself (one thread fewer to
wake), then sleeps until every task has returned, waking before only when a
held output comes due. Its first sleep is one bound long and nobody wakes it
for a held output (small nodes all finish within it); after that, the first
output held wakes it, so it keeps that output's bound exactly. While it still
runs its own task, a task that finishes waits for its siblings itself, as
every task used to, so no held output ever waits longer than its bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from .task_threads import TaskThreads


class Result(Protocol):
    task: str


T = TypeVar("T")
R = TypeVar("R", bound=Result)

_NOT_YET = object()  # an outcome slot whose call has not returned


class Siblings(Generic[R]):
    """The countdown of one superstep's ``n`` sync tasks (``_Countdown``'s duties).

    ``commit_alone(result)`` commits a held output as its task's pending write
    (setting its ``seq``); it runs in the waiting thread and must not raise.
    """

    def __init__(self, n: int, bound: float, commit_alone: Callable[[R], None]) -> None:
        self.n, self.bound, self._commit_alone = n, bound, commit_alone
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._finished: dict[str, float] = {}  # task -> when it finished (counted once)
        self._all_at: float | None = None  # when the last task finished
        self._held: dict[str, tuple[float, R]] = {}  # output held while siblings run
        self._outcomes: list[Any] = []
        self._ended = 0  # calls that returned or raised
        self._told = False  # the waiting thread sleeps without a deadline: wake it
        self._waiter = 0  # the waiting thread (it runs one task itself first)
        self._watching = False  # it watches held outputs (its own task returned)
        self._alone = 0  # tasks watching their own held output (the waiter was busy)

    # -- in the task threads (the interface ``tasks._finish`` uses) ----------
    def last(self, task: str) -> bool:
        """Count ``task`` as finished with nothing held; True if none still runs."""
        with self._lock:
            if task not in self._finished:
                self._finished[task] = time.monotonic()
                if len(self._finished) == self.n:
                    self._all_at = time.monotonic()
                    if self._alone:
                        self._changed.notify_all()
            return len(self._finished) == self.n

    def together(self, task: str) -> bool:
        """Count ``task`` as finished; True: its output is held (a sibling may still be
        running; if it outlasts the bound, the waiting thread commits the output)."""
        self.last(task)
        return True

    def hold(self, result: R) -> None:
        """``result``'s output is held: watch its bound if a sibling still runs.

        The waiting thread watches it; while that thread still runs its own task,
        this task waits for its siblings itself (as every task used to), and
        commits its output alone if they outlast its bound.
        """
        with self._lock:
            if len(self._finished) == self.n:
                return
            at = self._finished[result.task]
            if self._watching or threading.get_ident() == self._waiter:
                self._held[result.task] = (at, result)
                if self._told:  # (all: a task watching its own bound may wait here too)
                    self._changed.notify_all()
                return
            self._alone += 1
            try:
                while len(self._finished) < self.n:
                    rest = at + self.bound - time.monotonic()
                    if rest <= 0:
                        break
                    self._changed.wait(rest)
                else:
                    return
            finally:
                self._alone -= 1
        self._commit_alone(result)

    # -- in the thread that waits for the superstep -------------------------
    def run(self, threads: TaskThreads, fn: Callable[[T], R], items: Sequence[T],
            workers: int) -> list[R]:
        """``fn`` over ``items`` in ``threads``; results in order, once every call ended.

        Raises:
            The first exception a call raised (in order), as ``TaskThreads.map``.
        """
        self._outcomes = [_NOT_YET] * len(items)
        self._waiter = threading.get_ident()

        def call(index: int) -> None:
            try:
                outcome: Any = fn(items[index])
            except BaseException as exc:  # noqa: BLE001 - raised again in the waiting thread
                outcome = exc
            with self._lock:
                self._outcomes[index] = outcome
                self._ended += 1
                if self._ended == len(items):
                    self._changed.notify_all()

        mine = len(items) - 1  # this thread runs the last task: one thread wakes fewer
        threads.start(call, range(mine), workers)
        try:
            call(mine)
            self._watch()
        except BaseException as exc:  # a Ctrl-C: every call still ends (and commits) first
            with self._lock:
                if self._outcomes[mine] is _NOT_YET:
                    self._outcomes[mine] = exc
                # counted again: a Ctrl-C between ``call``'s two lines set the outcome but
                # left it uncounted, and ``_watch`` would wait for it forever
                self._ended = sum(o is not _NOT_YET for o in self._outcomes)
            self._watch()
            raise
        for outcome in self._outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return list(self._outcomes)

    def _watch(self) -> None:
        """Until every call ended: commit each held output whose bound passed before
        its last sibling finished (at once if it passed while this thread waited), judged
        against that finish once every task finished, not against when this thread woke."""
        first = True
        with self._lock:
            self._watching = True
            while True:
                ended = self._ended == len(self._outcomes)
                # the last sibling's finish, once known (its call may not have returned)
                until = self._all_at if ended or self._all_at is not None else time.monotonic()
                due = [] if until is None else [
                    t for t, (at, _) in self._held.items() if at + self.bound <= until]
                if due:
                    results = [self._held.pop(t)[1] for t in due]
                    self._lock.release()
                    try:
                        for result in results:
                            self._commit_alone(result)
                    finally:
                        self._lock.acquire()
                    continue
                if ended:
                    return
                now = time.monotonic()
                if self._all_at is not None:  # nothing comes due now: the last call wakes it
                    self._changed.wait()
                elif self._held:
                    self._changed.wait(min(at for at, _ in self._held.values()) + self.bound
                                       - now)
                elif first:  # small nodes end within a bound: no wake-up for their outputs
                    first = False
                    self._changed.wait(self.bound)
                else:
                    self._told = True
                    self._changed.wait()
                    self._told = False
