"""Child runs across crashes (issue 16.3, 16.5): a worker running a parent and its three
children is SIGKILLed at each child boundary (the pause that creates the children, a
child's tool call, a child ended but its parent not told, the parent told but not
resumed), and ``bide watch`` is SIGKILLed mid-child; a new process finishes the parent.

What must hold, counted outside the store (tests/apps/child_app.py's effects file): each
child's charge happens once, the parent is DONE with every child's result, and nothing
else was started (three children, no more). On LMDB and on PostgreSQL homes.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import bide
import pytest
from bide.bench.kit.crashkit import start_worker
from conftest import APPS, World, app_json, count_lines, run_app, world_on
from extras import need

sys.path.insert(0, str(APPS))
import child_app  # noqa: E402

CHILD_POINTS = ("after_parent_paused", "after_child_ended", "after_parent_woken")


@pytest.fixture(params=["lmdb", "postgres"])
def world(request, tmp_path) -> World:
    return world_on(request, tmp_path, "CHILD_APP_LOCAL")


def worker(w: World, *args: str, fault: str | None = None) -> Any:
    """Run child_app in a fresh process; its JSON, or None if the fault killed it."""
    return app_json(run_app("child_app.py", w.home, *args, fault=fault, env=w.env()), fault)


def each_child_once(w: World) -> None:
    charges = {k: n for k, n in count_lines(w.effects).items() if k.startswith("charge ")}
    assert sorted(k.split()[1] for k in charges) == ["0", "1", "2"], charges
    assert set(charges.values()) == {1}, charges
    with w.engine() as eng:
        run = eng.get("p")
        assert run.status == bide.Status.DONE, (run.status, run.error)
        assert sorted(run.state["paid"]) == [0, 10, 20] and run.state["total"] == 30
        kids = eng.show("p")["children"]
        assert len(kids) == child_app.KIDS and {k["status"] for k in kids} == {"DONE"}
        assert len(eng.runs(flow="kid")) == child_app.KIDS  # never a second child
        assert eng.pending() == [] and eng.doctor().ok


@pytest.mark.parametrize("fault", [
    "after_pause_committed:1",  # the parent's pause, with its three children, is durable
    "after_parent_paused:1",  # ... and the worker is about to run them
    "after_tool_effect:2",  # the second child charged, its outcome not recorded
    "after_child_ended:2",  # the second child DONE, its parent's log not told
    "after_parent_woken:3",  # the last child's end told, the parent not resumed
    "after_child_ended:3",
])
def test_a_parent_with_three_children_killed_mid_way_finishes_each_once(world, fault):
    """The issue's done-test, in a worker with no watcher: SIGKILLed, resumed in a new
    process (the parent's resume runs what its children left, then the parent)."""
    w = world
    assert worker(w, "start", "p", fault=f"{fault}:kill") is None
    assert worker(w, "resume", "p")["status"] == "DONE"
    each_child_once(w)


@pytest.mark.parametrize("fault", ["after_child_ended:1", "after_parent_woken:1"])
def test_recover_finishes_a_family_a_crash_left(world, fault):
    """``recover`` (what ``bide watch --once`` does) finds the children and the parent."""
    w = world
    assert worker(w, "start", "p", fault=f"{fault}:kill") is None
    assert worker(w, "recover", "p")["status"] == "DONE"
    each_child_once(w)


def test_a_watcher_killed_mid_child_is_restarted_and_the_family_finishes_once(world):
    """Under ``bide watch`` (workers run the children side by side), the watcher is
    SIGKILLed in a child's tool call; a new watcher finishes every run, each child once."""
    w = world
    with w.engine() as eng:
        eng.register(*child_app.flows)
        eng.submit("family", run_id="p")
    args = ("-m", "bide.cli", "watch", "--home", w.home, *w.doors(), "--app",
            "child_app:flows", "--durability", "fast")
    first = start_worker(*args, fault="after_tool_effect:2:kill", env=w.env())
    assert first.wait(timeout=60) == -signal.SIGKILL, first.communicate()
    first.communicate()
    second = start_worker(*args, env=w.env())
    try:
        end = time.monotonic() + 60
        while True:
            with w.engine() as eng:
                if eng.get("p").status == bide.Status.DONE:
                    break
            assert second.poll() is None, second.communicate()
            assert time.monotonic() < end, "the restarted watcher never finished the parent"
            time.sleep(0.05)
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.communicate(timeout=30)
        except Exception:
            second.kill()
            second.communicate(timeout=30)
    each_child_once(w)



def test_a_childs_end_wakes_a_postgresql_watcher_without_a_rescan(request, tmp_path):
    """The child's end is a commit to its parent's log: its NOTIFY wakes a watcher whose
    rescan is an hour away, and the watcher resumes the parent. The child ends in this
    process (cancelled: a decision would wake the watcher for the child itself)."""
    need("psycopg")
    w = World(request.getfixturevalue("pg_url"), tmp_path / "home", tmp_path / "effects.log",
              "CHILD_APP_LOCAL")
    with w.engine() as eng:
        eng.register(*child_app.flows)
        assert eng.start("guardian", run_id="g").status == bide.Status.WAITING_CHILD
    watch = start_worker("-m", "bide.cli", "watch", "--home", w.home, *w.doors(), "--app",
                         "child_app:flows", "--durability", "fast", "--rescan", "3600",
                         env=w.env())
    try:
        time.sleep(1.0)  # its one rescan at start is over: only a notification wakes it
        with w.engine() as eng:
            assert eng.cancel("g~ask")
            end = time.monotonic() + 30
            while eng.get("g").status != bide.Status.FAILED:
                assert watch.poll() is None, watch.communicate()
                assert time.monotonic() < end, "the watcher never heard the child's end"
                time.sleep(0.02)
            assert "child run 'g~ask' of run 'g' ended CANCELLED" in eng.get("g").error
            with eng.store.reader() as r:  # the watcher resumed it, not this process
                owners = {r.record(seq).owner for seq, rtype in r.run_entries("g")
                          if rtype == "lease_acquired"}
            assert len(owners) == 2 and eng.owner not in owners, owners
    finally:
        watch.send_signal(signal.SIGTERM)
        try:
            watch.communicate(timeout=30)
        except Exception:
            watch.kill()
            watch.communicate(timeout=30)
