"""A watcher resumes a run waiting for a signal when the signal comes: a signal file in
a directory home's inbox, or ``engine.signal`` from another process's engine on a
PostgreSQL home (its NOTIFY); and, on PostgreSQL, when the wait's timeout falls due
(the waker's timer from ``RunView.workable_at``), on a directory home at the watcher's
rescan. Every wait has a deadline."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import bide
import pytest
from bide.engine.human.signal_files import drop_signal
from conftest import APPS, watched
from polling import wait_for

sys.path.insert(0, str(APPS))
import signal_app  # noqa: E402

DEADLINE = 30.0


@pytest.fixture(params=["lmdb", "postgres"])
def served(request, home) -> Iterator[tuple[bide.Engine, bide.Engine]]:
    """A watcher serving one engine in a thread, and a second engine (another client)."""
    with watched(request, home, signal_app.flow, signal_app.patient) as engines:
        yield engines


def status(eng: bide.Engine, run_id: str) -> bide.Status:
    return eng.get(run_id).status


def test_a_watcher_resumes_a_run_when_its_signals_come(served):
    eng, client = served
    client.start("courier", run_id="r-1")
    if client is eng:  # a directory home: the door is the inbox
        drop_signal(eng.doors.inbox, "r-1", "parcel", "a")
    else:
        client.signal("r-1", "parcel", "a")
    t0 = time.monotonic()
    assert wait_for(lambda: _taken(eng) == 1
                    and status(eng, "r-1") == bide.Status.WAITING_SIGNAL, DEADLINE)
    client.signal("r-1", "parcel", "b") if client is not eng else \
        drop_signal(eng.doors.inbox, "r-1", "parcel", "b")
    assert wait_for(lambda: status(eng, "r-1") == bide.Status.DONE, DEADLINE)
    print(f"two signals to DONE: {(time.monotonic() - t0) * 1000:.0f} ms")
    assert eng.get("r-1").state["shipped"] == "a+b"


def _taken(eng: bide.Engine) -> int:
    with eng.store.reader() as r:
        return sum(1 for _, t in r.run_entries("r-1") if t == "signal_consumed")


def test_a_watcher_returns_the_default_when_the_wait_times_out(served):
    """PostgreSQL: the waker's timer; a directory home: its rescan (every second) until the
    timers seam of issue 16.1 reaches its loop."""
    eng, client = served
    run = client.start("patient", {"timeout": 0.5}, run_id="p-1")
    assert run.status == bide.Status.WAITING_SIGNAL
    t0 = time.monotonic()
    assert wait_for(lambda: status(eng, "p-1") == bide.Status.DONE, DEADLINE)
    took = time.monotonic() - t0
    assert eng.get("p-1").state["got"] == "nobody"
    # on PostgreSQL by the waker's timer, not its full rescan (every 30 s); loose for load
    assert took < 10, f"the timeout was served after {took:.1f}s"
    print(f"timeout 0.5s served after {took * 1000:.0f} ms")
