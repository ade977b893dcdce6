"""A watcher resumes LangGraph threads: the engine's driver for runs of flow ``langgraph``.

``serve_graphs(engine, graphs)`` hands the engine a ``GraphDriver``; from then on the
engine (and a watcher or ``bide serve`` on it) leases, fences and recovers a
thread as it does a flow's run, and the driver advances it by invoking its graph
in this process:

- a thread submitted (``engine.submit(graph name, input)``, ``POST /runs``) starts
  with its input;
- a thread stopped at interrupts resumes with ``Command(resume={interrupt id:
  value})`` once every one of them is decided or expired (``interrupts.py``);
- a thread whose watcher worker died (its lease expired) goes on from its last
  checkpoint (``invoke(None)``), its bide tools replaying what they recorded.

While the graph runs, the worker's lease is renewed, and the saver's commits and the
tools' records are fenced by its token (``held.py``); the lease is released when the
invoke returns, however it ends.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ...formats import LeaseReleased, RunCreated, StatusChanged
from ..base.errors import ConfigError, StaleLease, StoreError
from ..base.vocabulary import LANGGRAPH, Decision, Status
from ..run.approvals import decided
from ..run.lease_clock import Grant, LeaseClock
from ..run.renewer import renewer_for
from .held import Held, holding
from .interrupts import approval_of, resume_value
from .saver import BideSaver
from .views import thread_state

log = logging.getLogger("bide.langgraph")


def bind(graph: Any, saver: BideSaver) -> Any:
    """``graph`` running on ``saver``: a compiled graph (copied with it as checkpointer),
    a ``StateGraph`` (compiled with it), or a function ``f(checkpointer)`` returning a
    compiled graph."""
    if hasattr(graph, "compile") and not hasattr(graph, "invoke"):
        return graph.compile(checkpointer=saver)
    if hasattr(graph, "invoke") and hasattr(graph, "copy"):
        return graph.copy(update={"checkpointer": saver})
    if callable(graph) and "checkpointer" in _parameters(graph):
        return graph(checkpointer=saver)
    raise ConfigError("graphs", f"{graph!r} is not a compiled LangGraph graph, a StateGraph, "
                      "or a function taking checkpointer= that returns one")


def _parameters(fn: Any) -> Mapping[str, Any]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def _is_async(graph: Any) -> bool:
    """Has the graph a node with only an async body (it must be run with ``ainvoke``)?"""
    for node in getattr(graph, "nodes", {}).values():
        bound = getattr(node, "bound", None)
        if getattr(bound, "afunc", None) is not None and getattr(bound, "func", None) is None:
            return True
    return False


class GraphDriver:
    """Advances LangGraph threads of ``graphs`` (name → graph) on ``engine``'s store."""

    flow = LANGGRAPH

    def __init__(self, engine: Any, graphs: Mapping[str, Any], *,
                 interrupt_ttl: float | None = None) -> None:
        if not graphs:
            raise ConfigError("graphs", "no graph given")
        self.engine = engine
        self.saver = BideSaver.on_store(engine.store, doors=engine.doors,
                                        interrupt_ttl=interrupt_ttl)
        self.graphs = {str(name): bind(g, self.saver) for name, g in graphs.items()}

    def names(self) -> list[str]:
        return list(self.graphs)

    def created(self, name: str, run_id: str, input: dict[str, Any],  # noqa: A002
                status: str, now: float) -> list[Any]:
        return [RunCreated(run_id=run_id, flow=LANGGRAPH, input={"graph": name, "input": input},
                           status=status, at=now)]

    # -- advancing a thread -------------------------------------------------------------
    def advance(self, run_id: str, grant: Grant) -> None:
        engine = self.engine
        held = Held(run_id, grant.token, LeaseClock(engine.lease_ttl, grant.sent_at))
        end = renewer_for(engine.store).add(run_id, grant.token, engine.lease_ttl, held.lease)
        try:
            with holding(held):
                self._invoke(run_id, grant.token)
        except StaleLease:
            raise  # another worker holds the thread now: nothing more is ours to write
        except StoreError:
            raise
        except Exception as exc:
            log.warning("thread %s: its graph raised %s: %s", run_id, type(exc).__name__, exc)
            self._commit(run_id, grant.token, [StatusChanged(
                run_id=run_id, status=Status.FAILED, reason="the graph raised",
                error=f"{type(exc).__name__}: {exc}"[:2000], at=engine.clock())])
        finally:
            end()
            self._commit(run_id, grant.token, [LeaseReleased(
                run_id=run_id, owner=engine.owner, token=grant.token, at=engine.clock())])

    def state(self, run_id: str, version: int | None = None) -> dict[str, Any]:
        return thread_state(self.engine.store, run_id, version, self.saver.serde)[1]

    def _commit(self, run_id: str, token: int, records: list[Any]) -> None:
        try:
            self.engine.store.commit(records, fence=(run_id, token))
        except StaleLease:
            pass  # taken over meanwhile: the new holder decides

    def graph_of(self, run_id: str) -> tuple[Any, dict[str, Any] | None]:
        """The thread's graph, and its input if it was submitted and never ran."""
        with self.engine.store.reader() as r:
            created = next((r.record(seq) for seq, kind in r.run_entries(run_id)
                            if kind == RunCreated.TYPE), None)
        wanted = created.input.get("graph") if isinstance(created, RunCreated) else None
        if wanted is None and len(self.graphs) == 1:
            wanted = next(iter(self.graphs))
        if wanted not in self.graphs:
            raise ConfigError("graphs", f"thread {run_id} was started by graph {wanted!r}, "
                              f"not one of {sorted(self.graphs)}" if wanted else
                              f"thread {run_id} does not say which of {sorted(self.graphs)} "
                              "it runs (start it with engine.submit(NAME, ...))")
        given = created.input.get("input") if isinstance(created, RunCreated) else None
        return self.graphs[wanted], given if isinstance(given, dict) else None

    def _invoke(self, run_id: str, token: int) -> None:
        graph, given = self.graph_of(run_id)
        config: Any = {"configurable": {"thread_id": run_id}}
        if self.saver.get_tuple(config) is None:
            what: Any = given or {}
        else:
            what = self._resume(run_id, token, graph, config)
        run: Callable[[], Any] = lambda: graph.invoke(what, config)  # noqa: E731
        if _is_async(graph):
            run = lambda: asyncio.run(graph.ainvoke(what, config))  # noqa: E731
        run()

    def _resume(self, run_id: str, token: int, graph: Any, config: dict[str, Any]) -> Any:
        """``Command(resume=...)`` for the interrupts the thread stopped at, or None
        (go on from the last checkpoint) when it stopped at none."""
        from langgraph.types import Command

        state = graph.get_state(config)
        now = self.engine.clock()
        values: dict[str, Any] = {}
        expired = []
        with self.engine.store.reader() as r:
            for task in state.tasks:
                for found in task.interrupts:
                    req = r.approval(approval_of(run_id, found, task.id))
                    if req is None:
                        continue
                    settled, value = resume_value(req, now)
                    if settled:
                        values[found.id] = value
                        if req.decision is None:
                            expired.append(req)
        if expired:  # an expired request resumes as a rejection, recorded as one
            self._commit(run_id, token, [
                decided(req, Decision.REJECT, by="bide", reason="expired", at=now)
                for req in expired])
        return Command(resume=values) if values else None


def serve_graphs(engine: Any, graphs: Any, *, interrupt_ttl: float | None = None
                 ) -> GraphDriver:
    """Let ``engine`` (and a watcher or server on it) start and resume LangGraph threads.

    ``graphs``: one graph (a compiled graph, a ``StateGraph``, or ``f(checkpointer)``),
    or a mapping of names to them; one graph is named by its ``name`` ("LangGraph" by
    default). Threads created by ``BideSaver`` directly say no graph: with one graph
    registered, it is theirs.
    """
    if not isinstance(graphs, Mapping):
        graphs = {str(getattr(graphs, "name", None) or "LangGraph"): graphs}
    driver = GraphDriver(engine, graphs, interrupt_ttl=interrupt_ttl)
    engine.drive(driver)
    return driver
