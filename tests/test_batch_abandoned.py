"""A batch abandoned before its transaction commits fails every request in it.

In a batch of several requests each runs in a nested transaction. If a later request
stops the batch before the parent transaction commits (the map cannot grow past the
store's size limit, an interrupt), the nested transactions that had succeeded go with
the parent's: their callers must not be told they committed (found in review: the first
request returned its seqs, and nothing of it was stored).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bide.engine.base.errors import StoreError, StoreFull
from bide.engine.storage.group_commit import Request
from bide.engine.storage.lmdb_store import META, LMDBStore, _Body


@pytest.fixture
def small(tmp_path: Path):
    store = LMDBStore(tmp_path / "home", durability="fast", map_size=1 << 20, max_size=1 << 20)
    yield store
    store.close()


def test_a_request_that_succeeded_in_a_batch_the_map_could_not_hold_is_told_so(small):
    def probe(txn):
        txn.put(b"probe", b"1", db=small.dbs[META])
        return "committed"

    def huge(txn):
        for i in range(4096):  # ~16 MB into a store limited to 1 MB
            txn.put(b"big%06d" % i, b"x" * 4000, db=small.dbs[META])
        return "committed"

    first, second = Request(_Body(small, probe, None)), Request(_Body(small, huge, None))
    small._commits._lead(second, [first, second])  # what submit does when second leads both
    with pytest.raises(StoreFull):
        second.outcome()
    with pytest.raises(StoreFull):  # its own object, not the leader's
        first.outcome()
    assert first.exc is not second.exc
    with small.reader() as r:
        assert r.txn.get(b"probe", db=small.dbs[META]) is None
    assert small.commit([]) == []  # the store still takes commits


def test_an_interrupt_in_a_later_body_fails_the_requests_before_it(small):
    def probe(txn):
        txn.put(b"probe", b"1", db=small.dbs[META])
        return "committed"

    def interrupted(txn):
        raise KeyboardInterrupt

    first, second = Request(_Body(small, probe, None)), Request(_Body(small, interrupted, None))
    small._commits._lead(second, [first, second])
    with pytest.raises(KeyboardInterrupt):
        second.outcome()
    with pytest.raises(StoreError, match="before its transaction committed"):
        first.outcome()
    with small.reader() as r:
        assert r.txn.get(b"probe", db=small.dbs[META]) is None
