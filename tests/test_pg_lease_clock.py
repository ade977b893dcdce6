"""Leases on PostgreSQL are judged by the server's clock and renewed under their own lock.

- A host whose clock is minutes ahead does not take over a live lease; one minutes
  behind takes over a dead one (each host's clock used to decide both).
- A renewal does not wait behind the run's own commit (it waited for the run's lock,
  and a slow commit let the lease lapse under a live worker); a takeover and a renewal
  of one run are serialized, so a renewal after a takeover is refused.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import bide
import pytest
from bide import Status
from bide.formats import LeaseAcquired, StatusChanged
from extras import need
from test_pg_concurrency import TIMEOUTS, WAIT, holding, in_thread, joined, setup

need("psycopg")
from bide.engine.postgres.store import PostgresStore  # noqa: E402  (needs psycopg)

SKEW = 300.0  # seconds: a host's clock five minutes off


def _blocking(entered: threading.Event, go_on: threading.Event) -> bide.Flow:
    flow = bide.Flow("long")

    @flow.node(start=True)
    def work(state: Any, ctx: Any) -> dict:
        entered.set()
        assert go_on.wait(WAIT)
        return {"done": True}

    return flow


def test_a_host_whose_clock_is_ahead_does_not_take_over_a_live_lease(tmp_path, pg_url):
    entered, go_on = threading.Event(), threading.Event()
    with bide.open(pg_url, local=tmp_path / "a", lease_ttl=2.0) as a, \
            bide.open(pg_url, local=tmp_path / "b", lease_ttl=2.0,
                      clock=lambda: time.time() + SKEW) as ahead:
        a.register(_blocking(entered, go_on))
        ahead.register(_blocking(threading.Event(), threading.Event()))
        worker, out = in_thread("worker-a", lambda: a.start("long", run_id="r"))
        try:
            assert entered.wait(WAIT)
            report = ahead.recover()  # by its own clock A's lease ended minutes ago
            assert report.advanced == [], report
            head = a.get("r").head
            assert head.status == Status.RUNNING and head.lease_token == 1
        finally:
            go_on.set()
        assert joined(worker, out).status == Status.DONE


def test_a_host_whose_clock_is_behind_takes_over_a_dead_lease(tmp_path, pg_url):
    with bide.open(pg_url, local=tmp_path / "c", lease_ttl=2.0,
                   clock=lambda: time.time() - SKEW) as behind:
        behind.register(_blocking(threading.Event(), threading.Event()))
        behind.submit("long", run_id="r")
        behind.store.commit([  # a worker of another host took it, for half a second
            LeaseAcquired(run_id="r", owner="elsewhere:1:w", token=1, expires_at=0.0, ttl=0.5),
            StatusChanged(run_id="r", status=Status.RUNNING, reason="started")])
        time.sleep(1.0)  # the lease is over by the server's clock (by this host's: not yet)
        flow = bide.Flow("long")

        @flow.node(start=True)
        def work(state: Any, ctx: Any) -> dict:
            return {"done": True}

        behind.register(flow)
        report = behind.recover()
        assert [r.run_id for r in report.advanced] == ["r"], report
        assert behind.get("r").status == Status.DONE


@pytest.fixture
def store(pg_url: str):
    s = PostgresStore(f"{pg_url}&{TIMEOUTS}", durability="fast")
    s.commit([*setup("a")])
    yield s
    s.close()


def test_a_renewal_does_not_wait_for_the_runs_commit(store):
    thread, out, release = holding(store, "a")  # a commit of run a, its transaction open
    try:
        started = time.monotonic()
        assert store.renew_leases([("a", 1, 60.0)]) == [True]
        took = time.monotonic() - started
    finally:
        release.set()
    joined(thread, out)
    assert took < WAIT / 2, took  # it did not wait for the holder (which waited for us)


def test_a_renewal_after_a_takeover_is_refused_and_one_before_it_is_seen(store):
    store.renew_leases([("a", 1, 0.2)])
    with store.reader() as r:  # the grant's expiry is far (setup), the renewal's near
        assert r.lease_expiry("a")[0] == 1
    store.commit(lambda r: [LeaseAcquired(run_id="a", owner="w2", token=2, expires_at=0.0,
                                          ttl=30.0)])
    assert store.renew_leases([("a", 1, 60.0), ("a", 2, 60.0)]) == [False, True]
