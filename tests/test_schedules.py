"""Schedules (issue 16.4) from the API, on every kind of home: recorded and replaced by
name, refused when wrong (nothing stored), slots aligned the same for every watcher,
one run per due slot, only the latest missed slot after downtime unless catch_up, and
a slot never started twice (not even after its run was pruned). The engine's clock is
injected: no test here sleeps."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone

import bide
import pytest
from bide.engine.ops.watcher import Watcher
from bide.engine.run import schedules
from bide.engine.storage.schedule_index import ScheduleState
from bide.engine.upkeep import maintenance
from conftest import APPS, open_on

sys.path.insert(0, str(APPS))
import schedule_app  # noqa: E402

T0 = 1_800_000_000.0  # a multiple of 3600: slots of every=N line up on it


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["lmdb", "memory", "postgres"])
def kind(request) -> str:
    return request.param


@pytest.fixture
def clock() -> Clock:
    return Clock(T0 + 0.5)


@pytest.fixture
def eng(kind, request, home, clock):
    engine = open_on(kind, request, home, clock)
    engine.register(schedule_app.flow)
    yield engine
    engine.close()


def once(eng: bide.Engine, lines: list[str] | None = None) -> list[str]:
    """One watcher pass; the run ids it advanced."""
    log = (lambda line: lines.append(line)) if lines is not None else (lambda _line: None)
    return sorted(r.run_id for r in Watcher(eng, log=log).once()["runs"])


def ticks(eng: bide.Engine) -> list[str]:
    return sorted(r.run_id for r in eng.runs(flow="tick"))


def test_a_schedule_is_recorded_listed_replaced_and_removed(eng, clock):
    made = eng.schedule("beat", "tick", every=10, input={"n": 3})
    assert (made.name, made.flow, made.spec, made.input, made.catch_up) == (
        "beat", "tick", "every 10s", {"n": 3}, False)
    assert made.next_due == T0 + 10 and made.last_slot is None
    eng.schedule("cron", "tick", cron="*/5  * * * *", catch_up=True)
    assert [s.name for s in eng.schedules()] == ["beat", "cron"]
    assert eng.schedule_of("cron").spec == "*/5 * * * *"  # spaces folded
    clock.now = T0 + 10.1
    assert once(eng) == ["s-beat-1800000010"]
    again = eng.schedule("beat", "tick", every=20, input={"n": 4})  # replaced by name
    assert (again.every, again.input, again.last_slot) == (20, {"n": 4}, T0 + 10)
    assert again.next_due == T0 + 20  # the slots it started stay started
    eng.unschedule("beat")
    assert [s.name for s in eng.schedules()] == ["cron"]
    with pytest.raises(bide.UnknownSchedule, match="no schedule named 'beat'"):
        eng.unschedule("beat")
    assert eng.get("s-beat-1800000010").status == bide.Status.DONE  # its runs stay
    assert eng.doctor().ok


@pytest.mark.parametrize("name, opts, says", [
    ("a b", {"every": 5}, "schedule name 'a b' must be"),
    ("", {"every": 5}, "schedule name '' must be"),
    ("-x", {"every": 5}, "starting with a letter or digit"),
    ("x" * 65, {"every": 5}, "must be 1-64"),
    ("x", {}, "exactly one of every="),
    ("x", {"every": 5, "cron": "* * * * *"}, "exactly one of every="),
    ("x", {"every": 0}, "whole number of seconds, at least 1, not 0"),
    ("x", {"every": -3}, "not -3"),
    ("x", {"every": 1.5}, "not 1.5"),
    ("x", {"every": float("nan")}, "not nan"),
    ("x", {"every": True}, "not True"),
    ("x", {"cron": "61 * * * *"}, "bad cron expression '61 * * * *'"),
    ("x", {"cron": "* * *"}, "bad cron expression"),
    ("x", {"cron": 5}, "cron= must be a string"),
    ("x", {"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ("x", {"every": 5, "tz": "UTC"}, "tz applies to cron= only"),
    ("x", {"every": 5, "input": {"f": object()}}, "input 'f'"),
])
def test_bad_schedules_are_refused_by_name_and_nothing_is_stored(request, home, name, opts,
                                                                  says):
    eng = open_on("memory", request, home, Clock(T0))  # checked before any store is touched
    eng.register(schedule_app.flow)
    with pytest.raises(bide.InvalidSchedule, match=re.escape(says)):
        eng.schedule(name, "tick", **opts)
    assert eng.schedules() == []
    eng.close()


def test_an_unknown_flow_is_refused(eng):
    with pytest.raises(bide.UnknownFlow, match="nope"):
        eng.schedule("x", "nope", every=5)
    assert eng.schedules() == []


def test_one_run_per_due_slot_and_only_the_latest_after_downtime(eng, clock):
    eng.schedule("beat", "tick", every=10, input={"n": 7})
    assert once(eng) == []  # T0 + 0.5: the slot T0 came before the schedule
    clock.now = T0 + 10
    assert once(eng) == ["s-beat-1800000010"]  # due at its time, not after
    assert once(eng) == []  # started once
    clock.now = T0 + 55  # the watcher was away for slots 20, 30, 40, 50
    lines: list[str] = []
    assert once(eng, lines) == ["s-beat-1800000050"]
    assert ticks(eng) == ["s-beat-1800000010", "s-beat-1800000050"]
    assert eng.get("s-beat-1800000050").state == {"n": 7, "ticked": "s-beat-1800000050"}
    assert "schedule beat: started run s-beat-1800000050 (slot 1800000050)" in lines
    assert eng.schedule_of("beat").next_due == T0 + 60


def test_catch_up_starts_every_missed_slot_oldest_first(eng, clock):
    eng.schedule("beat", "tick", every=10, catch_up=True)
    clock.now = T0 + 42
    lines: list[str] = []
    assert once(eng, lines) == [f"s-beat-18000000{s}" for s in (10, 20, 30, 40)]
    started = [line for line in lines if "started run" in line]
    assert started == sorted(started)  # oldest first
    assert "schedule beat: catching up 4 missed slots" in lines


def test_catch_up_is_capped_with_a_log_line(eng, clock):
    eng.schedule("beat", "tick", every=1, catch_up=True)
    clock.now = T0 + 250.5
    lines: list[str] = []
    s = ScheduleState(name="beat", flow="tick", every=1, catch_up=True, created_at=T0 + 0.5)
    slots, skipped = schedules.due_slots(s, clock.now)
    assert len(slots) == schedules.CATCH_UP_CAP and slots[-1] == T0 + 250
    assert slots[0] == T0 + 151 and skipped == 150
    assert len(once(eng, lines)) == schedules.CATCH_UP_CAP
    assert ("schedule beat: catching up 100 missed slots; 150 older ones skipped "
            "(at most 100)") in lines


def test_a_cron_catch_up_over_a_long_downtime_says_how_many_it_skipped(eng, clock):
    eng.schedule("minutely", "tick", cron="* * * * *", catch_up=True)
    clock.now = T0 + 3 * 86400  # three days of minutes missed
    lines: list[str] = []
    assert len(once(eng, lines)) == schedules.CATCH_UP_CAP
    assert ("schedule minutely: catching up 100 missed slots; over 1000 older ones skipped "
            "(at most 100)") in lines


def test_a_slot_whose_run_was_pruned_is_not_started_again(eng, clock):
    eng.schedule("beat", "tick", every=10)
    clock.now = T0 + 10
    assert once(eng) == ["s-beat-1800000010"]
    clock.now = T0 + 12
    report = maintenance.prune(eng.store, finished_older_than=1, now=clock.now)
    assert "s-beat-1800000010" in report.runs_removed
    assert ticks(eng) == []
    assert once(eng) == []  # the run id is free again; the slot is still started
    assert eng.schedule_of("beat").last_slot == T0 + 10
    assert eng.doctor().ok


def test_a_run_id_taken_already_leaves_the_slot_to_its_owner(eng, clock):
    """Two watchers race for a slot: the second's commit finds the first's run."""
    eng.schedule("beat", "tick", every=10)
    clock.now = T0 + 10
    with eng.store.reader() as r:
        stale = schedules.state(r, "beat")  # what a second watcher read, before the first
    assert stale is not None
    assert schedules.start_slot(eng._create, stale, 1_800_000_010, now=clock.now)
    assert schedules.start_slot(eng._create, stale, 1_800_000_010, now=clock.now) is None
    with eng.store.reader() as r:
        fired = [t for _, t in r.run_entries(bide.formats.SCHEDULES_RUN)
                 if t == "schedule_fired"]
    assert fired == ["schedule_fired"]


def test_a_watcher_without_the_flow_logs_and_skips_it(eng, clock):
    eng.schedule("other", "tick", every=10)
    del eng.flows["tick"]  # this watcher's app lacks it
    clock.now = T0 + 10
    lines: list[str] = []
    watcher = Watcher(eng, log=lines.append)
    assert watcher.once()["runs"] == [] and watcher.once()["runs"] == []
    said = [line for line in lines if "schedule other: skipped" in line]
    assert said == ["schedule other: skipped, this watcher has no flow 'tick' (a watcher "
                    "that has it starts its runs)"]  # said once
    assert ticks(eng) == []


def test_rebuilding_the_indexes_keeps_schedules_and_their_slots(eng, clock, kind):
    eng.schedule("beat", "tick", every=10, input={"n": 1})
    clock.now = T0 + 10
    once(eng)
    before = eng.schedules()
    assert eng.doctor(rebuild=True).ok
    assert eng.schedules() == before


def test_every_slots_are_aligned_to_the_epoch():
    s = ScheduleState(name="x", flow="f", every=7, created_at=100.0)
    assert schedules.slot_at_or_before(s, 104.9) == 98
    assert schedules.slot_after(s, 98) == 105
    assert schedules.next_due(s) == 105


def test_cron_slots_are_utc_unless_a_zone_is_given():
    at = datetime(2026, 7, 1, 9, 58, tzinfo=timezone.utc).timestamp()
    utc = ScheduleState(name="x", flow="f", cron="0 12 * * *", created_at=at)
    paris = ScheduleState(name="x", flow="f", cron="0 12 * * *", tz="Europe/Paris",
                          created_at=at)
    noon = datetime(2026, 7, 1, 12, tzinfo=timezone.utc).timestamp()
    assert schedules.next_due(utc) == noon
    assert schedules.next_due(paris) == noon - 7200  # 12:00 in Paris is 10:00 UTC (summer)
    assert schedules.slot_at_or_before(utc, noon) == noon  # a slot is due at its time
    assert schedules.slot_at_or_before(utc, noon - 0.5) == noon - 86400
