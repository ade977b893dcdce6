"""A read of the PostgreSQL store survives a lost connection or a server restart.

The bug: a connection cut or a restart during a read (``PostgresStore.reader()``) was
not retried like a write; the worker gave up holding the run's lease, so the run
stalled until the lease expired and the retake cost it one of its attempts. Now the
reader takes a new snapshot and answers every earlier query again (it goes on only
if each answer is the same), and a worker that gives up lets its lease go at once.
"""

from __future__ import annotations

from typing import Any

import bide
import pytest
from bide import Status
from bide.formats import RunCreated, StatusChanged
from extras import need

psycopg = need("psycopg")
from bide.engine.postgres.reader import ReadChanged  # noqa: E402  (needs psycopg)
from bide.engine.postgres.store import PostgresStore  # noqa: E402


def _cut(pg_cluster: Any, pid: int) -> None:
    """End one server session from outside, as a cut connection ends it."""
    with psycopg.connect(pg_cluster.url(), autocommit=True, connect_timeout=10) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.fixture
def store(pg_url: str):
    s = PostgresStore(pg_url, durability="fast", reconnect_timeout=20)
    s.commit([RunCreated(run_id=f"r{i}", flow="f", at=1.0) for i in range(3)])
    yield s
    s.close()


def test_a_read_cut_midway_goes_on_with_the_same_answers(store, pg_cluster):
    with store.reader() as r:
        assert r.head("r0").status == "RUNNING"
        _cut(pg_cluster, r.conn.info.backend_pid)
        assert r.head("r1").status == "RUNNING"  # on a new connection, r0 read again
        assert [h.run_id for h in r.heads()] == ["r0", "r1", "r2"]


def test_a_read_cut_while_the_store_changed_says_so(store, pg_cluster):
    with pytest.raises(ReadChanged, match="read again"), store.reader() as r:
        assert r.head("r0").status == "RUNNING"
        _cut(pg_cluster, r.conn.info.backend_pid)
        store.commit([StatusChanged(run_id="r0", status="RUNNING", reason="moved")])
        r.head("r1")  # r0's head is not what this read saw: it cannot go on as one snapshot


def test_a_read_across_a_server_restart_goes_on(store, pg_cluster):
    with store.reader() as r:
        assert r.head("r0").status == "RUNNING"
        pg_cluster.restart("fast")
        assert r.head("r2").status == "RUNNING"


def test_a_worker_whose_read_fails_after_taking_the_lease_lets_it_go(tmp_path, pg_url,
                                                                       monkeypatch):
    """The resume took the lease, then could not read the run: the lease is released
    at once (INTERRUPTED), and the next resume costs no attempt."""
    flow = bide.Flow("f")

    @flow.node(start=True)
    def node(state, ctx):
        return {"ok": True}

    with bide.open(pg_url, local=tmp_path / "l") as eng:
        eng.register(flow)
        eng.submit("f", run_id="r")
        real = eng._cursor
        fail = [True]

        def cursor(head):
            if fail[0]:
                fail[0] = False
                raise bide.StoreError("cannot reach PostgreSQL (a test's cut)")
            return real(head)

        monkeypatch.setattr(eng, "_cursor", cursor)
        with pytest.raises(bide.StoreError, match="a test's cut"):
            eng.resume("r")
        head = eng.get("r").head
        assert head.status == Status.INTERRUPTED and head.lease_owner is None
        assert "reading the run failed" in (head.reason or "")
        assert eng.resume("r").status == Status.DONE and eng.get("r").head.attempts == 0
