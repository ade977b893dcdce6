"""Durable timers (issue 16.1): ``ctx.sleep``/``ctx.sleep_until`` pause a run SLEEPING,
release the worker, and the run goes on once its due time has come.

Every behaviour test runs on LMDB, memory and PostgreSQL homes, with the engine's clock
in the test's hands (``now``); the watcher tests use the real clock.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import sys
import threading
import time

import bide
import pytest
from bide.cli import main
from click.testing import CliRunner
from conftest import APPS, count_lines, open_on

sys.path.insert(0, str(APPS))
import timer_app  # noqa: E402

T0 = 1_800_000_000.0


@pytest.fixture
def effects(tmp_path, monkeypatch):
    path = tmp_path / "effects.log"
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(path))
    return path


@pytest.fixture
def now() -> list[float]:
    return [T0]


@pytest.fixture(params=["lmdb", "memory", "postgres"])
def any_engine(request, home, now):
    with open_on(request.param, request, home, lambda: now[0]) as eng:
        eng.register(timer_app.flow)
        yield eng


# -- the API ----------------------------------------------------------------------------
def test_sleep_pauses_the_run_and_it_goes_on_only_once_due(any_engine, now, effects):
    eng = any_engine
    run = eng.start("nap", {"seconds": 5}, run_id="r-1")
    assert run.status == bide.Status.SLEEPING
    assert run.waiting == {"type": "timer", "node_id": "nap", "until": T0 + 5}
    assert eng.show("r-1")["lease"] is None  # the worker is released
    (row,) = eng.pending()
    assert row["kind"] == "timer" and row["until"] == T0 + 5 and row["allowed"] == []
    assert not (eng.doors.requests / f"{row['approval_id']}.json").exists()  # nobody decides

    now[0] = T0 + 4.9
    assert eng.resume("r-1").status == bide.Status.SLEEPING  # not yet: nothing ran
    assert count_lines(effects) == {"node nap r-1": 1, "ping before": 1}
    now[0] = T0 + 5
    run = eng.resume("r-1")
    assert run.status == bide.Status.DONE and run.state["finished"] is True
    assert count_lines(effects) == {"node nap r-1": 2, "ping before": 1, "woke r-1": 1,
                                    "ping after": 1, "node done r-1": 1}
    assert eng.pending() == []  # the timer is recorded elapsed: nothing waits on it
    assert eng.doctor().ok


def test_a_late_resume_keeps_the_first_due_time(any_engine, now, effects):
    """The due time is fixed by the first call: a node run again later does not re-arm."""
    eng = any_engine
    eng.start("nap", {"seconds": 60}, run_id="r-1")
    now[0] = T0 + 3600  # the machine was off past the due time
    assert eng.resume("r-1").status == bide.Status.DONE
    assert count_lines(effects)["woke r-1"] == 1


def test_sleep_zero_and_a_past_time_return_at_once_with_nothing_recorded(any_engine, effects):
    eng = any_engine
    flow = bide.Flow("quick")

    @flow.node(start=True)
    def quick(state, ctx):
        ctx.sleep(0)
        ctx.sleep_until(T0 - 10)
        ctx.sleep_until(datetime.datetime.fromtimestamp(T0 - 1, datetime.timezone.utc))
        return {"ok": True}

    eng.register(flow)
    assert eng.start("quick", run_id="q").status == bide.Status.DONE
    assert eng.pending() == [] and "approval_requested" not in eng.stats()["records"]


@pytest.mark.parametrize("bad, message", [
    (-1, "at or above 0, not -1"),
    (math.nan, "at or above 0, not nan"),
    ("5", "a number of seconds, not '5'"),
    (datetime.datetime(2030, 1, 1), "needs an aware datetime"),
    (math.inf, "a finite time"),
])
def test_a_bad_duration_or_time_fails_the_node_naming_what_was_wrong(any_engine, bad, message):
    eng = any_engine
    flow = bide.Flow("bad")

    @flow.node(start=True)
    def bad_sleep(state, ctx):
        if isinstance(bad, datetime.datetime) or bad == math.inf:
            ctx.sleep_until(bad)
        else:
            ctx.sleep(bad)
        return {}

    eng.register(flow)
    run = eng.start("bad", run_id="b")
    assert run.status == bide.Status.FAILED
    assert "InvalidTimer" in run.error and message in run.error
    assert eng.pending() == []


def test_sleep_until_an_aware_datetime(any_engine, now):
    eng = any_engine
    flow = bide.Flow("alarm")
    when = datetime.datetime.fromtimestamp(T0 + 90, datetime.timezone(datetime.timedelta(hours=2)))

    @flow.node(start=True)
    def alarm(state, ctx):
        ctx.sleep_until(when)
        return {"rang": True}

    eng.register(flow)
    run = eng.start("alarm", run_id="a")
    assert run.status == bide.Status.SLEEPING and run.waiting["until"] == T0 + 90
    now[0] = T0 + 90
    assert eng.resume("a").state == {"rang": True}


def test_send_items_sleep_each_on_their_own_timer(any_engine, now, effects):
    """A map whose items sleep 3, 1 and 2 s: the run wakes at each due time in turn, and
    an item whose timer is due finishes while the others sleep on."""
    eng = any_engine
    flow = bide.Flow("naps")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    def item(arg, ctx):
        ctx.sleep(arg["n"])
        timer_app.effect(f"item {arg['n']}")
        return {"done": [arg["n"]]}

    flow.route("plan", lambda s: [bide.Send("item", {"n": n}) for n in (3, 1, 2)])
    flow.reducer("done", bide.append)

    eng.register(flow)
    run = eng.start("naps", run_id="m")
    assert run.status == bide.Status.SLEEPING and run.waiting["until"] == T0 + 1
    assert run.waiting["item"].startswith("item[")
    now[0] = T0 + 1
    run = eng.resume("m")
    assert run.status == bide.Status.SLEEPING and run.waiting["until"] == T0 + 2
    now[0] = T0 + 10
    run = eng.resume("m")
    assert run.status == bide.Status.DONE and sorted(run.state["done"]) == [1, 2, 3]
    assert count_lines(effects) == {"item 1": 1, "item 2": 1, "item 3": 1}


def test_an_async_node_sleeps(any_engine, now):
    eng = any_engine
    flow = bide.Flow("async_nap")

    @flow.node(start=True)
    async def snooze(state, ctx):
        await asyncio.sleep(0)
        ctx.sleep(2)
        return {"awake": True}

    eng.register(flow)

    async def go() -> tuple[bide.Run, bide.Run]:
        first = await eng.astart("async_nap", run_id="s")
        now[0] = T0 + 2
        return first, await eng.aresume("s")

    first, second = asyncio.run(go())
    assert first.status == bide.Status.SLEEPING and second.state == {"awake": True}


def test_a_timer_cannot_be_decided_and_a_cancelled_run_leaves_none_pending(any_engine):
    eng = any_engine
    eng.start("nap", {"seconds": 5}, run_id="r-1")
    (row,) = eng.pending()
    with pytest.raises(bide.DecisionNotAllowed):
        eng.decide(row["approval_id"], bide.Decision.APPROVE)
    assert eng.get("r-1").status == bide.Status.SLEEPING
    eng.cancel("r-1")
    assert eng.get("r-1").status == bide.Status.CANCELLED and eng.pending() == []


# -- the CLI ----------------------------------------------------------------------------
def test_runs_show_and_pending_say_until_when(tmp_path, effects):
    home = tmp_path / "home"
    with bide.open(home, durability="fast") as eng:
        eng.register(timer_app.flow)
        eng.start("nap", {"seconds": 30}, run_id="r-1")
        eng.start("nap", {"seconds": 0.01}, run_id="r-2")
    time.sleep(0.05)
    cli = CliRunner()
    out = cli.invoke(main, ["runs", "--home", str(home)]).output
    assert "SLEEPING" in out and "timer (nap) until " in out
    assert "(in 29s)" in out or "(in 30s)" in out
    assert "(overdue 0s)" in out  # r-2: due, no watcher has resumed it yet
    show = cli.invoke(main, ["show", "r-1", "--home", str(home)]).output
    assert "timer in node nap until " in show
    pending = cli.invoke(main, ["pending", "--home", str(home)]).output
    assert "timer" in pending and "overdue 0s" in pending


# -- the watcher ------------------------------------------------------------------------
def serve(eng: bide.Engine) -> tuple[bide.Watcher, threading.Thread]:
    watcher = bide.Watcher(eng, log=lambda line: None)
    thread = threading.Thread(target=watcher.serve, daemon=True)
    thread.start()
    return watcher, thread


def wait_for(check, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.002)


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_an_idle_watcher_resumes_a_sleeping_run_on_time(kind, request, home, effects):
    """No rescan falls near the due time (rescan 30 s): the watcher wakes for it."""
    with open_on(kind, request, home, time.time) as eng:
        eng.register(timer_app.flow)
        eng.submit("nap", {"seconds": 0.5}, run_id="r-1")  # the watcher's first pass runs it
        watcher = bide.Watcher(eng, log=lambda line: None, rescan=30)
        thread = threading.Thread(target=watcher.serve, daemon=True)
        thread.start()
        try:
            wait_for(lambda: eng.get("r-1").status == bide.Status.SLEEPING)
            until = eng.get("r-1").waiting["until"]
            wait_for(lambda: eng.get("r-1").status == bide.Status.DONE)
            late = eng.get("r-1").updated_at - until
            assert 0 <= late < 2.0, late  # generous: bench timers measures ~ms
        finally:
            watcher.stop.set()
            thread.join(10)
        assert not thread.is_alive()
    assert count_lines(effects)["woke r-1"] == 1


def test_a_watcher_started_after_the_due_time_resumes_at_once(home, effects):
    with bide.open(home, durability="fast") as eng:
        eng.register(timer_app.flow)
        eng.start("nap", {"seconds": 0.05}, run_id="r-1")
        time.sleep(0.1)
        assert eng.get("r-1").status == bide.Status.SLEEPING  # overdue: nobody served it
        report = bide.Watcher(eng, log=lambda line: None).once()
        assert [r.status for r in report["runs"]] == [bide.Status.DONE]
    assert count_lines(effects)["woke r-1"] == 1
