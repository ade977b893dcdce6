"""``bide.langgraph``: LangGraph on bide (needs ``pip install bide[langgraph]``).

    from bide.langgraph import BideSaver, durable_tool, serve_graphs

- ``BideSaver``: the checkpointer; an ``interrupt()`` of a thread it keeps becomes
  a request in bide's inbox (``interrupts.py``);
- ``durable_tool`` / ``durable_tools``: a tool's calls through bide's write-ahead
  intent log, exactly once across crashes (``tools.py``);
- ``serve_graphs(engine, graphs)``: the engine (a watcher, ``bide serve``) starts and
  resumes threads of these graphs (``runner.py``);
- ``current_call()``: inside a bide tool, its idempotency key and fencing token;
- ``thread_checkpoints`` / ``thread_state`` / ``thread_export``: what ``bide
  checkpoints``/``state``/``export`` show of a thread (``views.py``).

The package root registers this package as ``bide.langgraph``. Importing it
costs nothing: LangGraph itself is imported only when a name is first used, so
``import bide`` works without the extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runner import GraphDriver, serve_graphs
    from .saver import BideSaver
    from .tools import BideTool, CallInfo, current_call, durable_tool, durable_tools
    from .views import thread_checkpoints, thread_export, thread_state

__all__ = ["BideSaver", "BideTool", "CallInfo", "GraphDriver", "current_call", "durable_tool",
           "durable_tools", "serve_graphs", "thread_checkpoints", "thread_export", "thread_state"]

_WHERE = {"BideSaver": "saver", "BideTool": "tools", "CallInfo": "tools",
          "current_call": "tools", "durable_tool": "tools", "durable_tools": "tools",
          "GraphDriver": "runner", "serve_graphs": "runner", "thread_checkpoints": "views",
          "thread_export": "views", "thread_state": "views"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module 'bide.langgraph' has no attribute {name!r}")
