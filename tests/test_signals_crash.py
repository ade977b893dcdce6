"""Signals across crashes (issue 16.2's done-test): workers are real processes SIGKILLed
at each signal fault point, then a new process goes on.

What must hold, counted outside the store (tests/apps/signal_app.py's effects file): a
signal sent before the wait and one sent after it (by the API, or as an inbox file)
each arrive once, in order; the node's effect after both waits (a tool call) happens
once; no signal is taken twice. On LMDB and on PostgreSQL homes.
"""

from __future__ import annotations

from typing import Any

import bide
import pytest
from bide.formats import SignalConsumed
from conftest import World, app_json, count_lines, run_app, world_on

SIGNAL_POINTS = ("after_signal_sent", "after_signal_consumed")


@pytest.fixture(params=["lmdb", "postgres"])
def world(request, tmp_path) -> World:
    return world_on(request, tmp_path, "SIGNAL_APP_LOCAL")


def worker(w: World, *args: str, fault: str | None = None, switches: str = "") -> Any:
    """Run signal_app in a fresh process; its JSON, or None if the fault killed it."""
    env = w.env(BIDE_TEST_SWITCHES=switches)
    return app_json(run_app("signal_app.py", w.home, *args, fault=fault, env=env), fault)


def until_it_stands(w: World, action: tuple[str, ...], fault: str | None) -> Any:
    """``action`` with ``fault`` armed; if that killed it, a resume (no fault) goes on."""
    run = worker(w, *action, fault=fault)
    return run if run is not None else worker(w, "resume", "r-1")


def arrived_once(w: World) -> None:
    effects = count_lines(w.effects)
    assert effects.get("ship before+after", 0) == 1, effects
    assert {k for k in effects if k.startswith("got ")} == {"got before", "got after"}
    with w.engine() as eng:
        run = eng.get("r-1")
        assert run.status == bide.Status.DONE and run.state["shipped"] == "before+after"
        with eng.store.reader() as r:
            taken = [rec.signal for seq, t in r.run_entries("r-1") if t == "signal_consumed"
                     if isinstance(rec := r.record(seq), SignalConsumed)]
        assert len(taken) == len(set(taken)) == 2  # two waits, two different signals
        assert eng.doctor().ok


@pytest.mark.parametrize("door", ["api", "file"])
@pytest.mark.parametrize("fault", [f"{p}:1:kill" for p in SIGNAL_POINTS] + [None])
def test_signals_before_and_after_the_wait_arrive_once(world, fault, door):
    w = world
    worker(w, "submit", "r-1")
    sent = worker(w, "signal", "r-1", "parcel", '"before"', fault=fault)  # before the wait
    assert sent is None if fault and fault.startswith("after_signal_sent") else sent
    run = until_it_stands(w, ("resume", "r-1"), fault)
    assert run["status"] == "WAITING_SIGNAL", run  # the second wait
    if door == "api":
        worker(w, "signal", "r-1", "parcel", '"after"', fault=fault)
    else:
        worker(w, "drop", "r-1", "parcel", '"after"')
        worker(w, "inbox", "r-1", fault="after_decision_recorded:1:kill" if fault else None)
        worker(w, "inbox", "r-1")  # a killed one left the file claimed: taken again, once
    run = until_it_stands(w, ("resume", "r-1"), fault)
    assert run["status"] == "DONE", run
    arrived_once(w)


def test_the_negative_control_a_signal_taken_twice_is_seen(world):
    """With the replay of a wait's own take switched off, the node that runs again after
    a kill takes the NEXT signal: the checks above see it (proof they can fail)."""
    w = world
    worker(w, "submit", "r-1")
    for data in ('"before"', '"after"', '"extra"'):
        worker(w, "signal", "r-1", "parcel", data)
    assert worker(w, "resume", "r-1", fault="after_signal_consumed:1:kill",
                  switches="no_signal_replay") is None
    run = worker(w, "resume", "r-1", switches="no_signal_replay")
    assert run["status"] == "DONE" and run["state"]["shipped"] != "before+after"
    with pytest.raises(AssertionError):
        arrived_once(w)
