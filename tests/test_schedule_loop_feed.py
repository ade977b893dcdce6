"""The schedule thread outlives its change feed failing, on a directory home (LMDB).

LMDB's feed (inotify on ``data.mdb``) reads the store's published transaction id
when woken; a StoreError there (the reader table full, say) once escaped the
thread's wait and stopped the whole watcher ("schedules failed"). Now the thread
drops the feed, says so once, opens it again after a pause, and the schedule fires.
"""

from __future__ import annotations

import sys
import threading

import bide
from bide.engine.base.errors import StoreError
from bide.engine.ops.schedule_loop import ScheduleLoop
from conftest import APPS
from polling import wait_for

sys.path.insert(0, str(APPS))
import schedule_app  # noqa: E402

DEADLINE = 30.0  # generous: a wait this long means it never happened


def test_a_schedule_fires_after_its_lmdb_feed_failed(tmp_path, monkeypatch):
    lines: list[str] = []
    stop = threading.Event()
    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(schedule_app.flow)
        real, reads = eng.store._published, []

        def failing_once() -> int:  # the feed's read of LMDB's version, at its first wake
            reads.append(1)
            if len(reads) == 2:
                raise StoreError("the reader table is full", path=eng.store.path)
            return real()

        monkeypatch.setattr(eng.store, "_published", failing_once)
        started: list[str] = []
        loop = ScheduleLoop(eng, lambda rid, flow: started.append(rid), stop=stop,
                            log=lines.append)
        loop.start()
        try:
            assert wait_for(lambda: len(reads) >= 1, DEADLINE)  # the feed is open
            eng.schedule("beat", "tick", every=1)  # a commit: the feed wakes, and fails
            assert wait_for(lambda: started or stop.is_set(), DEADLINE), lines
            assert wait_for(lambda: len(reads) >= 3, DEADLINE), reads  # opened again
            assert not stop.is_set(), lines
        finally:
            stop.set()
            assert loop.join(DEADLINE)
    assert [x for x in lines if "failed" in x] == [], lines
    assert [x for x in lines if x.startswith("schedules: cannot hear changes")] == [
        "schedules: cannot hear changes (the reader table is full); trying again"]
