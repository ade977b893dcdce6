"""Schedules (``engine.schedule``): a flow started once per slot, by whichever watcher.

A schedule is recorded in the home (``formats.schedule_records``, folded into the
``schedules`` table by ``schedule_index``). Its slots are epoch seconds: for
``every=N``, the multiples of N (aligned to the epoch, so every watcher computes the
same slots); for ``cron=``, the times the expression names, computed by cronsim in
UTC, or in ``tz`` when given. A slot after the schedule was recorded is due from its
time on.

Exactly once per slot, across watchers and restarts: the slot's run has an id derived
from it (``s-<name>-<slot, 10 digits>``), and one commit both creates that run
(PENDING) and records ``ScheduleFired``; the commit's check refuses when the run
exists or the schedule already fired that slot (or a later one). So two watchers
racing for a slot make one run, and a slot whose run was pruned is not started again
(the run id alone would not remember it: that is why ``last_slot`` is kept too).

After downtime a schedule starts only its latest missed slot; with ``catch_up`` every
missed slot, oldest first, at most ``CATCH_UP_CAP`` of them (the newest).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ...formats import NotSerializable, check_serializable
from ...formats.schedule_records import SCHEDULES_RUN, ScheduleFired, ScheduleRemoved, ScheduleSet
from ..base import faults
from ..base.errors import InvalidSchedule, RunExists, UnknownSchedule
from ..base.vocabulary import Status
from ..storage.schedule_index import PREFIX, TABLE, ScheduleState, read_value
from ..storage.store import Reader, Store

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CATCH_UP_CAP = 100  # missed slots one schedule starts at most after downtime
_SLOT_DIGITS = 10  # epoch seconds up to the year 2286: run ids sort by slot


@dataclass(frozen=True)
class Schedule:
    """A schedule as ``engine.schedules()`` shows it.

    Attributes:
        spec: ``"every 60s"`` or the cron expression (with `` (tz)`` when one is given).
        next_due: the next slot (epoch seconds) not started yet, as of the read.
        last_slot: the newest slot whose run was started (None: none yet); ``last_run``
            its run id.
    """

    name: str
    flow: str
    spec: str
    every: int | None
    cron: str | None
    tz: str | None
    input: dict[str, Any]
    catch_up: bool
    next_due: float
    last_slot: int | None
    last_run: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- checking what a caller asks -----------------------------------------------------
def check(name: Any, *, every: Any, cron: Any, tz: Any,
          input: Any) -> tuple[int | None, str | None]:  # noqa: A002
    """``(every, cron)`` of a schedule that can be recorded.

    Raises:
        InvalidSchedule: a bad name, both or neither of every/cron, an interval that is
            not a whole number of seconds above 0, a cron string cronsim refuses, an
            unknown time zone, an input not kept.
    """
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidSchedule(str(name), f"schedule name {name!r} must be 1-64 letters, "
                              "digits, '_', '.' or '-', starting with a letter or digit")
    if (every is None) == (cron is None):
        raise InvalidSchedule(name, f"schedule {name!r}: give exactly one of every= "
                              "(seconds) or cron= (an expression such as '*/5 * * * *')")
    if every is not None:
        every = _interval(name, every)
        if tz is not None:
            raise InvalidSchedule(name, f"schedule {name!r}: tz applies to cron= only "
                                  "(every= slots are aligned to the epoch)")
    else:
        _zone(name, tz)
        cron = _cron(name, cron, tz)
    if not isinstance(input, dict):
        raise InvalidSchedule(name, f"schedule {name!r}: input must be a dict, "
                              f"not {type(input).__name__}")
    for k, value in input.items():
        try:
            check_serializable(value, k)
        except NotSerializable as exc:
            raise InvalidSchedule(name, f"schedule {name!r}: input {k!r}: {exc}") from None
    return every, cron


def _interval(name: str, every: Any) -> int:
    ok = (not isinstance(every, bool) and isinstance(every, (int, float))
          and math.isfinite(every) and every >= 1 and float(every).is_integer())
    if not ok:
        raise InvalidSchedule(name, f"schedule {name!r}: every= must be a whole number of "
                              f"seconds, at least 1, not {every!r}")
    return int(every)


def _zone(name: str, tz: Any) -> timezone | ZoneInfo:
    if tz is None:
        return timezone.utc
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidSchedule(name, f"schedule {name!r}: unknown time zone {tz!r} "
                              "(an IANA name such as 'Europe/Paris')") from None


def _cron(name: str, cron: Any, tz: Any) -> str:
    if not isinstance(cron, str):
        raise InvalidSchedule(name, f"schedule {name!r}: cron= must be a string, not {cron!r}")
    cron = " ".join(cron.split())
    try:
        CronSim(cron, datetime.now(_zone(name, tz)))
    except CronSimError as exc:
        raise InvalidSchedule(name, f"schedule {name!r}: bad cron expression {cron!r}: "
                              f"{exc}") from None
    return cron


# -- slots ---------------------------------------------------------------------------
def _cron_iter(state: ScheduleState, at: float, *, reverse: bool) -> CronSim:
    assert state.cron is not None
    zone = _zone(state.name, state.tz)
    return CronSim(state.cron, datetime.fromtimestamp(at, zone), reverse=reverse)


def slot_at_or_before(state: ScheduleState, t: float) -> int:
    """The newest slot at or before ``t``."""
    if state.every is not None:
        return math.floor(t / state.every) * state.every
    # cronsim's reverse walk starts strictly before the time given
    return int(next(_cron_iter(state, math.floor(t) + 1, reverse=True)).timestamp())


def slot_after(state: ScheduleState, t: float) -> int:
    """The oldest slot strictly after ``t``."""
    if state.every is not None:
        return (math.floor(t / state.every) + 1) * state.every
    return int(next(_cron_iter(state, math.floor(t), reverse=False)).timestamp())


def _floor(state: ScheduleState) -> float:
    """Slots at or before this are never started: before the schedule, or started."""
    return state.created_at if state.last_slot is None else max(state.created_at,
                                                                state.last_slot)


def next_due(state: ScheduleState) -> int:
    """The oldest slot not started yet (it may be in the past: due now)."""
    return slot_after(state, _floor(state))


def due_slots(state: ScheduleState, now: float) -> tuple[list[int], int]:
    """The slots to start now, oldest first, and how many missed ones were skipped."""
    floor, latest = _floor(state), slot_at_or_before(state, now)
    if latest <= floor:
        return [], 0
    if not state.catch_up:
        return [latest], 0
    slots = [latest]
    while len(slots) <= CATCH_UP_CAP:
        before = slot_at_or_before(state, slots[-1] - 1)
        if before <= floor:
            return slots[::-1], 0
        slots.append(before)
    skipped = _count_between(state, floor, slots[-1])
    return slots[-2::-1], skipped


COUNT_CAP = 10 * CATCH_UP_CAP  # cron slots counted at most when saying how many were skipped


def _count_between(state: ScheduleState, floor: float, upto: int) -> int:
    """How many slots lie in ``(floor, upto]`` (the catch-up cap dropped them); for cron,
    at most ``COUNT_CAP + 1`` (walking a year of minutes to say so is not worth it)."""
    if state.every is not None:
        return (upto - slot_at_or_before(state, floor)) // state.every
    count, it = 0, _cron_iter(state, math.floor(floor), reverse=False)
    for at in it:  # bounded: only after a cap's worth of slots was found before upto
        if at.timestamp() > upto or count > COUNT_CAP:
            break
        count += 1
    return count


def run_id(name: str, slot: int) -> str:
    """The run a schedule starts for a slot (the same on every host)."""
    return f"s-{name}-{slot:0{_SLOT_DIGITS}d}"


# -- reading and writing the home ----------------------------------------------------
def states(reader: Reader) -> list[ScheduleState]:
    return [read_value(k, raw) for k, raw in reader.scan(TABLE, PREFIX)]


def state(reader: Reader, name: str) -> ScheduleState | None:
    raw = reader.get(TABLE, PREFIX + name.encode())
    return None if raw is None else read_value(PREFIX + name.encode(), raw)


def shown(s: ScheduleState) -> Schedule:
    spec = f"every {s.every}s" if s.every is not None else (
        f"{s.cron} ({s.tz})" if s.tz else f"{s.cron}")
    return Schedule(name=s.name, flow=s.flow, spec=spec, every=s.every, cron=s.cron, tz=s.tz,
                    input=dict(s.input), catch_up=s.catch_up, next_due=float(next_due(s)),
                    last_slot=s.last_slot, last_run=s.last_run)


def record(store: Store, name: str, flow: str, *, every: int | None, cron: str | None,
           tz: str | None, input: dict[str, Any], catch_up: bool,  # noqa: A002
           now: float) -> None:
    """Record (or replace) a schedule in one commit."""
    store.commit([ScheduleSet(run_id=SCHEDULES_RUN, name=name, flow=flow, every=every,
                              cron=cron, tz=tz, input=input, catch_up=catch_up, at=now)])
    faults.point("after_schedule_recorded")


def remove(store: Store, name: str, *, now: float) -> None:
    """Remove a schedule (its runs stay).

    Raises:
        UnknownSchedule: the home has no schedule of that name (nothing changes).
    """
    def known(r: Reader) -> None:
        if state(r, name) is None:
            raise UnknownSchedule(name)

    store.commit([ScheduleRemoved(run_id=SCHEDULES_RUN, name=name, at=now)], check=known)


Create = Callable[..., str]  # Engine._create with extra records and a check


def start_slot(create: Create, s: ScheduleState, slot: int, *, now: float) -> str | None:
    """Create the slot's run (PENDING) and mark the slot started, in one commit.

    Returns:
        The run id, or None when another watcher (or an earlier life of this one)
        started it, or the schedule changed meanwhile (removed, or another flow).
    """
    rid = run_id(s.name, slot)

    def fresh(r: Reader) -> None:
        current = state(r, s.name)
        if current is None or current.flow != s.flow or (
                current.last_slot is not None and current.last_slot >= slot):
            raise RunExists(rid)  # someone else's: nothing to do

    try:
        create(s.flow, dict(s.input), rid, None, Status.PENDING,
               extra=[ScheduleFired(run_id=SCHEDULES_RUN, name=s.name, slot=slot, started=rid,
                                    at=now)], check=fresh)
    except RunExists:
        return None
    faults.point("after_slot_run_created")
    return rid
