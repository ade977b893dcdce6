"""Durable timers across crashes (issue 16.1, 16.5): workers are real processes SIGKILLed
at the timer's boundaries (the pause's commit, a due timer reached, its elapsed record),
and ``bide watch`` itself is SIGKILLed while a run sleeps; a new process goes on.

What must hold, counted outside the store (tests/apps/timer_app.py's effects file): the
tool call before the sleep happens once, the call after it once, the next node once;
the node's own code after the sleep runs again only if the crash came after it ran
(it is the unfinished node). On LMDB and on PostgreSQL homes.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import bide
import pytest
from bide.bench.kit.crashkit import run_worker, start_worker
from conftest import APPS, World, app_json, count_lines, run_app, world_on

sys.path.insert(0, str(APPS))
import timer_app  # noqa: E402

TIMER_POINTS = ("after_pause_committed", "timer_due", "after_timer_elapsed")
ONCE = {"ping before": 1, "ping after": 1, "node done r-1": 1}


@pytest.fixture(params=["lmdb", "postgres"])
def world(request, tmp_path) -> World:
    return world_on(request, tmp_path, "TIMER_APP_LOCAL")


def worker(w: World, *args: str, fault: str | None = None) -> Any:
    """Run timer_app in a fresh process; its JSON, or None if the fault killed it."""
    return app_json(run_app("timer_app.py", w.home, *args, fault=fault, env=w.env()), fault)


def woke_once(w: World, *, woke: int = 1) -> None:
    effects = count_lines(w.effects)
    assert {k: effects.get(k) for k in ONCE} == ONCE, effects
    assert effects["woke r-1"] == woke, effects
    with w.engine() as eng:
        assert eng.get("r-1").status == bide.Status.DONE and eng.pending() == []
        assert eng.doctor().ok


def until(w: World) -> float:
    with w.engine() as eng:
        run = eng.get("r-1")
        assert run.status == bide.Status.SLEEPING, run.status
        return float(run.waiting["until"])


def test_killed_after_the_pause_commit_the_run_sleeps_and_wakes_once(world):
    w = world
    assert worker(w, "start", "r-1", "2", fault="after_pause_committed:1:kill") is None
    due = until(w)
    assert worker(w, "resume", "r-1")["status"] == "SLEEPING"  # before due: nothing runs
    time.sleep(max(0.0, due - time.time()) + 0.01)
    assert worker(w, "resume", "r-1")["status"] == "DONE"
    woke_once(w)


@pytest.mark.parametrize("fault", ["timer_due", "after_timer_elapsed", "after_tool_effect"])
def test_killed_waking_up_the_node_wakes_once(world, fault):
    w = world
    assert worker(w, "start", "r-1", "0.2")["status"] == "SLEEPING"
    time.sleep(max(0.0, until(w) - time.time()) + 0.01)
    # (after_tool_effect: the call after the sleep; the one before it is replayed)
    assert worker(w, "resume", "r-1", fault=f"{fault}:1:kill") is None
    assert worker(w, "resume", "r-1")["status"] == "DONE"
    woke_once(w, woke=2 if fault == "after_tool_effect" else 1)  # killed after it woke?


def test_a_watcher_killed_while_a_run_sleeps_resumes_it_once_after_restart(world):
    """The issue's done-test: a 2 s sleep under ``bide watch``, the watcher SIGKILLed,
    restarted after the due time: the run resumes once, at once."""
    w = world
    with w.engine() as eng:
        eng.register(timer_app.flow)
        eng.submit("nap", {"seconds": 2.0}, run_id="r-1")
    watch = start_worker("-m", "bide.cli", "watch", "--home", w.home, *w.doors(),
                         "--app", "timer_app:flow", "--durability", "fast", env=w.env())
    try:
        end = time.monotonic() + 30
        while True:  # the watcher runs the node up to its sleep
            with w.engine() as eng:
                if eng.get("r-1").status == bide.Status.SLEEPING:
                    break
            assert watch.poll() is None, watch.communicate()
            assert time.monotonic() < end, "the watcher never ran the run"
            time.sleep(0.02)
        watch.send_signal(signal.SIGKILL)
        watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate(timeout=30)
    due = until(w)
    time.sleep(max(0.0, due - time.time()) + 0.2)  # the machine was off past the due time
    assert until(w) == due  # nobody resumed it meanwhile
    once = run_worker("-m", "bide.cli", "watch", "--once", "--home", w.home, *w.doors(),
                      "--app", "timer_app:flow", "--durability", "fast", env=w.env())
    assert once.returncode == 0, once.stderr
    woke_once(w)
    assert count_lines(w.effects)["node nap r-1"] == 2  # paused once, woke once
