"""Group commit: concurrent writers of one process share one write transaction.

A durable LMDB commit is two flushes whatever it holds, and only one write
transaction runs at a time. So the threads of a process that commit at once
(sibling tasks, different runs) queue their requests; the first one in becomes
the *leader*, takes every request queued so far as one batch and commits it
with one pair of flushes, while requests arriving meanwhile queue up for the
next batch. When the batch is durable the leader hands the lead to the oldest
queued request (its own thread runs the next batch) and returns; the others
wake with their own outcome. A caller alone is its own leader at once: no
added wait.

Each request has its own wake-up (a lock its thread waits on), so ending a
batch wakes exactly its callers and the next leader. One shared condition
woke every waiting thread at each batch, and each woken thread had to take
the GIL only to find it was not its turn: with eight runs, half the threads
woke for nothing at every batch (a thread switch costs ~30 us here).

How a batch is run (each request in its own nested transaction, so that one
refused request never takes the others with it) is the backend's business:
``GroupCommit`` only queues, elects and hands back outcomes.

A backend whose commit becomes durable only after a last flush (LMDB's meta
page, ``durable_point.py``) returns that wait from ``run_batch``: the leader
hands the lead on *first*, so the next batch runs under the writer lock while
this one's flush is on its way, and only then wakes its callers. Work and
flushes overlap; no caller hears of a commit before it is durable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..base.errors import StoreError

T = TypeVar("T")
_POLL = 1.0  # seconds between checks that the leader's thread is still alive


class Request(Generic[T]):
    """One caller's body and, once its batch is done, its own outcome."""

    __slots__ = ("body", "thread", "result", "exc", "settled", "done", "lead", "wake")

    def __init__(self, body: Callable[[Any], T]) -> None:
        self.body, self.thread = body, threading.current_thread()
        self.result: T | None = None
        self.exc: BaseException | None = None
        self.settled = False  # the backend set an outcome (it may set it again on a retry)
        self.done = False  # the outcome is final and the caller may read it (queue's lock)
        self.lead = False  # this request's thread runs the next batch
        self.wake = threading.Lock()  # held until the request is done or leads: its thread
        self.wake.acquire()  # waits on it (released by the thread that ends the batch)

    def succeed(self, result: T) -> None:
        self.result, self.exc, self.settled = result, None, True

    def fail(self, exc: BaseException) -> None:
        self.result, self.exc, self.settled = None, exc, True

    def outcome(self) -> T:
        if self.exc is not None:
            raise self.exc
        return self.result  # type: ignore[return-value]


Batch = list[Request[Any]]
Finish = Callable[[], None] | None  # waits until the batch is durable; fails its requests


class GroupCommit:
    """The leader/follower queue in front of one store's write transactions.

    Args:
        run_batch: runs a batch in ONE write transaction and settles each request
            (``succeed`` / ``fail``) before returning; it raises only for what no
            request's outcome records (an interrupt, a bug). It may return a
            ``Finish``: called after the lead is handed on, it returns once the
            batch is durable, failing (itself) each request whose commit is not.
        name: what is committed to, named in errors.
    """

    def __init__(self, run_batch: Callable[[Batch], Finish], name: str) -> None:
        self._run_batch, self._name = run_batch, name
        self._lock = threading.Lock()  # the queue and the lead
        self._queue: Batch = []
        self._leading: threading.Thread | None = None  # whose thread runs (or will run) a batch

    def submit(self, body: Callable[[Any], T]) -> T:
        """Run ``body(txn)`` in the next batch; return its result once it is durable.

        Raises:
            Whatever ``body`` raised, or the batch's own failure (``StoreFull``,
            ``DurabilityLost``...): this request's own exception object, never another's.
        """
        request: Request[T] = Request(body)
        with self._lock:
            self._queue.append(request)
            if self._leading is None:  # nobody is committing: lead at once, no wait
                request.lead, self._leading = True, request.thread
        batch: Batch = []
        try:
            while True:
                if not request.lead:
                    request.wake.acquire(timeout=_POLL)
                with self._lock:
                    if request.done:
                        return request.outcome()
                    if request.lead:
                        batch, self._queue = self._queue, []
                        break
                    self._check_leader(request)
        except BaseException:  # an interrupt while waiting: leave no lead or body behind
            self._abandon(request, batch)
            raise
        self._lead(request, batch)
        return request.outcome()

    def _abandon(self, request: Request[Any], batch: Batch) -> None:
        """A caller left ``submit`` while its request waited (an interrupt). A request
        still queued leaves the queue (its body never runs); one handed the lead passes
        it on (with the batch it took, if it took one), else every later commit of the
        process would wait for a thread that no longer leads (it is alive, so
        ``_check_leader`` would never step in). A request already in a running batch is
        settled by that batch; nobody reads it."""
        following: Request[Any] | None = None
        with self._lock:
            if request in self._queue:
                self._queue.remove(request)
            self._queue[:0] = [r for r in batch if r is not request]
            if request.lead and self._leading is request.thread:
                following = self._hand_lead()
        if following is not None:
            following.wake.release()

    def _lead(self, mine: Request[Any], batch: Batch) -> None:
        """Run one batch, then settle it and pass the lead on, whatever happened.

        A batch that raised (an interrupt, the map that could not grow) may have
        settled some requests before its transaction was abandoned: the backend
        fails those itself (it alone knows whether it committed); a request it left
        unsettled learns that the batch stopped.
        """
        following: Request[Any] | None = None
        finish: Finish = None
        try:
            finish = self._run_batch(batch)
        except BaseException as exc:  # noqa: BLE001 - every caller of the batch learns of it
            for request in batch:
                if not request.settled:
                    request.fail(exc if request is mine else _unknown(self._name, exc))
            if mine.exc is not exc:
                raise  # an interrupt after this thread's own outcome was set still reaches it
        finally:
            with self._lock:
                following = self._hand_lead()
            if following is not None:
                following.wake.release()  # the next batch runs while this one's flush does
            try:
                if finish is not None:
                    _finish(finish, batch, mine, self._name)
            finally:
                with self._lock:
                    for request in batch:
                        request.done = True
                for request in batch:
                    if request is not mine:
                        request.wake.release()

    def _hand_lead(self) -> Request[Any] | None:
        """The lead is given up (the lock held): the oldest queued request's thread runs
        the next batch. Returns that request, to wake once the lock is released."""
        self._leading = None
        if not self._queue:
            return None
        following = self._queue[0]
        following.lead, self._leading = True, following.thread
        return following

    def _check_leader(self, request: Request[Any]) -> None:
        """A follower whose leader's thread is gone without settling it gets an error,
        not an endless wait (a leader always settles its batch; this is a net)."""
        leader = self._leading
        if request.done or request.lead or leader is None or leader.is_alive():
            return
        self._queue.remove(request)
        request.fail(StoreError(f"the thread committing to {self._name} for this request "
                                "died before it finished; the commit's outcome is unknown"))
        request.done = True


def _finish(finish: Callable[[], None], batch: Batch, mine: Request[Any], name: str) -> None:
    """Wait for the batch to be durable; an interrupt meanwhile leaves each of its
    commits unknown to its caller (the flush may or may not have happened)."""
    try:
        finish()
    except BaseException as exc:
        for request in batch:
            if request.exc is None:
                request.fail(exc if request is mine else _unknown(name, exc))
        raise


def run_alone(run_batch: Callable[[Batch], Finish], body: Callable[[Any], T]) -> T:
    """``body`` as a batch of its own, in this thread, without queueing."""
    request: Request[T] = Request(body)
    finish = run_batch([request])
    if finish is not None:
        _finish(finish, [request], request, "the store")
    return request.outcome()


def _unknown(name: str, exc: BaseException) -> StoreError:
    """What a follower gets when its batch stopped for a reason no outcome records."""
    error = StoreError(f"the batch committing to {name} with this request stopped "
                       f"({exc!r}); the commit's outcome is unknown")
    error.__cause__ = exc
    return error
