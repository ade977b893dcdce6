"""The index extensions this bide folds (see ``extension.py``).

Adding a record family with its own tables means adding it here: the core
index, retention and every store backend then carry it without naming it.
"""

from __future__ import annotations

from .extension import Extension
from .langgraph_index import LANGGRAPH
from .schedule_index import SCHEDULES

EXTENSIONS: tuple[Extension, ...] = (LANGGRAPH, SCHEDULES)


def owner(record: object) -> Extension | None:
    """The extension that owns ``record``, or None for a core record."""
    return next((ext for ext in EXTENSIONS if ext.owns(record)), None)
