"""Signals (issue 16.2): ``ctx.wait_for``, WAITING_SIGNAL, ``engine.signal``; a durable
per-run queue, consumed one per wait, in order, once.

Every behaviour test runs on LMDB, memory and PostgreSQL homes (``any_engine``).
"""

from __future__ import annotations

import asyncio
import sys
import time

import bide
import pytest
from conftest import APPS, open_on

sys.path.insert(0, str(APPS))
import signal_app  # noqa: E402


@pytest.fixture
def now() -> list[float | None]:
    """The engine's clock: the real time until a test sets ``now[0]``."""
    return [None]


@pytest.fixture(params=["lmdb", "memory", "postgres"])
def any_engine(request, home, now):
    with open_on(request.param, request, home,
                 lambda: time.time() if now[0] is None else now[0]) as eng:
        eng.register(signal_app.flow, signal_app.patient)
        yield eng


def test_wait_pauses_then_signal_resumes(any_engine):
    eng = any_engine
    run = eng.start("courier", run_id="r-1")
    assert run.status == bide.Status.WAITING_SIGNAL
    assert run.waiting == {"type": "signal", "name": "parcel", "node_id": "listen"}
    assert eng.resume("r-1").status == bide.Status.WAITING_SIGNAL  # nothing sent yet
    eng.signal("r-1", "parcel", "a")
    run = eng.resume("r-1")
    assert run.status == bide.Status.WAITING_SIGNAL  # the second wait
    eng.signal("r-1", "parcel", {"n": 2})
    run = eng.resume("r-1")
    assert run.status == bide.Status.DONE
    assert run.state["shipped"] == "a+{'n': 2}"


def test_signals_sent_before_the_wait_are_kept_in_order(any_engine):
    eng = any_engine
    eng.submit("courier", run_id="r-1")
    eng.signal("r-1", "parcel", "first")
    eng.signal("r-1", "other", "ignored")
    eng.signal("r-1", "parcel", "second")
    eng.signal("r-1", "parcel", "third")  # stays queued: only two waits
    run = eng.resume("r-1")
    assert run.status == bide.Status.DONE
    assert run.state["shipped"] == "first+second"


def test_a_signal_to_a_finished_or_unknown_run_is_refused(any_engine):
    eng = any_engine
    with pytest.raises(bide.UnknownRun):
        eng.signal("nope", "parcel")
    eng.submit("courier", run_id="r-1")
    eng.signal("r-1", "parcel", 1)
    eng.signal("r-1", "parcel", 2)
    assert eng.resume("r-1").status == bide.Status.DONE
    with pytest.raises(bide.SignalRefused, match="DONE"):
        eng.signal("r-1", "parcel", 3)
    with pytest.raises(bide.SignalRefused, match="non-empty name"):
        eng.signal("r-1", "", 3)


def test_signal_data_must_be_storable(any_engine):
    eng = any_engine
    eng.submit("courier", run_id="r-1")
    with pytest.raises(bide.NotSerializable):
        eng.signal("r-1", "parcel", object())
    eng.signal("r-1", "parcel", "ok")  # nothing was stored by the refused one
    eng.signal("r-1", "parcel", "ok2")
    assert eng.resume("r-1").state["shipped"] == "ok+ok2"


def test_timeout_returns_the_default(any_engine, now):
    eng = any_engine
    now[0] = 1000.0
    run = eng.start("patient", {"timeout": 30}, run_id="r-1")
    assert run.status == bide.Status.WAITING_SIGNAL
    assert run.waiting["until"] == 1030.0
    now[0] = 1020.0
    assert eng.resume("r-1").status == bide.Status.WAITING_SIGNAL  # before its due time
    assert eng.get("r-1").waiting["until"] == 1030.0  # the deadline holds across re-runs
    now[0] = 1031.0
    run = eng.resume("r-1")
    assert run.status == bide.Status.DONE and run.state["got"] == "nobody"


def test_a_signal_before_the_timeout_wins(any_engine, now):
    eng = any_engine
    now[0] = 1000.0
    eng.start("patient", {"timeout": 30}, run_id="r-1")
    eng.signal("r-1", "ping", "pong")
    now[0] = 2000.0  # later than the deadline, but the signal came first
    assert eng.resume("r-1").state["got"] == "pong"


def test_async_signal(any_engine):
    eng = any_engine
    eng.start("courier", run_id="r-1")

    async def go() -> None:
        await eng.asignal("r-1", "parcel", "x")
        await eng.asignal("r-1", "parcel", "y")

    asyncio.run(go())
    assert eng.resume("r-1").state["shipped"] == "x+y"
