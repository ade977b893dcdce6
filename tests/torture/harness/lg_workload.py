"""The torture suite's LangGraph workload: a prebuilt ReAct agent whose tools are bide tools.

A scripted chat model (deterministic, no network) asks in its first turn for three
tool calls at once — ``charge`` (not idempotent: a person decides an unknown
outcome), ``ship`` (a reconciler looks in the world) and ``notify`` (idempotent: the
same key is sent again) — then for ``git_push``, which first asks a person with
``interrupt()``, then answers. Every model turn logs ``node:agent@<turn>`` and every
real effect ``tool:<name> <idempotency key>`` to the world's file, as the flow
workloads do (``workloads.py``), so the same invariants check it.

The operator (``drive``) is the flow workloads' one, spoken to a thread: it starts
the thread through the engine (``serve_graphs``), resumes it after a crash, answers
the interrupt with a decision file a watcher takes, and settles an unknown outcome by
looking at the world.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import bide
from bide.engine.human.inbox import drop_decision
from bide.langgraph import current_call, durable_tool, serve_graphs
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from langgraph.prebuilt import create_react_agent
from langgraph.types import interrupt

GRAPH = "torture-langgraph"
RESULTS = {"charge": "charged", "ship": "shipped", "notify": "notified", "git_push": "pushed"}
FIRST_TURN = ("charge", "ship", "notify")  # asked for at once: parallel calls of one step
ANSWER = "done: charged, shipped, notified, pushed"


class _Scripted(BaseChatModel):
    """Turn 0: charge + ship + notify; turn 1 (three results seen): git_push; then answers."""

    world: Any = None

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                  **kw: Any) -> ChatResult:
        seen = sum(isinstance(m, ToolMessage) for m in messages)
        turn = 0 if seen == 0 else 1 if seen == len(FIRST_TURN) else 2
        self.world.log(f"node:agent@{turn}")
        if turn == 0:
            msg = AIMessage(content="", tool_calls=[
                {"name": name, "args": {"what": name}, "id": f"call-{name}"}
                for name in FIRST_TURN])
        elif turn == 1:
            msg = AIMessage(content="", tool_calls=[
                {"name": "git_push", "args": {"what": "p-9"}, "id": "call-git_push"}])
        else:
            msg = AIMessage(content=ANSWER)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(self, tools: Any, **kw: Any) -> _Scripted:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"


def build_graph(world: Any) -> Any:
    """The agent (compiled, no checkpointer: ``serve_graphs`` binds the engine's saver)."""
    def effect(name: str) -> str:
        world.log(f"tool:{name} {current_call().idempotency_key}")
        return RESULTS[name]

    def push(what: str) -> str:
        if interrupt({"question": f"push {what}?"}) != "yes":
            return "not pushed"
        return effect("git_push")

    def shipped(key: str, **args: Any) -> bide.Outcome:
        return bide.Outcome.done(RESULTS["ship"]) if world.happened("ship", key) \
            else bide.Outcome.not_done()

    def make(name: str, fn: Any, **options: Any) -> Any:
        tool = StructuredTool.from_function(fn, name=name, description=f"the {name} tool")
        return durable_tool(tool, **options)

    tools = [make("charge", lambda what: effect("charge")),
             make("ship", lambda what: effect("ship"), reconcile=shipped),
             make("notify", lambda what: effect("notify"), idempotent=True),
             make("git_push", push)]
    return create_react_agent(_Scripted(world=world), tools, name=GRAPH)


def step(eng: bide.Engine, head: Any, world: Any, counts: Counter[str]) -> str:
    """One move of the operator on the thread (``workloads._step`` for a flow's run)."""
    serve_graphs(eng, {GRAPH: build_graph(world)})
    if head is None:
        eng.start(GRAPH, {"messages": [("user", "ship it")]}, run_id=_thread())
        return "STARTED"
    status = head.status
    if status == "DONE":
        return "FINISHED"
    from .workloads import resume, watch_once

    if status == "WAITING_INPUT":
        _answer_through_inbox(eng, head)
        watch_once(eng, counts)
    elif status == "NEEDS_RECONCILIATION":
        counts["unknown_surfaced"] += 1
        _reconcile(eng, head, world)
        resume(eng, head.run_id, counts)
    elif status == "FAILED":
        return "GAVE_UP"
    else:
        resume(eng, head.run_id, counts)
    return status


def _thread() -> str:
    from .workloads import RUN_ID

    return RUN_ID


def _undecided(eng: bide.Engine, head: Any, kind: str) -> list[Any]:
    """The thread's undecided requests of ``kind`` (parallel calls may each ask one)."""
    rows = [row for row in eng.pending() if row["run_id"] == head.run_id and row["kind"] == kind]
    with eng.store.reader() as r:
        return [r.approval(row["approval_id"]) for row in rows]


def _answer_through_inbox(eng: bide.Engine, head: Any) -> None:
    """Drop the answer file once; a crashed watcher's claimed file is taken again."""
    from .workloads import dropped

    for req in _undecided(eng, head, "input"):
        if dropped(eng, req.approval_id):
            continue
        drop_decision(eng.home, req.approval_id, "answer", by="operator", reason="torture",
                      run_id=req.run_id, digest=req.digest, value="yes")


def _reconcile(eng: bide.Engine, head: Any, world: Any) -> None:
    """Decide an unknown outcome the way a careful human would: look at the world."""
    for req in _undecided(eng, head, "reconciliation"):  # none: decided before a crash
        tool, key = req.payload["tool"], req.payload["idempotency_key"]
        if world.happened(tool, key):
            eng.decide(req.approval_id, "mark_done", by="operator",
                       reason="the effect is there", result=RESULTS[tool])
        else:
            eng.decide(req.approval_id, "retry", by="operator", reason="never happened")


def state(eng: bide.Engine, run_id: str) -> Any:
    """The thread's messages at its last checkpoint, without the ids LangGraph makes up."""
    from bide.langgraph import BideSaver

    saver = BideSaver.on_store(eng.store)
    found = saver.get_tuple({"configurable": {"thread_id": run_id, "checkpoint_ns": ""}})
    if found is None:
        return None
    return [[m.type, m.content, [c["name"] for c in getattr(m, "tool_calls", None) or []]]
            for m in found.checkpoint["channel_values"]["messages"]]
