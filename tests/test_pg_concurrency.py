"""The PostgreSQL store under concurrency and failure, on the real test server.

No global lock (one run's open transaction does not stop another run's
commit), one run's commits queue on its head row, and a connection lost
during a transaction or during COMMIT is resolved by re-reading, never
assumed. Every wait has a deadline; connections carry statement and lock
timeouts, so a regression fails instead of hanging.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bide.engine.upkeep import maintenance
from bide.formats import LeaseAcquired, RunCreated, StatusChanged
from extras import need

psycopg = need("psycopg")
from bide.engine.postgres.store import PostgresStore  # noqa: E402  (needs psycopg)

WAIT = 10.0  # seconds any wait in these tests may take before it counts as a hang
TIMEOUTS = "options=-c%20statement_timeout%3D20000%20-c%20lock_timeout%3D20000"


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(f"{pg_url}&{TIMEOUTS}", durability="fast")
    s.commit([*setup("a"), *setup("b")])
    yield s
    s.close()


def setup(run_id: str) -> list[Any]:
    return [RunCreated(run_id=run_id, flow="f", at=1.0),
            LeaseAcquired(run_id=run_id, owner="w", token=1, expires_at=9e12)]


def step(run_id: str, reason: str) -> StatusChanged:
    return StatusChanged(run_id=run_id, status="RUNNING", reason=reason)


def in_thread(name: str, fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` in a named daemon thread; its result or exception lands in the list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test thread, which re-raises it
            out.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, out


def joined(thread: threading.Thread, out: list[Any]) -> Any:
    thread.join(WAIT)
    assert not thread.is_alive(), f"{thread.name} did not finish within {WAIT}s"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def holding(store: PostgresStore, run_id: str) -> tuple[threading.Thread, list[Any],
                                                         threading.Event]:
    """A fenced commit of ``run_id`` that keeps its transaction open until released."""
    inside, release = threading.Event(), threading.Event()

    def records(reader: Any) -> list[Any]:
        inside.set()
        assert release.wait(WAIT), "never released"
        return [step(run_id, "held")]

    thread, out = in_thread(f"holds-{run_id}",
                            lambda: store.commit(records, fence=(run_id, 1)))
    assert inside.wait(WAIT)
    return thread, out, release


def reasons(store: PostgresStore, run_id: str) -> list[str | None]:
    with store.reader() as r:
        return [r.record(seq).reason for seq, t in r.run_entries(run_id)
                if t == "status_changed"]


def test_one_runs_open_transaction_does_not_stop_another_runs_commit(store):
    thread, out, release = holding(store, "a")
    started = time.monotonic()
    try:
        store.commit([step("b", "free")], fence=("b", 1))
        took = time.monotonic() - started
        assert reasons(store, "a") == []  # a's transaction is still open
    finally:
        release.set()
    joined(thread, out)
    assert took < WAIT / 2, f"run b's commit waited {took:.1f}s for run a's transaction"
    assert reasons(store, "b") == ["free"] and reasons(store, "a") == ["held"]


def test_one_runs_commits_queue_on_its_head_row(store):
    thread, out, release = holding(store, "a")
    try:
        waiter, waited = in_thread("waits-a", lambda: store.commit([step("a", "second")],
                                                                   fence=("a", 1)))
        waiter.join(0.5)
        assert waiter.is_alive() and reasons(store, "a") == []  # queued behind the holder
    finally:
        release.set()
    joined(thread, out)
    joined(waiter, waited)
    assert reasons(store, "a") == ["held", "second"]  # in the order the lock gave


def test_a_connection_lost_inside_a_transaction_commits_once_on_retry(store):
    calls = []

    def records(reader: Any) -> list[Any]:
        calls.append(1)
        if len(calls) == 1:  # the server ends this session mid-transaction
            reader.conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return [step("a", "once")]

    store.commit(records, fence=("a", 1))
    assert len(calls) == 2 and reasons(store, "a") == ["once"]


def test_a_commit_whose_connection_died_during_commit_is_found_not_redone(pg_cluster, pg_url):
    """The server commits locally, then waits for a synchronous standby that does not
    exist; its session is terminated there. The client's COMMIT fails with the
    transaction committed: the store must find it, not write it again or give up."""
    store = PostgresStore(f"{pg_url}&{TIMEOUTS}", durability="durable")
    admin = psycopg.connect(pg_cluster.url(), autocommit=True, connect_timeout=10)
    try:
        store.commit(setup("a"))
        dbname = pg_url.split("/")[3].split("?")[0]
        _standby_names(admin, "nobody")
        thread, out = in_thread("commits", lambda: store.commit([step("a", "lost ack")]))
        pid = _poll(lambda: admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event = 'SyncRep'",
            (dbname,)).fetchone())
        admin.execute("SELECT pg_terminate_backend(%s)", (pid[0],))
        _poll(lambda: thread.is_alive() is False or out or None)
        _standby_names(admin, "")  # (this releases waiters: only after the termination)
        assert joined(thread, out) == [2]
        assert reasons(store, "a") == ["lost ack"]
        with store.reader() as r:
            assert [s for s, _ in r.log()] == [0, 1, 2]
    finally:
        try:
            _standby_names(admin, "")
        finally:
            admin.close()
            store.close()


def _standby_names(admin: Any, names: str) -> None:
    admin.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    admin.execute("SELECT pg_reload_conf()")
    with psycopg.connect(admin.info.dsn, autocommit=True, connect_timeout=10) as fresh:
        _poll(lambda: fresh.execute("SHOW synchronous_standby_names").fetchone()[0] == names
              or None)


def _poll(probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while (found := probe()) is None:
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)
    return found


def test_the_store_reconnects_after_an_immediate_server_restart(pg_cluster, pg_url):
    store = PostgresStore(f"{pg_url}&{TIMEOUTS}", durability="durable")
    try:
        store.commit(setup("a"))
        with store.reader() as r:  # leaves an idle pooled connection the restart kills
            assert r.head("a") is not None
        pg_cluster.restart("immediate")
        store.commit([step("a", "after restart")], fence=("a", 1))
        assert reasons(store, "a") == ["after restart"]
        with store.reader() as r:
            seqs = [s for s, _ in r.log()]
            # a sequence skips values after a crash (it logs ahead): a gap, never a reuse
            assert seqs[:2] == [0, 1] and len(seqs) == 3 and seqs[2] >= 2
            assert r.head("a").records == 3 and r.last_seq() == seqs[2]
        assert maintenance.doctor(store).ok  # the gap is not a finding
    finally:
        store.close()


def test_many_threads_committing_to_many_runs_lose_nothing(store):
    def worker(run_id: str) -> None:
        for i in range(20):
            store.commit([step(run_id, str(i))], fence=(run_id, 1))

    runs = ["a", "b"] * 2  # two threads per run: same-run and cross-run contention
    threads = [in_thread(f"w{i}", lambda r=r: worker(r)) for i, r in enumerate(runs)]
    for thread, out in threads:
        joined(thread, out)
    with store.reader() as r:
        assert r.head("a").records == r.head("b").records == 2 + 40
        seqs = [s for s, _ in r.log()]
        assert len(seqs) == len(set(seqs)) == 4 + 80


def test_racing_lease_takers_on_one_run_let_exactly_one_win(pg_url):
    """Each taker reads the head, refuses a held lease, and writes the next token: the
    read and the write must be one atomic step, as under LMDB's single writer."""
    store = PostgresStore(f"{pg_url}&{TIMEOUTS}", durability="fast")
    try:
        store.commit([RunCreated(run_id="r", flow="f", at=1.0)])
        go, all_read = threading.Event(), threading.Barrier(6, timeout=WAIT)

        def take(me: str) -> list[int]:
            calls = []

            def build(reader: Any) -> list[Any]:
                head = reader.head("r")
                if head.lease_owner is not None:
                    raise LookupError(f"held by {head.lease_owner}")
                calls.append(1)
                if len(calls) == 1:  # every taker has read "free" before any writes
                    all_read.wait()
                return [LeaseAcquired(run_id="r", owner=me, token=head.lease_token + 1,
                                      expires_at=9e12)]

            assert go.wait(WAIT)
            return store.commit(build)

        takers = [in_thread(f"taker{i}", lambda i=i: take(f"w{i}")) for i in range(6)]
        go.set()
        won, lost = [], []
        for thread, out in takers:
            try:
                won.append(joined(thread, out))
            except LookupError as exc:
                lost.append(exc)
        assert len(won) == 1 and len(lost) == 5
        with store.reader() as r:
            assert r.head("r").lease_token == 1 and r.head("r").records == 2
    finally:
        store.close()
