"""Running one superstep's tasks: concurrently, with retries, committing each output.

Sync nodes run in threads (inline when alone), async nodes on one event loop:
at most ``node.concurrency`` tasks of a node at once (a map's Sends queue for a slot).
the caller's under ``engine.astart``, else one of their own (in a helper thread
when the calling thread already runs a loop).
A finished task's output waits up to ``SIBLING_BOUND`` for its siblings: if
they all finish within it, every output rides in the checkpoint that follows
(one commit for the superstep, as a chain's). Else the waiting task commits its
pending write alone, so a crash or a failing sibling never costs more than the
bound's worth of a finished task's work (a lost output only means the node runs
again; its tool calls' effects are guarded by the intent log). While tasks still
queue for a slot, a finished one commits at once: its siblings are far away.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ...formats import PendingWrite
from ...formats.records import node_of
from ..base import faults
from ..base.errors import Nondeterminism, Paused, StaleLease, StateNotSerializable, StoreError
from ..base.offload import off_loop, run_coroutine
from .context import NodeContext
from .send import Task
from .siblings import Siblings
from .state import Op, to_ops
from .step import StepScope
from .task_threads import TaskThreads

SIBLING_BOUND = 0.02  # seconds a finished task's output waits for its siblings to finish

# Failures that a retry cannot fix: do not burn retries on them.
_NOT_RETRIED = (Nondeterminism, StateNotSerializable, StaleLease)


@dataclass(slots=True)
class TaskResult:
    task: str
    node: str
    kind: str  # "ok" | "fail" | "pause" | "lost"
    ops: list[Op] = field(default_factory=list)
    seq: int | None = None
    error: str | None = None
    pause: Paused | None = None
    exc: BaseException | None = None
    calls: dict[int, Any] = field(default_factory=dict)  # NodeContext.results


class _Countdown:
    """Which tasks finish together: their outputs may ride with the checkpoint that follows."""

    def __init__(self, n: int, bound: float | None = None,
                 backlog: dict[str, int] | None = None) -> None:
        self.n, self.left, self.done = n, n, set[str]()
        # per node, tasks that wait for a slot (beyond its concurrency): while any
        # wait, a finished task does not wait for its siblings (they are far away)
        self.backlog = {k: v for k, v in (backlog or {}).items() if v > 0}
        self.lock = threading.Lock()
        self.all_done = threading.Condition(self.lock)
        self.bound = SIBLING_BOUND if bound is None else bound

    def last(self, task: str) -> bool:
        """Count ``task`` as finished (once); True if no other task is still running."""
        with self.lock:
            return self._count(task)

    def together(self, task: str) -> bool:
        """Count ``task`` as finished; True if every task finished within the bound.

        A task that is not the last waits up to ``bound`` for the others; False
        tells it to commit its own output (a sibling is slow).
        """
        with self.lock:
            if self._count(task):
                self.all_done.notify_all()
                return True
            if self.backlog:
                return False
            deadline = time.monotonic() + self.bound
            while self.left:
                rest = deadline - time.monotonic()
                if rest <= 0:
                    return False
                self.all_done.wait(rest)
            return True

    def hold(self, result: TaskResult) -> None:
        """``result``'s output is held (the task itself waited for its siblings)."""

    def _count(self, task: str) -> bool:
        if task not in self.done:
            self.done.add(task)
            self.left -= 1
            node = node_of(task)
            if node in self.backlog:  # its slot goes to a waiting task
                self.backlog[node] -= 1
                if not self.backlog[node]:
                    del self.backlog[node]
            if self.left == 0:
                self.all_done.notify_all()
        return self.left == 0


class _Alone(_Countdown):
    """A superstep of one sync task (a chain's): no sibling to wait for, no lock to make."""

    def __init__(self) -> None:
        self.n = self.left = 1

    def last(self, task: str) -> bool:
        return True

    def together(self, task: str) -> bool:
        return True


_ALONE = _Alone()  # it keeps no state: one serves every chain superstep
Left = _Countdown | Siblings[TaskResult]  # what counts a superstep's finished tasks


def run_tasks(scope: StepScope, tasks: list[Task]) -> list[TaskResult]:
    """Run a superstep's tasks; results in the given order.

    Outputs of tasks that finished within ``SIBLING_BOUND`` of the last one are
    returned uncommitted (``seq`` None) for the executor to commit with the
    checkpoint, or in one commit if no checkpoint follows; the others commit
    their pending writes themselves.
    """
    if not tasks:
        return []
    nodes = scope.flow.nodes
    if len(tasks) == 1 and not nodes[tasks[0].node].is_async:  # a chain's superstep
        return [_run_sync(scope, _ALONE, tasks[0])]
    if any(nodes[t.node].is_async for t in tasks):
        left = _Countdown(len(tasks), backlog=_backlog(scope, tasks))
        return run_coroutine(lambda: _gather(scope, left, tasks))
    counts = _counts(tasks)  # once a superstep (it was counted twice)
    backlog = _backlog(scope, tasks, counts)
    workers = sum(min(n, scope.flow.nodes[name].concurrency) for name, n in counts.items())
    if not any(n > 0 for n in backlog.values()):  # every task has a thread at once
        return _watched(scope, tasks, workers)
    left = _Countdown(len(tasks), backlog=backlog)
    slots = {name: threading.BoundedSemaphore(n) for name, n in _slots(scope, tasks).items()}

    def bounded(task: Task) -> TaskResult:
        with slots[task.node]:
            return _run_sync(scope, left, task)

    return _mapped(scope, bounded, tasks, workers)


def _watched(scope: StepScope, tasks: list[Task], workers: int) -> list[TaskResult]:
    """Sync tasks that all have a thread: held outputs watched by this thread
    (engine/run/siblings.py), not by their own threads waiting for each other."""
    left = Siblings[TaskResult](len(tasks), SIBLING_BOUND, _committer(scope))
    threads = scope.threads if scope.threads is not None else TaskThreads(scope.run_id)
    try:
        return left.run(threads, lambda task: _run_sync(scope, left, task), tasks,
                        max(1, workers - 1))  # (this thread runs one task itself)
    finally:
        if threads is not scope.threads:
            threads.close()


def _committer(scope: StepScope) -> Callable[[TaskResult], None]:
    """Commit a held output whose bound passed, from the waiting thread.

    What the task's own thread did with an error there, it records on the result:
    the store's trouble loses the lease's run (``lost``), anything else fails it.
    """
    def commit(result: TaskResult) -> None:
        try:
            result.seq = _commit_alone(scope, result.task, result.node, result.ops)
        except StoreError as exc:
            result.kind, result.exc = "lost", exc
        except Exception as exc:  # noqa: BLE001 - the task's failure, as in its thread
            result.kind = "fail"
            result.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    return commit


def _mapped(scope: StepScope, fn: Callable[[Task], TaskResult], tasks: list[Task],
            workers: int) -> list[TaskResult]:
    """``fn`` over ``tasks`` in the run's threads (or a pool of this superstep's own)."""
    if scope.threads is not None:  # the run's pool, kept across supersteps
        return scope.threads.map(fn, tasks, workers)
    threads = TaskThreads(scope.run_id)
    try:
        return threads.map(fn, tasks, workers)
    finally:
        threads.close()


async def arun_tasks(scope: StepScope, tasks: list[Task]) -> list[TaskResult]:
    """``run_tasks`` on the caller's event loop: async nodes run there, the rest off it."""
    if not tasks:
        return []
    return await _gather(scope, _Countdown(len(tasks), backlog=_backlog(scope, tasks)), tasks)


def _counts(tasks: list[Task]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.node] = counts.get(t.node, 0) + 1
    return counts


def _backlog(scope: StepScope, tasks: list[Task], counts: dict[str, int] | None = None
             ) -> dict[str, int]:
    """Per node, how many of its tasks must wait for a slot at first."""
    counts = _counts(tasks) if counts is None else counts
    return {name: n - scope.flow.nodes[name].concurrency for name, n in counts.items()}


def _slots(scope: StepScope, tasks: list[Task]) -> dict[str, int]:
    """How many tasks of each node may run at once (its ``concurrency``)."""
    return {name: scope.flow.nodes[name].concurrency for name in _counts(tasks)}


async def _gather(scope: StepScope, left: _Countdown, tasks: list[Task]) -> list[TaskResult]:
    slots = {name: asyncio.Semaphore(n) for name, n in _slots(scope, tasks).items()}

    async def one(task: Task) -> TaskResult:
        async with slots[task.node]:
            if scope.flow.nodes[task.node].is_async:
                return await _run_async(scope, left, task)
            return await off_loop(_run_sync, scope, left, task)

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def _state_of(scope: StepScope, task: Task) -> MappingProxyType[str, Any]:
    """What the node sees as ``state``: its Send's arg, or the run's state."""
    if task.arg is not None:
        faults.point("map_task_started")
        return MappingProxyType(task.arg)
    return MappingProxyType(scope.state)


def _run_sync(scope: StepScope, left: Left, task: Task) -> TaskResult:
    name = task.node
    node = scope.flow.nodes[name]
    attempt = 0
    while True:
        ctx = NodeContext(scope, name, task.id, attempt)
        try:
            update = _closing(ctx, node.fn, scope, task)
            return _finish(scope, left, task.id, name, update, ctx.results)
        except BaseException as exc:  # noqa: BLE001 - sorted below; pauses are not errors
            result = _failed(left, task.id, name, exc, attempt, node.retries)
        if result is not None:
            return result
        time.sleep(node.retry_backoff * (2 ** attempt))
        attempt += 1


async def _run_async(scope: StepScope, left: _Countdown, task: Task) -> TaskResult:
    name = task.node
    node = scope.flow.nodes[name]
    attempt = 0
    while True:
        ctx = NodeContext(scope, name, task.id, attempt)
        try:
            try:
                if scope.trace is None:
                    update = await node.fn(_state_of(scope, task), ctx)
                else:
                    with scope.trace.node(name, task.id, attempt):  # engine/run/tracing.py
                        update = await node.fn(_state_of(scope, task), ctx)
            finally:
                ctx.close()
            return await off_loop(_finish, scope, left, task.id, name, update, ctx.results)
        except BaseException as exc:  # noqa: BLE001 - sorted below
            result = _failed(left, task.id, name, exc, attempt, node.retries)
        if result is not None:
            return result
        await asyncio.sleep(node.retry_backoff * (2 ** attempt))
        attempt += 1


def _closing(ctx: NodeContext, fn: Any, scope: StepScope, task: Task) -> Any:
    """Call a sync node; its ctx closes when it (or a fault point before it) returns or raises."""
    try:
        if scope.trace is None:
            return fn(_state_of(scope, task), ctx)
        with scope.trace.node(ctx.node, task.id, ctx.attempt):  # engine/run/tracing.py
            return fn(_state_of(scope, task), ctx)
    finally:
        ctx.close()


def _finish(scope: StepScope, left: Left, task: str, name: str, update: Any,
            calls: dict[int, Any]) -> TaskResult:
    result = TaskResult(task, name, "ok", to_ops(scope.flow, name, update), calls=calls)
    if not scope.policy.pending_writes:
        left.last(task)
    elif left.together(task):
        if left.n > 1:
            faults.point("sibling_output_held")
            left.hold(result)  # after the point: a task failed there holds no output
    else:
        result.seq = _commit_alone(scope, task, name, result.ops)
    return result


def _commit_alone(scope: StepScope, task: str, name: str, ops: list[Op]) -> int:
    """Commit a finished task's output as its pending write (with its held outcomes)."""
    record = PendingWrite(run_id=scope.run_id, task=task, superstep=scope.superstep,
                          node=name, ops=ops, at=scope.clock())
    seq = scope.commit([record], task=task)[0]
    faults.point("after_pending_write")
    return seq


def _failed(left: Left, task: str, name: str, exc: BaseException, attempt: int,
            retries: int) -> TaskResult | None:
    """A result for a task that stopped, or None to retry it."""
    result = _stopped(task, name, exc, attempt, retries)
    if result is not None:
        left.last(task)
    return result


def _stopped(task: str, name: str, exc: BaseException, attempt: int, retries: int
             ) -> TaskResult | None:
    if isinstance(exc, Paused):
        # Not its traceback: the frames it holds keep their locals alive, such as a
        # read transaction (an LMDB reader slot each; 300 paused items used them all).
        return TaskResult(task, name, "pause", pause=exc.with_traceback(None))
    # A lost lease, a full disk, a lost connection: the store's trouble, not the node's.
    # Stop, write nothing (a FAILED record would end the run for good); it resumes later.
    if isinstance(exc, StoreError):
        return TaskResult(task, name, "lost", exc=exc)
    if not isinstance(exc, Exception):
        raise exc  # KeyboardInterrupt, SystemExit: not ours to turn into a failure
    if attempt < retries and not isinstance(exc, _NOT_RETRIED):
        return None
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return TaskResult(task, name, "fail", error=text)  # the text, not the frames (above)
