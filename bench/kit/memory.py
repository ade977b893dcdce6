"""The no-persistence baseline: a flow's nodes and reducers run in memory.

Same supersteps as the engine (``Flow.successors``), same folding
(``state.fold``), same concurrency (one node inline; of several, the last inline and the
others in the engine's task threads kept for the run, waited for with one wake-up),
no store, no serializability checks, tools called directly. The difference
between this and ``Engine.start`` is what durability costs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from ...engine.run.flow import Flow, reducer_kind
from ...engine.run.state import Op, fold
from ...engine.run.task_threads import TaskThreads
from ...engine.run.tools import Tool


class MemoryContext:
    """The subset of ``ctx`` the bench nodes use, with nothing recorded."""

    def __init__(self, run_id: str, node: str, task: str, superstep: int) -> None:
        self.run_id, self.node, self.task_id, self.superstep = run_id, node, task, superstep
        self.attempt = 0
        self._calls = 0

    def tool(self, t: Tool[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        key = f"mem-{self.run_id}-{self.task_id}#{self._calls}"
        self._calls += 1
        if t.accepts_key:
            kwargs["idempotency_key"] = key
        return t.fn(*args, **kwargs)

    def approve(self, action: str, payload: Any = None, **_: Any) -> bool:
        return True


def _ops(flow: Flow, update: Any) -> list[Op]:
    if not update:
        return []
    ops: list[Op] = []
    for key, value in update.items():
        kind = reducer_kind(flow.reducers.get(key))
        if kind == "append":
            value = list(value) if isinstance(value, (list, tuple)) else [value]
        ops.append((key, kind, value))
    return ops


def run_in_memory(flow: Flow, state: dict[str, Any], run_id: str = "mem"
                  ) -> tuple[dict[str, Any], int]:
    """Run ``flow`` from ``state`` to the end; returns (final state, supersteps)."""
    threads = TaskThreads(run_id)  # kept across supersteps, as the engine's
    try:
        return _run(flow, dict(state), run_id, threads)
    finally:
        threads.close()


def _together(threads: TaskThreads, call: Callable[[str], Any], names: list[str]) -> list[Any]:
    """``call`` over ``names``: the last in this thread, the others in ``threads``; this
    thread wakes once, when the last of them returns (as engine/run/siblings.py waits)."""
    outcomes: list[Any] = [None] * len(names)
    ended = threading.Condition()
    left = len(names) - 1

    def one(i: int) -> None:
        nonlocal left
        try:
            outcomes[i] = call(names[i])
        except BaseException as exc:  # noqa: BLE001 - raised again in this thread
            outcomes[i] = exc
        with ended:
            left -= 1
            if not left:
                ended.notify()

    threads.start(one, range(len(names) - 1), len(names) - 1)
    outcomes[-1] = call(names[-1])
    with ended:
        while left:
            ended.wait()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes


def _run(flow: Flow, state: dict[str, Any], run_id: str, threads: TaskThreads
         ) -> tuple[dict[str, Any], int]:
    seen: dict[str, dict[str, int]] = {}
    names = flow.start_nodes()
    superstep = 0
    while names:
        frozen = MappingProxyType(state)

        def call(name: str, step: int = superstep, view: Any = frozen) -> Any:
            ctx = MemoryContext(run_id, name, f"{step}:{name}:0", step)
            return flow.nodes[name].fn(view, ctx)

        if len(names) == 1:
            updates = [call(names[0])]
        else:  # as the engine: the others in the run's threads, the last in this thread
            updates = _together(threads, call, names)
        writes = [(n, _ops(flow, u)) for n, u in zip(names, updates, strict=True)]
        state, _ = fold(flow, state, writes)
        names, _ = flow.successors(names, state, seen)  # a baseline of static flows: no Sends
        superstep += 1
    return state, superstep
