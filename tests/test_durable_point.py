"""A durable commit is acknowledged after its last flush, which runs outside the writer lock.

``DurablePoint`` flushes once for every commit written before the flush began, so
threads waiting together share one; ``GroupCommit`` hands the lead to the next batch
before that flush, and wakes a batch's callers only after it. Every wait has a deadline.
"""

from __future__ import annotations

import threading
import time

import pytest
from bide.engine.base.errors import DurabilityLost
from bide.engine.storage.durable_point import DurablePoint
from bide.engine.storage.group_commit import GroupCommit
from bide.engine.storage.lmdb_store import LMDBStore
from bide.formats import RunCreated

DEADLINE = 20.0


class Disk:
    """A fake file: commits are numbered, a flush makes every one written so far durable."""

    def __init__(self, flush_s: float = 0.0) -> None:
        self.written = 0
        self.durable = 0
        self.flushes = 0
        self.flush_s = flush_s
        self.began = threading.Event()  # a flush has read what it covers

    def flush(self) -> None:
        upto = self.written
        self.began.set()
        time.sleep(self.flush_s)
        self.flushes += 1
        self.durable = upto


def test_a_commit_is_durable_when_wait_returns_and_an_earlier_flush_is_reused():
    disk = Disk()
    point = DurablePoint(lambda: disk.written, disk.flush)
    disk.written = 3
    point.wait(2)
    assert disk.durable >= 2 and disk.flushes == 1
    point.wait(3)  # the flush began after commit 3 was written: it covered it
    assert disk.flushes == 1
    disk.written = 4
    point.wait(4)
    assert disk.durable == 4 and disk.flushes == 2


def test_threads_waiting_together_share_one_flush():
    disk = Disk(flush_s=0.05)
    point = DurablePoint(lambda: disk.written, disk.flush)
    disk.written = 1
    first = threading.Thread(target=point.wait, args=(1,))
    first.start()
    assert disk.began.wait(DEADLINE)  # the first flush covers commit 1 only
    disk.written = 9  # commits 2..9 are written while it runs
    others = [threading.Thread(target=point.wait, args=(k,)) for k in range(2, 10)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join(DEADLINE)
        assert not t.is_alive()
    assert disk.durable == 9
    assert disk.flushes == 2  # the first, then one for the eight that waited behind it


def test_a_failed_flush_is_not_durable_and_raises():
    def broken() -> None:
        raise OSError(5, "Input/output error")

    point = DurablePoint(lambda: 1, broken)
    with pytest.raises(OSError):
        point.wait(1)
    with pytest.raises(OSError):  # still not durable: the next wait flushes again
        point.wait(1)


def test_the_next_batch_runs_while_the_last_one_waits_for_its_flush():
    """The leader hands the lead on before its batch's flush: the next batch commits
    under the lock meanwhile, and the first caller hears only after its flush."""
    events: list[str] = []
    flushing, release = threading.Event(), threading.Event()

    def run_batch(batch):
        for request in batch:
            request.succeed(request.body(None))
        if batch[0].body(None) != "first":
            return None

        def finish() -> None:
            flushing.set()
            assert release.wait(DEADLINE)
            events.append("first flushed")
        return finish

    queue = GroupCommit(run_batch, "test")
    got: dict[str, object] = {}
    first = threading.Thread(target=lambda: got.update(first=queue.submit(lambda _: "first")))
    first.start()
    assert flushing.wait(DEADLINE)
    second = queue.submit(lambda _: "second")  # not stuck behind the first one's flush
    events.append("second committed")
    assert "first" not in got
    release.set()
    first.join(DEADLINE)
    assert not first.is_alive()
    assert second == "second" and got["first"] == "first"
    assert events == ["second committed", "first flushed"]


def test_a_store_whose_flush_fails_refuses_to_acknowledge_and_stops_writing(tmp_path):
    store = LMDBStore(tmp_path / "home", durability="durable")
    try:
        assert store._durable is not None
        real = store._durable._flush

        def broken() -> None:
            raise OSError(5, "Input/output error")

        store._durable._flush = broken
        with pytest.raises(DurabilityLost, match="failed to flush"):
            store.commit([RunCreated(run_id="r1", flow="f", at=1.0)])
        store._durable._flush = real
        with pytest.raises(DurabilityLost):  # never again in this process: reopen to recover
            store.commit([RunCreated(run_id="r2", flow="f", at=1.0)])
    finally:
        store.close()


def test_durable_commits_flush_after_the_lock_and_fast_ones_never(tmp_path):
    durable = LMDBStore(tmp_path / "d", durability="durable")
    fast = LMDBStore(tmp_path / "f", durability="fast")
    try:
        assert durable._durable is not None and fast._durable is None
        before = durable._durable.flushes
        for k in range(3):
            durable.commit([RunCreated(run_id=f"r{k}", flow="f", at=1.0)])
        assert durable._durable.flushes - before == 3  # one each: nothing else flushed them
    finally:
        durable.close()
        fast.close()
