"""Running one superstep's tasks: concurrently, with retries, committing each output.

Sync nodes run in threads (inline when alone), async nodes on one event loop:
the caller's under ``engine.astart``, else one of their own (in a helper thread
when the calling thread already runs a loop).
Each finished task commits its pending write at once, so a crash or a failing
sibling never costs the work of a task that finished.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..formats import PendingWrite
from . import faults
from .context import NodeContext
from .errors import Nondeterminism, Paused, StaleLease, StateNotSerializable, StoreFull
from .offload import off_loop, run_coroutine
from .state import Op, to_ops

if TYPE_CHECKING:
    from .executor import Execution

# Failures that a retry cannot fix: do not burn retries on them.
_NOT_RETRIED = (Nondeterminism, StateNotSerializable, StaleLease)


@dataclass
class TaskResult:
    task: str
    node: str
    kind: str  # "ok" | "fail" | "pause" | "lost"
    ops: list[Op] = field(default_factory=list)
    seq: int | None = None
    error: str | None = None
    pause: Paused | None = None
    exc: BaseException | None = None


class _Countdown:
    """Which task finishes last: its output may ride with the checkpoint that follows."""

    def __init__(self, n: int) -> None:
        self.left, self.lock, self.done = n, threading.Lock(), set()

    def last(self, task: str) -> bool:
        """Count ``task`` as finished (once); True if no other task is still running."""
        with self.lock:
            if task not in self.done:
                self.done.add(task)
                self.left -= 1
            return self.left == 0


def run_tasks(ex: Execution, tasks: list[tuple[str, str]]) -> list[TaskResult]:
    """Run ``(task_id, node)`` pairs; results in the given order.

    Every task but the one that finishes last commits its pending write at once;
    the last one's output is returned uncommitted (``seq`` None) for the executor
    to commit with the checkpoint, or on its own if no checkpoint follows.
    """
    if not tasks:
        return []
    ex.countdown = _Countdown(len(tasks))
    nodes = [ex.flow.nodes[name] for _, name in tasks]
    if any(n.is_async for n in nodes):
        return run_coroutine(lambda: _gather(ex, tasks))
    if len(tasks) == 1:
        return [_run_sync(ex, *tasks[0])]
    with ThreadPoolExecutor(max_workers=min(len(tasks), 32)) as pool:
        return list(pool.map(lambda t: _run_sync(ex, *t), tasks))


async def arun_tasks(ex: Execution, tasks: list[tuple[str, str]]) -> list[TaskResult]:
    """``run_tasks`` on the caller's event loop: async nodes run there, the rest off it."""
    if not tasks:
        return []
    ex.countdown = _Countdown(len(tasks))
    return await _gather(ex, tasks)


async def _gather(ex: Execution, tasks: list[tuple[str, str]]) -> list[TaskResult]:
    async def one(task: str, name: str) -> TaskResult:
        if ex.flow.nodes[name].is_async:
            return await _run_async(ex, task, name)
        return await off_loop(_run_sync, ex, task, name)

    return list(await asyncio.gather(*(one(t, n) for t, n in tasks)))


def _run_sync(ex: Execution, task: str, name: str) -> TaskResult:
    node = ex.flow.nodes[name]
    attempt = 0
    while True:
        ctx = NodeContext(ex, name, task, attempt)
        try:
            update = _closing(ctx, node.fn, MappingProxyType(ex.state), ctx)
            return _finish(ex, task, name, update)
        except BaseException as exc:  # noqa: BLE001 - sorted below; pauses are not errors
            result = _failed(ex, task, name, exc, attempt, node.retries)
        if result is not None:
            return result
        time.sleep(node.retry_backoff * (2 ** attempt))
        attempt += 1


async def _run_async(ex: Execution, task: str, name: str) -> TaskResult:
    node = ex.flow.nodes[name]
    attempt = 0
    while True:
        ctx = NodeContext(ex, name, task, attempt)
        try:
            try:
                update = await node.fn(MappingProxyType(ex.state), ctx)
            finally:
                ctx.close()
            return await off_loop(_finish, ex, task, name, update)
        except BaseException as exc:  # noqa: BLE001 - sorted below
            result = _failed(ex, task, name, exc, attempt, node.retries)
        if result is not None:
            return result
        await asyncio.sleep(node.retry_backoff * (2 ** attempt))
        attempt += 1


def _closing(ctx: NodeContext, fn: Any, *args: Any) -> Any:
    """Call a sync node; its ctx closes when it returns or raises."""
    try:
        return fn(*args)
    finally:
        ctx.close()


def _finish(ex: Execution, task: str, name: str, update: Any) -> TaskResult:
    ops = to_ops(ex.flow, name, update)
    seq = None
    if ex.policy.pending_writes and not ex.countdown.last(task):
        record = PendingWrite(run_id=ex.run_id, task=task, superstep=ex.superstep, node=name,
                              ops=ops, at=ex.clock())
        seq = ex.commit([record])[0]
        faults.point("after_pending_write")
    return TaskResult(task, name, "ok", ops, seq)


def _failed(ex: Execution, task: str, name: str, exc: BaseException, attempt: int,
            retries: int) -> TaskResult | None:
    """A result for a task that stopped, or None to retry it."""
    result = _stopped(task, name, exc, attempt, retries)
    if result is not None:
        ex.countdown.last(task)
    return result


def _stopped(task: str, name: str, exc: BaseException, attempt: int, retries: int
             ) -> TaskResult | None:
    if isinstance(exc, Paused):
        return TaskResult(task, name, "pause", pause=exc)
    if isinstance(exc, (StaleLease, StoreFull)):  # not the node's fault: stop, write nothing
        return TaskResult(task, name, "lost", exc=exc)
    if not isinstance(exc, Exception):
        raise exc  # KeyboardInterrupt, SystemExit: not ours to turn into a failure
    if attempt < retries and not isinstance(exc, _NOT_RETRIED):
        return None
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return TaskResult(task, name, "fail", error=text, exc=exc)
