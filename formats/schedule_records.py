"""Records of schedules (``engine.schedule``): what runs when, and which slots started.

Schedules belong to the home, not to a run, so their records carry the reserved
run id ``SCHEDULES_RUN`` (a ``/`` no run id may hold): the log stays the truth,
the derived ``schedules`` table is folded from it (``engine/storage/schedule_index.py``),
and no run's retention ever removes them.

``ScheduleFired`` rides in the same commit as the slot's run (``RunCreated``), so
"slot started" and "run exists" are never apart; it is what keeps a slot from
starting twice even after its run was pruned.

Evolution rules are those of ``formats/records.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .records import Record, register

SCHEDULES_RUN = "bide/schedules"  # the run id of every schedule record


class ScheduleSet(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Schedule ``name`` starts ``flow`` with ``input`` at each slot: every ``every``
    seconds (aligned to the epoch), or at each time the ``cron`` expression names (in
    ``tz``, UTC when None). Replaces a schedule of the same name."""

    TYPE: ClassVar[str] = "schedule_set"
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("input",)
    run_id: str  # SCHEDULES_RUN
    name: str
    flow: str
    every: int | None = None
    cron: str | None = None
    tz: str | None = None
    input: dict[str, Any] = {}
    catch_up: bool = False
    at: float = 0.0


class ScheduleRemoved(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Schedule ``name`` starts nothing more (its runs stay)."""

    TYPE: ClassVar[str] = "schedule_removed"
    run_id: str  # SCHEDULES_RUN
    name: str
    at: float = 0.0


class ScheduleFired(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Schedule ``name`` started run ``started`` for its slot ``slot`` (epoch seconds)."""

    TYPE: ClassVar[str] = "schedule_fired"
    run_id: str  # SCHEDULES_RUN
    name: str
    slot: int
    started: str
    at: float = 0.0


SCHEDULE_RECORDS = (ScheduleSet, ScheduleRemoved, ScheduleFired)
for _cls in SCHEDULE_RECORDS:
    register(_cls)
