"""Deprecated path of the LangGraph checkpointer: use ``from bide.langgraph import BideSaver``."""

from __future__ import annotations

import warnings

from .langgraph.saver import *  # noqa: F403 - the whole module, as it was here
from .langgraph.saver import BideSaver

warnings.warn("bide.engine.langgraph_saver is deprecated: use "
              "`from bide.langgraph import BideSaver`", DeprecationWarning, stacklevel=2)

__all__ = ["BideSaver"]
