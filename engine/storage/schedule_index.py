"""The ``schedules`` derived table, folded from ``formats.schedule_records``.

One entry per schedule, ``bide/schedules ␀ name -> ScheduleState``: what it starts
and when, and the last slot it started. The key begins with the schedule
records' run id, so PostgreSQL's commit locks that one "run" for every schedule
write (``pg_reader.run_of``) and a slot is never started by two hosts at once.
``SCHEDULES`` hands the folds to the core index as an extension (``extensions.py``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...formats import pack_value, unpack_value
from ...formats.schedule_records import (
    SCHEDULE_RECORDS,
    SCHEDULES_RUN,
    ScheduleFired,
    ScheduleRemoved,
    ScheduleSet,
)
from .extension import Extension, Logged

TABLE = "schedules"
PREFIX = SCHEDULES_RUN.encode() + b"\x00"


class ScheduleState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A schedule as the table keeps it (``ScheduleSet`` and the slots it fired)."""

    name: str
    flow: str
    every: int | None = None
    cron: str | None = None
    tz: str | None = None
    input: dict[str, Any] = {}
    catch_up: bool = False
    created_at: float = 0.0  # slots at or before this never start
    updated_at: float = 0.0
    last_slot: int | None = None  # the newest slot whose run was started
    last_run: str | None = None


def key(name: str) -> bytes:
    return PREFIX + name.encode()


def load(tables: Any, name: str) -> ScheduleState | None:
    raw = tables.get(TABLE, key(name))
    return None if raw is None else read_value(key(name), raw)


def fold_tables(tables: Any, seq: int, record: Any) -> None:
    match record:
        case ScheduleSet():
            old = load(tables, record.name)
            state = ScheduleState(
                name=record.name, flow=record.flow, every=record.every, cron=record.cron,
                tz=record.tz, input=record.input, catch_up=record.catch_up,
                created_at=record.at if old is None else old.created_at, updated_at=record.at,
                # replacing a schedule keeps the slots it started: none starts twice
                last_slot=None if old is None else old.last_slot,
                last_run=None if old is None else old.last_run)
            tables.put(TABLE, key(record.name), pack_value(state))
        case ScheduleRemoved():
            tables.delete(TABLE, key(record.name))
        case ScheduleFired():
            found = load(tables, record.name)
            if found is not None and (found.last_slot is None or record.slot > found.last_slot):
                found.last_slot, found.last_run = record.slot, record.started
                tables.put(TABLE, key(record.name), pack_value(found))


def fold_head(tables: Any, head: Any, seq: int, record: Any) -> None:
    """Schedule records have no run head (their run id is reserved)."""


def keys_of(seq: int, record: Any) -> list[tuple[str, bytes]]:
    return [(TABLE, key(record.name))]


def retain(items: list[Logged], keep: int) -> set[int]:
    """Every schedule record is kept (they are few, and the table is their fold)."""
    return {seq for seq, _, record in items if isinstance(record, SCHEDULE_RECORDS)}


def read_value(k: bytes, raw: bytes) -> ScheduleState:
    """A table value, its checksum checked (raises ``CorruptIndex`` naming the key)."""
    state: ScheduleState = unpack_value(raw, ScheduleState, table=TABLE, key=k)
    return state


SCHEDULES = Extension(name="schedules", tables=(TABLE,), records=SCHEDULE_RECORDS,
                      fold_tables=fold_tables, fold_head=fold_head, keys_of=keys_of,
                      retain=retain, read_value=read_value)
