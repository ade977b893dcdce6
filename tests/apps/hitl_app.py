"""A ``langchain.agents.create_agent`` agent whose ``charge`` tool waits for a person's review
through LangChain's ``HumanInTheLoopMiddleware``, on bide: for tests/test_langgraph_hitl.py.

The model is scripted (deterministic, no network): it asks for ``charge(amount=5)``, then
answers with what the tool message said. ``charge`` is a bide tool (its call goes through
the intent log) and its effect is one line ``charge <amount> <idempotency key>`` appended to
``$HITL_EFFECTS``, outside the store. ``agent`` is HITL's batched mode, ``per_call_agent``
its per-call mode, ``strict_agent`` allows only edit or reject (no plain approve),
``approve_only_agent`` approve or edit (no reject).

usage: hitl_app.py HOME THREAD [GRAPH]  — start a thread; it stops at the review.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bide.langgraph import BideSaver, current_call, durable_tools
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


class ScriptedModel(BaseChatModel):
    """Asks for one charge; once a tool message is back, answers with its content."""

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                  **kw: Any) -> ChatResult:
        done = [m for m in messages if isinstance(m, ToolMessage)]
        if not done:
            msg = AIMessage(content="", tool_calls=[
                {"name": "charge", "args": {"amount": 5}, "id": "call-charge"}])
        else:
            msg = AIMessage(content=f"done: {done[-1].content}")
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(self, tools: Any, **kw: Any) -> ScriptedModel:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"


@tool
def charge(amount: int) -> str:
    """Charge the customer's card (not idempotent)."""
    with open(os.environ.get("HITL_EFFECTS", "effects.txt"), "a") as f:
        f.write(f"charge {amount} {current_call().idempotency_key}\n")
        f.flush()
        os.fsync(f.fileno())
    return f"charged {amount}"


TOOLS = durable_tools([charge])


def build(mode: str = "batched", allowed: list[str] | None = None) -> Any:
    gate: Any = True if allowed is None else {"allowed_decisions": allowed}
    return create_agent(ScriptedModel(), tools=TOOLS, name="payments", middleware=[
        HumanInTheLoopMiddleware(interrupt_on={"charge": gate}, interrupt_mode=mode)])


agent = build()
per_call_agent = build("per_call")
strict_agent = build(allowed=["edit", "reject"])
approve_only_agent = build(allowed=["approve", "edit"])
GRAPHS = {"agent": agent, "per_call_agent": per_call_agent, "strict_agent": strict_agent,
          "approve_only_agent": approve_only_agent}


def main(argv: list[str]) -> int:
    home, thread = argv[1], argv[2]
    graph = GRAPHS[argv[3] if len(argv) > 3 else "agent"]
    with BideSaver.from_home(home) as saver:
        graph.copy(update={"checkpointer": saver}).invoke(
            {"messages": [("user", "charge 5")]}, {"configurable": {"thread_id": thread}})
        with saver.threads.store.reader() as r:
            head = r.head(thread)
        print("STOPPED", head.status if head else None, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
