"""A LangGraph ReAct agent with bide tools, for the crash tests, the README's story and bench.

usage: lg_agent_app.py HOME EFFECTS start THREAD | resume THREAD

The model is scripted (deterministic, no network): it asks for ``charge`` (a payment,
not idempotent), then ``refund`` (which asks a person first, with ``interrupt()``),
then answers. Every real side effect is one line appended to EFFECTS, outside the
store: ``<tool> <idempotency key>``. ``bide watch --app lg_agent_app:agent`` finishes
a thread once its interrupt is decided (EFFECTS from $LG_EFFECTS there).

``start`` runs a new thread until it ends or stops at an interrupt; ``resume`` goes on
from the last checkpoint (after a crash), as a process that restarts would.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bide.langgraph import BideSaver, current_call, durable_tools
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
from langgraph.types import interrupt

EFFECTS = os.environ.get("LG_EFFECTS", "effects.txt")


class ScriptedModel(BaseChatModel):
    """Calls charge, then refund, then answers: one step per ToolMessage it has seen."""

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                  **kw: Any) -> ChatResult:
        seen = sum(isinstance(m, ToolMessage) for m in messages)
        if seen == 0:
            msg = AIMessage(content="", tool_calls=[
                {"name": "charge", "args": {"amount": 5}, "id": "call-charge"}])
        elif seen == 1:
            msg = AIMessage(content="", tool_calls=[
                {"name": "refund", "args": {"amount": 2}, "id": "call-refund"}])
        else:
            msg = AIMessage(content="charged 5, refund settled")
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(self, tools: Any, **kw: Any) -> ScriptedModel:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"


def _effect(name: str) -> None:
    with open(EFFECTS, "a") as f:
        f.write(f"{name} {current_call().idempotency_key}\n")
        f.flush()
        os.fsync(f.fileno())


@tool
def charge(amount: int) -> str:
    """Charge the customer's card (not idempotent)."""
    _effect("charge")
    return f"charged {amount}"


@tool
def refund(amount: int) -> str:
    """Refund the customer, once a person has said yes."""
    answer = interrupt({"question": f"refund {amount}?"})
    if answer != "yes":
        return "refund declined"
    _effect("refund")
    return f"refunded {amount}"


TOOLS = durable_tools([charge, refund])
agent = create_react_agent(ScriptedModel(), TOOLS, name="payments")


def main(argv: list[str]) -> int:
    global EFFECTS
    home, EFFECTS, mode, thread = argv[1], argv[2], argv[3], argv[4]
    config = {"configurable": {"thread_id": thread}}
    with BideSaver.from_home(home) as saver:
        graph = agent.copy(update={"checkpointer": saver})
        what = {"messages": [("user", "charge 5, refund 2")]} if mode == "start" else None
        graph.invoke(what, config)
        with saver.threads.store.reader() as r:
            head = r.head(thread)
        print("STOPPED", head.status if head else None, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
