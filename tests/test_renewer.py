"""One thread renews every lease of the process (engine/run/renewer.py)."""

from __future__ import annotations

import threading
import time

import bide
from bide.engine.run.renewer import Renewer
from polling import wait_for


def test_each_lease_is_renewed_at_its_interval_until_ended():
    calls: dict[str, int] = {"a": 0, "b": 0}
    r = Renewer(time.monotonic, name="test-renewer")

    def renew(name: str):
        def once() -> bool:
            calls[name] += 1
            return True
        return once

    end_a = r.add(renew("a"), 0.02)
    end_b = r.add(renew("b"), 0.02)
    assert wait_for(lambda: calls["a"] >= 3 and calls["b"] >= 3, 10)
    end_a()
    time.sleep(0.05)  # a renewal already under way may land once more
    seen = calls["a"]
    assert wait_for(lambda: calls["b"] >= seen + 5, 10)
    assert calls["a"] == seen  # ended: never again
    end_b()


def test_a_refused_or_failing_renewal_ends_that_lease_only():
    calls = {"refused": 0, "broken": 0, "fine": 0}
    r = Renewer(time.monotonic, name="test-renewer")

    def refused() -> bool:
        calls["refused"] += 1
        return False

    def broken() -> bool:
        calls["broken"] += 1
        raise RuntimeError("store closed")

    def fine() -> bool:
        calls["fine"] += 1
        return True

    for fn in (refused, broken, fine):
        r.add(fn, 0.01)
    assert wait_for(lambda: calls["fine"] >= 10, 10)
    assert calls["refused"] == 1 and calls["broken"] == 1


def test_a_run_longer_than_its_lease_keeps_it_and_no_thread_per_run(tmp_path):
    """A node slower than lease_ttl: the lease is renewed, so the run is not an orphan."""
    seen: list[list[str]] = []
    flow = bide.Flow("long")

    @flow.node(start=True)
    def slow(state, ctx):
        time.sleep(0.6)
        seen.append([t.name for t in threading.enumerate() if t.name.startswith("bide-lease")])
        return {"x": 1}

    with bide.open(tmp_path / "home", durability="fast", lease_ttl=0.3) as eng:
        eng.register(flow)
        run = eng.start("long", run_id="r")
        assert run.status == bide.Status.DONE
        with eng.store.reader() as r:
            token, expires = r.lease_expiry("r")
        assert token == 1 and expires > eng.get("r").head.lease_expires  # renewed
    assert seen == [["bide-lease-renewer"]]


def test_a_renewal_failing_with_a_store_error_is_tried_again_and_said_once(caplog):
    """A store outage (StoreError) does not end the lease's renewals: they go on,
    backing off, and the renewer says so once per outage and once when it is over."""
    from bide.engine.base.errors import StoreError

    calls, away = {"n": 0}, threading.Event()
    away.set()

    def renew() -> bool:
        calls["n"] += 1
        if away.is_set():
            raise StoreError("cannot reach PostgreSQL")
        return True

    r = Renewer(time.monotonic, name="test-renewer")
    with caplog.at_level("WARNING", logger="bide.renewer"):
        end = r.add(renew, 0.05)
        try:
            assert wait_for(lambda: calls["n"] >= 4, 10)  # tried again and again
            away.clear()
            seen = calls["n"]
            assert wait_for(lambda: calls["n"] >= seen + 3, 10)  # and renewed after
        finally:
            end()
    said = [rec.getMessage() for rec in caplog.records if rec.name == "bide.renewer"]
    assert len(said) == 2 and "failing" in said[0] and "succeed again" in said[1], said


def test_a_renewal_that_fails_after_its_lease_ended_is_not_reported(caplog):
    """The lease ends (its run finished, its engine closed the store) while the renewer
    is renewing it: the closed store's error is no outage, so nothing is said (it was
    said as one, into whatever test ran next)."""
    from bide.engine.base.errors import StoreError

    calls: dict[str, int] = {"n": 0}
    ended = threading.Event()
    r = Renewer(time.monotonic, name="test-renewer")
    with caplog.at_level("WARNING", logger="bide.renewer"):
        end: list = []

        def renew() -> bool:
            calls["n"] += 1
            end[0]()  # the run ends and its store closes while this renewal runs
            ended.set()
            raise StoreError("store error: Attempt to operate on closed/deleted/dropped object.")

        end.append(r.add(renew, 0.01))
        assert ended.wait(10)
        time.sleep(0.1)  # time for a report (and for a retry, which must not come)
    said = [rec.getMessage() for rec in caplog.records if rec.name == "bide.renewer"]
    assert said == [] and calls["n"] == 1, (said, calls)
