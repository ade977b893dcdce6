"""The no-persistence baseline: a flow's nodes and reducers run in memory.

Same supersteps as the engine (``Flow.successors``), same folding
(``state.fold``), same concurrency (one node inline; of several, the last inline and the
others in a thread pool kept for the run, as the engine keeps one per run),
no store, no serializability checks, tools called directly. The difference
between this and ``Engine.start`` is what durability costs.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any

from ..engine.flow import Flow, reducer_kind
from ..engine.state import Op, fold
from ..engine.tools import Tool


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
    with ThreadPoolExecutor(max_workers=32) as pool:  # kept across supersteps, as the engine's
        return _run(flow, dict(state), run_id, pool)


def _run(flow: Flow, state: dict[str, Any], run_id: str, pool: ThreadPoolExecutor
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
        else:  # as the engine: the others in the pool, the last in this thread
            futures = [pool.submit(call, name) for name in names[:-1]]
            mine = call(names[-1])
            updates = [f.result() for f in futures] + [mine]
        writes = [(n, _ops(flow, u)) for n, u in zip(names, updates, strict=True)]
        state, _ = fold(flow, state, writes)
        names, _ = flow.successors(names, state, seen)  # a baseline of static flows: no Sends
        superstep += 1
    return state, superstep
