"""The index extensions this bide folds (see ``extension.py``).

Adding a record family with its own tables means adding it here: the core
index, retention and every store backend then carry it without naming it.
"""

from __future__ import annotations

from .extension import Extension
from .langgraph_index import LANGGRAPH
from .schedule_index import SCHEDULES

EXTENSIONS: tuple[Extension, ...] = (LANGGRAPH, SCHEDULES)


_OWNER_OF: dict[type, Extension | None] = {}  # ownership is by class (Extension.owns)


def owner(record: object) -> Extension | None:
    """The extension that owns ``record``, or None for a core record (asked at every
    record a commit folds: answered once per record class)."""
    cls = type(record)
    if cls not in _OWNER_OF:
        _OWNER_OF[cls] = next((ext for ext in EXTENSIONS if ext.owns(record)), None)
    return _OWNER_OF[cls]
