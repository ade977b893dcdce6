"""A durable commit's meta-page flush runs outside the writer lock, and callers still
return only once their commit is flushed.

LMDB commits with ``metasync`` off: it flushes the data pages, then writes the meta page
without waiting. ``LMDBStore._flush`` flushes it after the writer lock is released, while
the group commit lets the next batch build. These tests pin that every durable commit
path flushes exactly once (a refused batch too: its refusal may rest on a commit still being
flushed), that a failed flush fails its callers (and stops the store), and that the next
batch runs while one flushes. Every wait has a deadline.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest
from bide.engine.errors import DurabilityLost, StaleLease
from bide.engine.group_commit import GroupCommit
from bide.engine.lmdb_store import LMDBStore
from bide.formats import LeaseAcquired, RunCreated

DEADLINE = 20.0


def created(run_id: str) -> RunCreated:
    return RunCreated(run_id=run_id, flow="f", at=1.0)


class Env:
    """The store's environment with ``sync`` counted (and made to fail on demand)."""

    def __init__(self, env: lmdb.Environment) -> None:
        self._env, self.syncs, self.fail = env, 0, False

    def sync(self, force: bool = False) -> None:
        self.syncs += 1
        if self.fail:
            raise lmdb.DiskError("fdatasync: Input/output error (simulated)")
        self._env.sync(force)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


@pytest.fixture
def durable(tmp_path: Path):
    store = LMDBStore(tmp_path / "home", durability="durable")
    counted = Env(store.env)
    store.env = counted  # type: ignore[assignment]
    yield store, counted
    store.env = counted._env
    store.close()


def test_a_durable_store_flushes_data_at_commit_and_the_meta_page_after(tmp_path):
    durable = LMDBStore(tmp_path / "d", durability="durable")
    fast = LMDBStore(tmp_path / "f", durability="fast")
    try:
        assert (durable.env.flags()["sync"], durable.env.flags()["metasync"]) == (True, False)
        assert (fast.env.flags()["sync"], fast.env.flags()["metasync"]) == (False, False)
    finally:
        durable.close()
        fast.close()


def test_every_durable_commit_is_flushed_once_and_a_refused_one_too(durable):
    store, env = durable
    store.commit([created("a")])
    assert env.syncs == 1
    with store.reader():  # a thread holding a snapshot commits alone (run_alone): flushed too
        store.commit([created("b")])
    assert env.syncs == 2
    store.commit([LeaseAcquired(run_id="a", owner="w", token=1, expires_at=2e9, attempts=1)])
    assert env.syncs == 3
    with pytest.raises(StaleLease):
        store.commit([created("c")], fence=("a", 99))
    assert env.syncs == 4, "a refusal can rest on a commit whose flush is still running"


def test_a_failed_flush_fails_its_callers_and_stops_the_store(durable, tmp_path):
    store, env = durable
    store.commit([created("a")])
    env.fail = True
    with pytest.raises(DurabilityLost, match="failed to flush"):
        store.commit([created("b")])
    env.fail = False
    with pytest.raises(DurabilityLost):
        store.commit([created("c")])  # refused before any I/O: the store is broken
    assert env.syncs == 2
    with store.reader() as r:  # committed but not known durable: the log says what it holds
        assert r.last_seq() == 1  # seqs start at 0: "a" is 0, "b" 1


def test_the_next_batch_commits_while_the_previous_one_flushes():
    """Batch 1's flush waits until batch 2 has run: with the flush inside the lead, this
    would deadlock (and fail at the deadline); batch 1's caller returns only after it."""
    ran: list[str] = []
    second_ran = threading.Event()
    flushed: list[str] = []

    def run_batch(batch: list[Any]) -> None:
        for request in batch:
            request.succeed(request.body(None))
        ran.append("+".join(r.result for r in batch))
        if len(ran) == 2:
            second_ran.set()

    def flush(batch: list[Any]) -> None:
        if batch[0].result == "one":
            assert second_ran.wait(DEADLINE), "the second batch did not run during the flush"
        flushed.append(batch[0].result)

    commits = GroupCommit(run_batch, "test", flush)
    got: dict[str, Any] = {}
    entered = threading.Event()
    release = threading.Event()

    def first() -> None:
        def body(_: Any) -> str:
            entered.set()
            assert release.wait(DEADLINE)
            return "one"
        got["one"] = (commits.submit(body), list(flushed))

    def second() -> None:
        got["two"] = (commits.submit(lambda _: "two"), list(flushed))

    threads = [threading.Thread(target=first, daemon=True)]
    threads[0].start()
    assert entered.wait(DEADLINE)
    threads.append(threading.Thread(target=second, daemon=True))
    threads[1].start()
    waited = 0.0
    while not commits._queue:  # until "two" is queued behind the running batch
        assert waited < DEADLINE, "the second request never queued"
        time.sleep(0.001)
        waited += 0.001
    release.set()
    for t in threads:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads)
    assert ran == ["one", "two"]
    assert got["one"][0] == "one" and "one" in got["one"][1], \
        "a caller returned before its batch was flushed"
    assert got["two"][0] == "two" and "two" in got["two"][1]


def test_a_flush_that_fails_requests_reaches_exactly_those_callers():
    def run_batch(batch: list[Any]) -> None:
        for request in batch:
            request.succeed(request.body(None))

    def flush(batch: list[Any]) -> None:
        for request in batch:
            request.fail(DurabilityLost("flush failed (test)"))

    commits = GroupCommit(run_batch, "test", flush)
    with pytest.raises(DurabilityLost, match="flush failed"):
        commits.submit(lambda _: 1)
    plain = GroupCommit(run_batch, "test")
    assert plain.submit(lambda _: 2) == 2
