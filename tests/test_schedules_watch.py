"""The issue's done-test for schedules: a 2-second schedule served by TWO ``bide watch``
processes, one SIGKILLed and restarted mid-way, starts exactly one run per slot, on a
directory home (LMDB) and on PostgreSQL. Counted outside the store: each run's effect
line (tests/apps/schedule_app.py) appears once; no slot was skipped while one watcher
was down; no slot has two runs or two fired marks."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import bide
import pytest
from bide.bench.kit.crashkit import start_worker
from bide.formats import SCHEDULES_RUN, ScheduleFired
from conftest import APPS, count_lines
from extras import need

sys.path.insert(0, str(APPS))
import schedule_app  # noqa: E402

EVERY = 2
STOP = 30.0  # seconds a stopping watcher may take


@dataclass(frozen=True)
class World:
    home: str
    local: Path
    effects: Path

    @property
    def pg(self) -> bool:
        return self.home.startswith("postgresql://")

    def engine(self) -> bide.Engine:
        return bide.open(self.home, local=self.local if self.pg else None, durability="fast")

    def watch(self, name: str, *extra: str) -> list[str]:
        doors = ["--inbox", str(self.local / name / "inbox"), "--requests",
                 str(self.local / name / "requests")] if self.pg else []
        return ["-m", "bide.cli", "watch", "--home", self.home, *doors, "--app",
                "schedule_app:flow", "--durability", "fast", "--lease-ttl", "2", *extra]

    def env(self) -> dict[str, str]:
        return {"BIDE_TEST_EFFECTS": str(self.effects), "PYTHONPATH": str(APPS)}


@pytest.fixture(params=["lmdb", "postgres"])
def world(request, tmp_path) -> World:
    home = str(tmp_path / "home")
    if request.param == "postgres":
        need("psycopg")
        home = request.getfixturevalue("pg_url")
    return World(home, tmp_path / "home", tmp_path / "effects.log")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    """Stop a watcher (with a deadline); what it printed."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=STOP)
        return out + err
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=STOP)
        raise AssertionError("a watcher did not stop in time") from None


def test_two_watchers_one_killed_start_one_run_per_slot(world):
    w = world
    with w.engine() as eng:
        eng.register(schedule_app.flow)
        first = int(eng.schedule("beat", "tick", every=EVERY).next_due)
    a = start_worker(*w.watch("a"), env=w.env())
    b = start_worker(*w.watch("b"), env=w.env())
    logs = []
    try:
        time.sleep(3.2)
        logs.append(stop(a, signal.SIGKILL))  # mid-way: B serves the slots meanwhile
        time.sleep(2.2)
        a = start_worker(*w.watch("a"), env=w.env())
        time.sleep(3.2)
        with w.engine() as eng:
            eng.unschedule("beat")  # the last slot a watcher must have started is before this
        end = time.time()
    finally:
        logs += [stop(a), stop(b)]
    with w.engine() as eng:
        runs = {r.run_id: r for r in eng.runs(flow="tick")}
        with eng.store.reader() as r:
            fired = [rec.slot for seq, t in r.run_entries(SCHEDULES_RUN) if t == "schedule_fired"
                     if isinstance(rec := r.record(seq), ScheduleFired)]
        assert eng.doctor().ok
    slots = sorted(int(rid.rsplit("-", 1)[1]) for rid in runs)
    assert slots[0] == first, (slots, first, logs)
    due = [s for s in range(first, int(end) + 1, EVERY) if s < end - 0.5]  # before the end
    assert slots[:len(due)] == due, (slots, due, logs)  # none skipped, none twice
    assert len(slots) - len(due) <= 1 and len(due) >= 4, (slots, due)
    assert sorted(fired) == slots  # one fired mark per slot, none twice
    # every run finished: one the killed watcher held was taken over when its lease ended
    assert all(r.status == bide.Status.DONE for r in runs.values()), (runs, logs)
    effects = count_lines(w.effects)
    assert effects == {f"tick {rid}": 1 for rid in runs}, effects  # each run's effect once
