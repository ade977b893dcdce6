"""``bide.langgraph``: the LangGraph checkpointer (needs ``pip install bide[langgraph]``).

    from bide.langgraph import BideSaver

The package root registers this package as ``bide.langgraph``. Importing it
costs nothing: LangGraph itself is imported only when ``BideSaver`` is first
used, so ``import bide`` works without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .saver import BideSaver

__all__ = ["BideSaver"]


def __getattr__(name: str) -> Any:
    if name == "BideSaver":
        from .saver import BideSaver

        return BideSaver
    raise AttributeError(f"module 'bide.langgraph' has no attribute {name!r}")
