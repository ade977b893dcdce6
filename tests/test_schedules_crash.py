"""Schedules across crashes: a worker SIGKILLed at each schedule fault point, then a new
process goes on, on LMDB and PostgreSQL homes. The engine's clock is fixed per process
($SCHEDULE_APP_NOW), so the slots are known. Counted outside the store
(tests/apps/schedule_app.py's effects file): each slot's run makes its effect once, and
a slot whose run was created just before the kill is run, not started again."""

from __future__ import annotations

import json
import signal
from typing import Any

import bide
import pytest
from bide.formats import SCHEDULES_RUN
from conftest import World, count_lines, run_app, world_on

SCHEDULE_POINTS = ("after_schedule_recorded", "after_slot_run_created")
T0 = 1_800_000_000


@pytest.fixture(params=["lmdb", "postgres"])
def world(request, tmp_path) -> World:
    return world_on(request, tmp_path, "SCHEDULE_APP_LOCAL")


def worker(w: World, now: float, *args: str, fault: str | None = None) -> Any:
    """schedule_app at engine time ``now``; its JSON, or None if the fault killed it."""
    env = w.env(SCHEDULE_APP_NOW=str(now))
    proc = run_app("schedule_app.py", w.home, *args, fault=fault, env=env)
    if fault is not None:
        assert proc.returncode == -signal.SIGKILL, (proc.stdout, proc.stderr)
        return None
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def fired(w: World) -> list[str]:
    with w.engine() as eng, eng.store.reader() as r:
        return [t for _, t in r.run_entries(SCHEDULES_RUN) if t == "schedule_fired"]


@pytest.mark.parametrize("fault", ["after_schedule_recorded:1:kill", None])
def test_a_schedule_recorded_before_a_kill_is_kept(world, fault):
    w = world
    if worker(w, T0 + 0.5, "set", "beat", "10", fault=fault) is not None:
        assert fault is None
    assert worker(w, T0 + 10, "once") == [f"s-beat-{T0 + 10}"]
    assert count_lines(w.effects) == {f"tick s-beat-{T0 + 10}": 1}


def test_a_slot_run_created_before_a_kill_runs_once_and_is_not_started_again(world):
    w = world
    worker(w, T0 + 0.5, "set", "beat", "10")
    worker(w, T0 + 10, "once", fault="after_slot_run_created:1:kill")
    with w.engine() as eng:
        assert eng.get(f"s-beat-{T0 + 10}").status == bide.Status.PENDING
        assert eng.schedules()[0].last_slot == T0 + 10
    assert worker(w, T0 + 11, "once") == [f"s-beat-{T0 + 10}"]  # run, not started again
    assert worker(w, T0 + 20, "once") == [f"s-beat-{T0 + 20}"]  # the next slot
    assert count_lines(w.effects) == {f"tick s-beat-{T0 + 10}": 1, f"tick s-beat-{T0 + 20}": 1}
    assert fired(w) == ["schedule_fired"] * 2
    with w.engine() as eng:
        assert eng.doctor().ok
