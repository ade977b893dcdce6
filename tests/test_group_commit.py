"""Group commit: threads that commit at once share one LMDB write transaction, and each
still gets its own outcome (its seqs, or its own refusal) as if it had committed alone.

To put several requests in one batch deterministically, a *holder* commits first with
a ``check`` that waits (with a deadline) until the others are queued behind it: the
holder's batch is itself alone, and the queued requests then form the next batch.
Every thread is joined with a deadline; a test fails, never hangs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import lmdb
import pytest
from bide.engine.base.errors import DurabilityLost, StaleLease, StoreError
from bide.engine.storage.group_commit import GroupCommit
from bide.engine.storage.lmdb_store import LMDBStore
from bide.formats import LeaseAcquired, PendingWrite, RunCreated, StatusChanged

DEADLINE = 20.0  # seconds for any wait in these tests; healthy ones take milliseconds


def created(run_id: str) -> RunCreated:
    return RunCreated(run_id=run_id, flow="f", at=1.0)


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def queued(store: LMDBStore) -> int:
    return len(store._commits._queue)


class Outcomes:
    """Run callables in named threads; keep what each returned or raised."""

    def __init__(self) -> None:
        self.got: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []

    def start(self, name: str, fn: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                self.got[name] = fn()
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                self.got[name] = exc

        t = threading.Thread(target=run, name=f"test-{name}", daemon=True)
        self.threads.append(t)
        t.start()

    def join(self) -> dict[str, Any]:
        for t in self.threads:
            t.join(DEADLINE)
        alive = [t.name for t in self.threads if t.is_alive()]
        assert not alive, f"threads still running after {DEADLINE}s: {alive}"
        return self.got


def batched(store: LMDBStore, requests: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run ``requests`` so that they all queue behind a holder and commit as ONE batch
    (the holder creates run "holder", alone in the batch before)."""
    inside = threading.Event()

    def hold(reader: Any) -> None:
        inside.set()
        wait_until(lambda: queued(store) >= len(requests), "the requests to queue")

    out = Outcomes()
    out.start("holder", lambda: store.commit([created("holder")], check=hold))
    assert inside.wait(DEADLINE)
    before = store.batches
    for name, fn in requests.items():
        out.start(name, fn)
    got = out.join()
    assert isinstance(got["holder"], list), got["holder"]
    any_ok = any(not isinstance(v, BaseException) for k, v in got.items() if k != "holder")
    assert store.batches - before == 1 + any_ok, \
        f"the requests did not share one transaction: {store.batches - before - 1} for them"
    return got


def test_queued_commits_share_one_transaction_and_each_gets_its_own_seqs(store):
    names = [f"r{i}" for i in range(6)]
    got = batched(store, {n: (lambda n=n: store.commit([created(n), created(n + "b")]))
                          for n in names})
    seqs = [s for n in names for s in got[n]]
    assert sorted(seqs) == list(range(1, 13))  # gapless after the holder's seq 0
    with store.reader() as r:
        for n in names:  # each caller's seqs hold exactly its own records, in its order
            assert [r.record(s).run_id for s in got[n]] == [n, n + "b"]
            assert r.head(n) is not None


def test_a_stale_fenced_request_in_a_batch_is_refused_while_its_batch_mates_commit(store):
    store.commit([created("r1"), LeaseAcquired(run_id="r1", owner="w1", token=1,
                                               expires_at=9e12),
                  LeaseAcquired(run_id="r1", owner="w2", token=2, expires_at=9e12)])
    refused: list[Any] = []
    store.on_commit(lambda e: refused.append(e) if e.refused else None)
    got = batched(store, {
        "a": lambda: store.commit([created("a")]),
        "stale": lambda: store.commit([StatusChanged(run_id="r1", status="DONE")],
                                      fence=("r1", 1)),
        "live": lambda: store.commit([StatusChanged(run_id="r1", status="FAILED")],
                                     fence=("r1", 2)),
        "b": lambda: store.commit([created("b")]),
    })
    assert isinstance(got["stale"], StaleLease)
    assert all(isinstance(got[n], list) for n in ("a", "live", "b"))
    assert [e.fence for e in refused] == [("r1", 1)]  # the observer saw its own refusal
    with store.reader() as r:
        assert r.head("r1").status == "FAILED"  # the live worker's commit, not the stale one
        assert r.head("a") and r.head("b")
        assert all(r.record(s).status != "DONE" for s, t in r.run_entries("r1")
                   if t == "status_changed")


def test_a_failing_check_or_records_function_fails_alone_in_its_batch(store):
    def refuse(reader: Any) -> None:
        raise RuntimeError("check says no")

    def broken(reader: Any) -> list[Any]:
        raise ValueError("records function failed")

    got = batched(store, {
        "checked": lambda: store.commit([created("checked")], check=refuse),
        "broken": lambda: store.commit(broken),
        "fine": lambda: store.commit([created("fine")]),
    })
    assert isinstance(got["checked"], RuntimeError) and "check says no" in str(got["checked"])
    assert isinstance(got["broken"], ValueError)
    assert got["checked"] is not got["broken"]
    with store.reader() as r:
        assert r.head("fine") and r.head("checked") is None
        assert [r.record(s).run_id for s, _ in r.log()] == ["holder", "fine"]


def test_a_pause_like_base_exception_in_a_batch_reaches_its_own_caller_only(store):
    class Halt(BaseException):
        pass

    def halt(reader: Any) -> None:
        raise Halt

    got = batched(store, {"halt": lambda: store.commit([created("h")], check=halt),
                          "fine": lambda: store.commit([created("fine")])})
    assert isinstance(got["halt"], Halt) and isinstance(got["fine"], list)


def test_a_batch_whose_every_request_fails_writes_nothing(store):
    def refuse(reader: Any) -> None:
        raise RuntimeError("no")

    before = store.env.info()["last_txnid"]
    got = batched(store, {f"x{i}": (lambda: store.commit([created("x")], check=refuse))
                          for i in range(3)})
    assert all(isinstance(got[f"x{i}"], RuntimeError) for i in range(3))
    assert len({id(got[f"x{i}"]) for i in range(3)}) == 3  # each caller its own exception
    assert store.env.info()["last_txnid"] == before + 1  # the holder's only


def test_the_holder_s_own_failure_does_not_fail_the_batch_queued_behind_it(store):
    out = Outcomes()
    entered = threading.Event()

    def hold(reader: Any) -> None:
        entered.set()
        wait_until(lambda: queued(store) >= 2, "two requests to queue")
        raise RuntimeError("holder refused")

    out.start("holder", lambda: store.commit([created("holder")], check=hold))
    assert entered.wait(DEADLINE)
    out.start("a", lambda: store.commit([created("a")]))
    out.start("b", lambda: store.commit([created("b")]))
    got = out.join()
    assert isinstance(got["holder"], RuntimeError)
    assert sorted(got["a"] + got["b"]) == [0, 1]
    with store.reader() as r:
        assert r.head("holder") is None and r.head("a") and r.head("b")


def test_map_growth_inside_a_batch_retries_the_batch_and_loses_nothing(tmp_path):
    store = LMDBStore(tmp_path / "home", durability="fast", map_size=64 << 10)
    try:
        blob = "x" * 30_000
        got = batched(store, {
            f"w{i}": (lambda i=i: store.commit([PendingWrite(
                run_id="holder", task=f"{i}:a:0", superstep=i, node="a",
                ops=[("k", "set", blob)])]))
            for i in range(8)})
        assert all(isinstance(got[f"w{i}"], list) for i in range(8)), got
        assert store.info()["map_size"] > 64 << 10
        with store.reader() as r:
            assert sorted(r.record(got[f"w{i}"][0]).task for i in range(8)) == \
                sorted(f"{i}:a:0" for i in range(8))
            assert r.last_seq() == 8
    finally:
        store.close()


def test_one_commit_needing_many_times_the_map_grows_until_it_fits(tmp_path):
    """Regression: adopting the map size after a growth no commit used yet went back to
    the old size, so a transaction needing more than twice the map retried forever."""
    store = LMDBStore(tmp_path / "home", durability="fast", map_size=64 << 10)
    try:
        done = Outcomes()
        done.start("big", lambda: store.commit([PendingWrite(
            run_id="r", task=f"{i}:a:0", superstep=i, node="a", ops=[("k", "set", "x" * 30_000)])
            for i in range(8)]))
        assert done.join()["big"] == list(range(8))
    finally:
        store.close()


class _FailingCommit:
    """The outer write transaction's commit fails like an fsync error."""

    def __init__(self, txn: Any) -> None:
        self.txn = txn

    def __enter__(self) -> Any:
        return self.txn.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.txn.abort()
        raise lmdb.DiskError("fsync: Input/output error (simulated)")


class _Env:
    def __init__(self, env: Any, fail: list[bool]) -> None:
        self._env, self._fail = env, fail

    def begin(self, write: bool = False, parent: Any = None, **kw: Any) -> Any:
        txn = self._env.begin(write=write, parent=parent, **kw)
        return _FailingCommit(txn) if write and parent is None and self._fail[0] else txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def test_a_failed_flush_tells_every_caller_of_the_batch_with_its_own_error(store):
    fail = [False]
    real = store.env
    store.env = _Env(real, fail)
    out = Outcomes()
    entered = threading.Event()

    def hold(reader: Any) -> None:
        entered.set()
        wait_until(lambda: queued(store) >= 3, "three requests to queue")

    try:
        out.start("holder", lambda: store.commit([created("holder")], check=hold))
        assert entered.wait(DEADLINE)
        fail[0] = True  # the holder's batch is already inside its transaction: it commits
        for n in ("a", "b", "c"):
            out.start(n, lambda n=n: store.commit([created(n)]))
        got = out.join()
    finally:
        store.env = real
    assert got["holder"] == [0]
    errors = [got[n] for n in ("a", "b", "c")]
    assert all(isinstance(e, DurabilityLost) for e in errors)
    assert len({id(e) for e in errors}) == 3
    with store.reader() as r:
        assert r.last_seq() == 0


def test_a_caller_alone_is_its_own_batch_with_no_wait(store):
    before = store.batches
    for i in range(20):
        assert store.commit([created(f"s{i}")]) == [i]
    assert store.batches - before == 20


def test_a_commit_while_holding_a_reader_commits_alone(store):
    store.commit([created("r0")])
    with store.reader() as r:
        assert store.commit([created("r1")]) == [1]
        assert r.head("r1") is None  # the snapshot taken before stays as it was


def test_delete_renew_and_rebuild_serialize_with_batches(store):
    store.commit([created("gone")])  # seq 0
    store.commit([created("r1"), LeaseAcquired(run_id="r1", owner="w", token=1,
                                               expires_at=9e12)])
    got = batched(store, {
        "renew": lambda: store.renew_leases([("r1", 1, 60.0)]),
        "delete": lambda: store.delete(lambda r: [0]),
        "commit": lambda: store.commit([created("r2")]),
    })
    assert got["renew"] == [True] and got["delete"] == [0] and isinstance(got["commit"], list)
    with store.reader() as r:
        token, expires = r.lease_expiry("r1")
        assert token == 1 and r.now() < expires <= r.now() + 60
        assert r.head("gone") is None and r.head("r2") and r.head("holder")


def test_a_follower_whose_leader_thread_died_gets_an_error_not_a_hang():
    queue = GroupCommit(lambda batch: None, "test")
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join(DEADLINE)
    queue._leading = dead  # a leader thread gone without settling its batch (a bug's net)
    with pytest.raises(StoreError, match="outcome is unknown"):
        queue.submit(lambda txn: 1)


@pytest.mark.parametrize("round_", range(50))
def test_many_threads_commit_at_once_every_seq_once(tmp_path, round_):
    """Free-running threads (no holder): every acknowledged seq is there once, with its
    caller's record, and fewer transactions than commits were needed."""
    store = LMDBStore(tmp_path / "home", durability="fast")
    try:
        out = Outcomes()
        for t in range(8):
            out.start(f"t{t}", lambda t=t: [store.commit([created(f"t{t}-{i}")])[0]
                                            for i in range(25)])
        got = out.join()
        assert all(isinstance(v, list) for v in got.values()), got
        seqs = sorted(s for v in got.values() for s in v)
        assert seqs == list(range(200))
        with store.reader() as r:
            for t in range(8):
                assert [r.record(s).run_id for s in got[f"t{t}"]] == \
                    [f"t{t}-{i}" for i in range(25)]
    finally:
        store.close()


class _Interrupted(BaseException):
    """Stands for a KeyboardInterrupt reaching a waiting caller (pytest keeps the real one)."""


def test_a_caller_interrupted_as_it_is_handed_the_lead_passes_it_on(store, monkeypatch):
    """(Found in review.) A caller interrupted while it waited, just as the lead was
    handed to it, left the lead with its thread; the thread lived on, so every later
    commit of the process waited for it forever. Now the lead passes to the next queued
    request, and the interrupted request's body never runs."""
    from bide.engine.storage import group_commit

    class Request(group_commit.Request):
        __slots__ = ()

        def __init__(self, body: Any) -> None:
            super().__init__(body)
            if threading.current_thread().name != "test-victim":
                return
            lock, me = self.wake, self

            class Wake:
                def acquire(self, timeout: float = -1) -> bool:
                    got = lock.acquire(timeout=timeout)
                    if me.lead:
                        raise _Interrupted
                    return got

                def release(self) -> None:
                    lock.release()

            self.wake = Wake()  # type: ignore[assignment]

    monkeypatch.setattr(group_commit, "Request", Request)
    inside, stay = threading.Event(), threading.Event()

    def hold(reader: Any) -> None:
        inside.set()
        wait_until(lambda: queued(store) >= 2, "the victim and the next caller to queue")

    def victim() -> str:
        try:
            store.commit([created("victim")])
        except _Interrupted:
            assert stay.wait(DEADLINE)  # alive, as a thread that caught the interrupt is
            return "interrupted"
        return "committed"

    out = Outcomes()
    out.start("holder", lambda: store.commit([created("holder")], check=hold))
    assert inside.wait(DEADLINE)
    out.start("victim", victim)
    wait_until(lambda: queued(store) >= 1, "the victim to queue")
    out.start("next", lambda: store.commit([created("next")]))
    wait_until(lambda: "next" in out.got, "the next caller's commit (it waited forever before)")
    stay.set()
    got = out.join()
    assert got["victim"] == "interrupted"
    assert isinstance(got["next"], list) and isinstance(got["holder"], list), got
    with store.reader() as r:
        assert r.head("victim") is None and r.head("next") is not None
    assert store.commit([created("after")])  # the queue still works
