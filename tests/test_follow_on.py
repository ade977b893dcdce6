"""``follow_on``: the follow ``bide log --follow`` and ``bide serve``'s run stream share.

A store that cannot be read is waited out (told once per outage, and again when it
is back) and the follow goes on from the last event yielded: no gap, no repeat; a
stop set during an outage ends it. The real outages (a PostgreSQL server stopped)
are in test_pg_outage_follow.py and test_pg_restart_loops.py.
"""

from __future__ import annotations

import asyncio
import threading
import time

import bide
import pytest
from bide import Status
from bide.engine.base.errors import StoreError, UnknownRun
from bide.engine.read import follow as following
from bide.formats import RunCreated, StatusChanged

DEADLINE = 10.0


def flaky_reads(monkeypatch: pytest.MonkeyPatch, fail: list[bool]) -> None:
    """Each read fails while ``fail[0]`` is set, as a store that is away does."""
    real = following._read

    def read(store, run_id, cursor):
        if fail[0]:
            raise StoreError("the server is away (test)")
        return real(store, run_id, cursor)

    monkeypatch.setattr(following, "_read", read)


def test_an_outage_is_told_once_and_the_follow_goes_on_without_gap_or_repeat(
        store, monkeypatch):
    store.commit([RunCreated(run_id="r", flow="job", at=1.0)])
    fail, said = [False], []
    flaky_reads(monkeypatch, fail)
    outage = following.Outage(0.01, 0.05, away=lambda exc: said.append(f"away: {exc}"),
                              back=lambda: said.append("back"))
    events = following.follow_on(store, "r", outage, fallback=0.05)
    kinds = [next(events).kind]  # run_created, then the follow waits for more
    fail[0] = True

    def later() -> None:  # the store comes back with the run finished meanwhile
        time.sleep(0.3)
        store.commit([StatusChanged(run_id="r", status=Status.RUNNING)])
        store.commit([StatusChanged(run_id="r", status=Status.DONE)])
        fail[0] = False

    thread = threading.Thread(target=later, name="test-outage", daemon=True)
    thread.start()
    try:
        kinds += [e.kind for e in events]  # ends: the run is done
    finally:
        events.close()
        thread.join(DEADLINE)
    assert kinds == ["run_created", "status_changed", "status_changed"]
    assert said == ["away: the server is away (test)", "back"]


def test_a_store_away_when_the_follow_starts_is_waited_out_too(store, monkeypatch):
    """The follow's first look (does the run exist?) is a read as well: a store away at
    that moment is an outage like any, not the end of the follow."""
    store.commit([RunCreated(run_id="r", flow="job", at=1.0),
                  StatusChanged(run_id="r", status=Status.DONE)])
    real, failed, said = store.reader, [0], []

    def reader():
        if failed[0] < 3:
            failed[0] += 1
            raise StoreError("the server is away (test)")
        return real()

    monkeypatch.setattr(store, "reader", reader)
    outage = following.Outage(0.01, 0.05, away=lambda exc: said.append("away"),
                              back=lambda: said.append("back"))
    events = following.follow_on(store, "r", outage)
    assert [e.kind for e in events] == ["run_created", "status_changed"]
    assert said == ["away", "back"] and failed[0] == 3


def test_a_stop_set_during_an_outage_ends_the_follow(store, monkeypatch):
    store.commit([RunCreated(run_id="r", flow="job", at=1.0)])
    fail = [True]
    flaky_reads(monkeypatch, fail)
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    events = following.follow_on(store, "r", following.Outage(0.05, 0.1), stop=stop)
    assert list(events) == []
    assert time.monotonic() - started < DEADLINE


def test_an_unknown_run_is_refused_at_once(store):
    with pytest.raises(UnknownRun):
        following.follow_on(store, "nope", following.Outage(0.1, 1.0))


class Away:
    """A finished run on an engine whose reads fail for 0.2 s, and an outage that says
    when the store went away and came back."""

    def __init__(self, eng: bide.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
        flow = bide.Flow("one")

        @flow.node(start=True)
        def only(state, ctx):
            return {"n": 1}

        eng.register(flow)
        self.run_id = eng.start("one", {"n": 0}).run_id
        self.fail, self.said = [True], []
        flaky_reads(monkeypatch, self.fail)
        threading.Timer(0.2, lambda: self.fail.__setitem__(0, False)).start()
        self.outage = bide.Outage(0.01, 0.05, away=lambda exc: self.said.append("away"),
                                  back=lambda: self.said.append("back"))


def test_engine_follow_takes_an_outage_to_wait_out(tmp_path, monkeypatch):
    with bide.open(tmp_path / "home", durability="fast") as eng:
        away = Away(eng, monkeypatch)
        events = list(eng.follow(away.run_id, outage=away.outage))
        assert [e.to_dict() for e in events] == eng.log(away.run_id)
        assert away.said == ["away", "back"]
        with pytest.raises(ValueError, match="timeout or an outage"):
            eng.follow(away.run_id, timeout=1.0, outage=away.outage)
        with pytest.raises(bide.StoreError):  # without an outage: the caller's call
            away.fail[0] = True
            list(eng.follow(away.run_id))


def test_engine_afollow_takes_an_outage_too(tmp_path, monkeypatch):
    with bide.open(tmp_path / "home", durability="fast") as eng:
        away = Away(eng, monkeypatch)

        async def follow_all() -> list:
            return [e async for e in eng.afollow(away.run_id, outage=away.outage,
                                                 fallback=0.05)]

        async def both() -> None:
            async for _ in eng.afollow(away.run_id, timeout=1.0, outage=away.outage):
                pass

        events = asyncio.run(asyncio.wait_for(follow_all(), DEADLINE))
        assert [e.to_dict() for e in events] == eng.log(away.run_id)
        assert away.said == ["away", "back"]
        with pytest.raises(ValueError, match="timeout or an outage"):
            asyncio.run(asyncio.wait_for(both(), DEADLINE))
