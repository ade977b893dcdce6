"""Records of child runs (``ctx.child``): the link between a parent run and its children.

``ChildStarted`` (in the parent's log) and ``ChildOf`` (in the child's) are committed
with the child's ``RunCreated`` in the parent's pause commit, so a child exists exactly
when its parent has paused for it: a node that runs again finds it by its derived id
and never starts a second. ``ChildEnded`` (in the parent's log) says the child
reached DONE, FAILED or CANCELLED; it wakes the parent (a watcher is told at once),
and is only a wake-up: whether the parent can go on is read from its children's heads.

Evolution rules are those of ``formats/records.py``.
"""

from __future__ import annotations

from typing import ClassVar

from .records import Record, register


class ChildStarted(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Run ``run_id``'s call ``index`` of task ``task`` (or its ``key``) started ``child``."""

    TYPE: ClassVar[str] = "child_started"
    run_id: str
    child: str
    flow: str
    node: str
    task: str
    index: int = 0
    key: str | None = None
    at: float = 0.0


class ChildOf(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Run ``run_id`` is a child of ``parent``, ``depth`` levels below a run with no parent."""

    TYPE: ClassVar[str] = "child_of"
    run_id: str
    parent: str
    node: str
    depth: int = 1
    at: float = 0.0


class ChildEnded(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Run ``run_id``'s child ``child`` ended with ``status`` (and ``error``)."""

    TYPE: ClassVar[str] = "child_ended"
    run_id: str
    child: str
    status: str
    error: str | None = None
    at: float = 0.0


CHILD_RECORDS = (ChildStarted, ChildOf, ChildEnded)
for _cls in CHILD_RECORDS:
    register(_cls)
