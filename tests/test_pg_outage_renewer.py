"""A run's lease is renewed again after a PostgreSQL outage longer than the store's
reconnect time.

The bug this reproduces: the process's lease renewer ended a run's renewals at the
first renewal that raised, so a worker that went on after the server came back held
no lease, and another watcher could take the run over needlessly. Now the renewer
tries again (backing off) while the worker runs; a worker whose lease was taken over
meanwhile learns it at its next commit (``StaleLease``, the fencing token).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import bide
from bide import Status
from bide.engine.base.errors import StaleLease
from bide.formats import LeaseAcquired
from extras import need
from pg_outage_helpers import give_up_within, server_away
from polling import wait_for

need("psycopg")

DEADLINE = 30.0  # generous: a wait this long means it never happened
TTL = 0.9  # the lease's time to live; renewed every 0.3 s
OUTAGE = 1.2  # longer than the store's reconnect time (0.2 s) and than the lease


def _blocking_flow(entered: threading.Event, go_on: threading.Event) -> bide.Flow:
    flow = bide.Flow("long")

    @flow.node(start=True)
    def work(state: Any, ctx: Any) -> dict:
        entered.set()
        assert go_on.wait(DEADLINE)
        return {"done": True}

    return flow


def _started(eng: Any, out: list) -> threading.Thread:
    def run() -> None:
        try:
            out.append(eng.start("long", run_id="r"))
        except Exception as exc:  # the test asserts on it
            out.append(exc)

    worker = threading.Thread(target=run, name="test-worker", daemon=True)
    worker.start()
    return worker


def _outage(pg_cluster: Any) -> float:
    """Stop the server as a crash would, keep it away, start it; when it was back."""
    with server_away(pg_cluster):
        time.sleep(OUTAGE)
    return time.time()


def _lease(eng: Any) -> tuple[int, float]:
    """``(token, expires_at)``: the latest renewal's expiry, else the acquired one's."""
    with eng.store.reader() as r:
        head, renewed = r.head("r"), r.lease_expiry("r")
    if renewed is not None and renewed[0] == head.lease_token:
        return renewed
    return head.lease_token, head.lease_expires


def _expires(eng: Any) -> float:
    return _lease(eng)[1]


def test_the_lease_is_renewed_again_once_the_server_is_back(tmp_path, pg_cluster, pg_url):
    entered, go_on, out = threading.Event(), threading.Event(), []
    with bide.open(pg_url, local=tmp_path, durability="durable", lease_ttl=TTL) as eng:
        eng.register(_blocking_flow(entered, go_on))
        give_up_within(eng.store, 0.2)
        worker = _started(eng, out)
        try:
            assert entered.wait(DEADLINE)
            back = _outage(pg_cluster)
            # renewed after the outage: its expiry is past the restart plus most of a ttl
            assert wait_for(lambda: _expires(eng) > back + TTL / 2, DEADLINE), _expires(eng)
        finally:
            go_on.set()
            worker.join(DEADLINE)
        assert not worker.is_alive()
        assert [getattr(x, "status", x) for x in out] == [Status.DONE], out


def test_a_worker_whose_lease_was_taken_in_the_outage_is_refused_at_its_next_commit(
        tmp_path, pg_cluster, pg_url):
    entered, go_on, out = threading.Event(), threading.Event(), []
    with bide.open(pg_url, local=tmp_path, durability="durable", lease_ttl=TTL) as eng:
        eng.register(_blocking_flow(entered, go_on))
        give_up_within(eng.store, 0.2)
        worker = _started(eng, out)
        try:
            assert entered.wait(DEADLINE)
            token, _ = _lease(eng)
            _outage(pg_cluster)
            # another watcher takes the run over (its lease had expired in the outage)
            eng.store.commit([LeaseAcquired(run_id="r", owner="thief", token=token + 1,
                                            expires_at=time.time() + 3600)])
        finally:
            go_on.set()
            worker.join(DEADLINE)
        assert not worker.is_alive()
        assert len(out) == 1 and isinstance(out[0], StaleLease), out  # fencing refused it
        assert _lease(eng)[0] == token + 1  # the thief's lease stands
