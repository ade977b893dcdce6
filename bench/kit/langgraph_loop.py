"""K tool calls, one per step, as a LangGraph graph: the twin of ``tool_calls.bide_flow``.

One node, ``step``, loops K times; each time it calls ``call(i)`` (whatever form of
the tool a bench measures: a plain function, a ``durable_tool``, a LangChain tool's
``invoke``) and keeps the last result and a counter in state. The cost bench and the
crash bench of bide's LangGraph tools (``bench/langgraph_tools.py``,
``bench/langgraph_crash.py``) build the same graph here, so both measure one workload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

Call = Callable[[int], str]  # the step's tool call: i -> result


class LoopState(TypedDict):
    count: int
    last: str


def build(k: int, call: Call) -> Any:
    """The graph (a ``StateGraph``, not compiled): ``step`` calls ``call(count)`` K times."""
    from langgraph.graph import END, START, StateGraph  # the langgraph extra, when measured

    g = StateGraph(LoopState)
    g.add_node("step", lambda state: {"last": call(state["count"]),
                                      "count": state["count"] + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda state: END if state["count"] >= k else "step")
    return g


def initial() -> dict[str, Any]:
    return {"count": 0, "last": ""}


def config(thread: str, k: int) -> dict[str, Any]:
    """A thread's config; the recursion limit leaves room for K steps."""
    return {"configurable": {"thread_id": thread}, "recursion_limit": k + 20}


def finished(state: Any, k: int, last: str) -> bool:
    """Did the loop end as it should: K calls, the last one's result kept."""
    return dict(state or {}) == {"count": k, "last": last}
