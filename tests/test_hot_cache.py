"""The LMDB store's hot cache (engine/storage/hot_cache.py) is exact or empty, never stale.

Every test ends by comparing, inside a write transaction, each cached value and
the cached last seq with what LMDB holds there: what the next commit would read.
The two-process test also runs once with the cache's check of the transaction id
switched off, and sees it go stale: the comparison can fail.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import bide
import lmdb
import pytest
from bide.bench.kit.workloads import Workload
from bide.engine.base.vocabulary import Status
from bide.engine.storage import hot_cache
from bide.engine.storage.group_commit import Request
from bide.engine.storage.hot_cache import HotCache
from bide.engine.storage.index import RUNS
from bide.engine.storage.lmdb_store import LMDBReader, LMDBStore, TxnTables, _Body
from bide.engine.upkeep import maintenance
from bide.formats import RunCreated, StatusChanged, pack_value


def stale(store: LMDBStore) -> list:
    """Cached values (and the last seq) that differ from LMDB's, as the next commit sees them."""
    def body(txn, hot):
        plain = LMDBReader(txn, store.dbs)
        bad = [(entry, value, plain.get(*entry)) for entry, value in store.hot.values.items()
               if plain.get(*entry) != value]
        if store.hot.last_seq is not None and store.hot.last_seq != plain.last_seq():
            bad.append(("last_seq", store.hot.last_seq, plain.last_seq()))
        return bad

    return store._write_staged(body)


def staged(store: LMDBStore, fn) -> Request:
    """A request whose body writes through the cache (as ``commit``'s does)."""
    return Request(_Body(store, None, fn))


def put_head(store: LMDBStore, run_id: str, value: bytes, fail: BaseException | None = None):
    def body(txn, hot):
        TxnTables(txn, store.dbs, hot).put(RUNS, run_id.encode(), value)
        if fail is not None:
            raise fail
        return value
    return body


def head_bytes(store: LMDBStore, run_id: str) -> bytes | None:
    with store.reader() as r:
        return r.get(RUNS, run_id.encode())


def new_run(store: LMDBStore, run_id: str) -> None:
    store.commit([RunCreated(run_id=run_id, flow="f", at=1.0)])


# -- the rule, on its own -------------------------------------------------------------
class Store:
    batches = 0


def cache_after(txn_step: int, batch_step: int, poisoned: bool = False,
                wrote: bool = True) -> HotCache:
    """A cache that kept a value in transaction 10 (written, or only read), then sees
    transaction 10 + txn_step begin with its store's batches moved by batch_step."""
    store, cache = Store(), HotCache()
    cache.begin(10, store)
    layer = cache.layer(10)
    assert layer is not None
    layer.seen(RUNS, b"r", b"new")
    layer.wrote = wrote
    layer.keep()
    if poisoned:
        cache.poison()
    store.batches += batch_step
    cache.begin(10 + txn_step, store)
    return cache


def test_a_commit_with_no_write_since_is_kept():
    assert cache_after(1, 1).values == {(RUNS, b"r"): b"new"}


def test_a_rolled_back_transaction_is_undone():
    assert cache_after(0, 0).values == {}


def test_a_commit_that_put_nothing_takes_no_transaction_id():
    """LMDB commits a write transaction with no change without a new id: the next one
    has the same id; the id after it means another process committed meanwhile."""
    assert cache_after(0, 1, wrote=False).values == {(RUNS, b"r"): b"new"}
    assert cache_after(1, 1, wrote=False).values == {}


@pytest.mark.parametrize(("txn_step", "batch_step", "poisoned"), [
    (2, 1, False),  # committed, then another process (or a write not made here) committed
    (1, 0, False),  # rolled back (a failed commit), then another process committed one
    (0, 1, False),  # the count moved but not the id: not a state this rule trusts
    (1, 1, True),  # committed, with a body that wrote around the cache
    (0, 0, True),
])
def test_anything_else_forgets_everything(txn_step, batch_step, poisoned):
    cache = cache_after(txn_step, batch_step, poisoned)
    assert cache.values == {} and cache.last_seq is None


def test_a_transaction_that_did_not_begin_here_gets_no_layer():
    cache = HotCache()
    assert cache.layer(5) is None
    cache.begin(5, Store())
    assert cache.layer(6) is None and cache.layer(5) is not None


# -- a store --------------------------------------------------------------------------
def test_runs_fill_the_cache_and_it_stays_exact(tmp_path):
    w = Workload("long", 30, 100)
    with bide.open(tmp_path / "home", durability="fast") as e:
        e.register(w.flow())
        assert e.start(w.flow().name, w.initial(), run_id="r").state == w.expected()
        cached = {table for table, _ in e.store.hot.values}
        assert {RUNS, "state"} <= cached and e.store.hot.last_seq is not None
        assert stale(e.store) == []


def test_a_refused_request_in_a_batch_leaves_nothing_behind(store):
    new_run(store, "a")
    new_run(store, "b")
    before = head_bytes(store, "b")
    batch = [staged(store, put_head(store, "a", pack_value([1]))),
             staged(store, put_head(store, "b", pack_value([2]), fail=ValueError("refused"))),
             staged(store, put_head(store, "a", pack_value([3])))]
    store._run_batch(batch)
    assert isinstance(batch[1].exc, ValueError) and batch[0].exc is None
    assert head_bytes(store, "b") == before and head_bytes(store, "a") == pack_value([3])
    assert stale(store) == []
    assert store.hot.values[RUNS, b"b"] == before  # read again, not the refused bytes


def test_a_transaction_whose_requests_all_fail_is_undone(store):
    new_run(store, "a")
    before = head_bytes(store, "a")
    request = staged(store, put_head(store, "a", pack_value([9]), fail=ValueError("no")))
    store._run_batch([request])
    assert isinstance(request.exc, ValueError)
    assert head_bytes(store, "a") == before and stale(store) == []


def test_a_batch_retried_after_the_map_filled_keeps_only_the_retry(store):
    new_run(store, "a")
    new_run(store, "b")
    before = head_bytes(store, "b")
    tries = []

    def body(txn, hot):
        tries.append(1)
        tables = TxnTables(txn, store.dbs, hot)
        if len(tries) == 1:  # the first try writes b, then finds the map full
            tables.put(RUNS, b"b", pack_value(["first try"]))
            raise lmdb.MapFullError("full (made up by the test)")
        tables.put(RUNS, b"a", pack_value(["retry"]))
        return None

    request = staged(store, body)
    store._run_batch([request])
    assert request.exc is None and len(tries) == 2
    assert head_bytes(store, "a") == pack_value(["retry"]) and head_bytes(store, "b") == before
    assert stale(store) == []


def test_a_write_around_the_cache_is_seen(store):
    """Retention, rebuild, restore and a test's damage write with plain bodies."""
    new_run(store, "a")
    new_run(store, "b")
    store.commit([StatusChanged(run_id="a", status=Status.INTERRUPTED, at=2.0)])
    assert (RUNS, b"a") in store.hot.values
    store._write(lambda txn: TxnTables(txn, store.dbs).put(RUNS, b"a", b"damaged"))
    assert stale(store) == [] and store.hot.values.get((RUNS, b"a")) in (None, b"damaged")


def test_a_write_around_the_cache_in_a_shared_batch_is_seen(store):
    """A plain body batched with one that writes through the cache poisons the batch."""
    new_run(store, "a")
    new_run(store, "b")
    stale(store)  # both heads cached
    damage = Request(_Body(store, lambda txn: TxnTables(txn, store.dbs).put(
        RUNS, b"b", b"damaged"), None))
    store._run_batch([staged(store, put_head(store, "a", pack_value(["a"]))), damage])
    assert head_bytes(store, "b") == b"damaged" and stale(store) == []


def test_retention_and_a_rebuild_leave_the_cache_exact(tmp_path):
    w = Workload("long", 12, 100)
    with bide.open(tmp_path / "home", durability="fast") as e:
        e.register(w.flow())
        e.start(w.flow().name, w.initial(), run_id="old")
        e.start(w.flow().name, w.initial(), run_id="new")
        assert stale(e.store) == []
        with e.store.reader() as r:
            gone = [seq for seq, _ in r.run_entries("old")]
        e.store.delete(lambda r: gone)
        assert stale(e.store) == []
        e.start(w.flow().name, w.initial(), run_id="after")
        assert maintenance.doctor(e.store, rebuild=True).ok
        assert stale(e.store) == []
        e.start(w.flow().name, w.initial(), run_id="last")
        assert stale(e.store) == [] and maintenance.doctor(e.store).ok


def test_a_moved_format_4_home_starts_exact(tmp_path):
    from test_lmdb_layout import format4_home
    with bide.open(format4_home(tmp_path), create=False, durability="fast") as e:
        e.store.commit([StatusChanged(run_id="r-long", status=Status.DONE, at=9.0)])
        assert stale(e.store) == [] and maintenance.doctor(e.store).ok


OTHER = textwrap.dedent("""
    import sys
    from bide.engine.storage.lmdb_store import LMDBStore
    from bide.formats import StatusChanged
    store = LMDBStore(sys.argv[1], durability="fast")
    store.commit([StatusChanged(run_id="a", status="INTERRUPTED", reason=sys.argv[2], at=3.0)])
    store.close()
""")


def other(home: Path, reason: str) -> None:
    subprocess.run([sys.executable, "-c", OTHER, str(home), reason], check=True, timeout=60)


def peek(store: LMDBStore, run_id: str) -> None:
    """A write transaction that only reads the run's head through the cache (it commits
    nothing, so LMDB gives the next write transaction the same id)."""
    store._write_staged(lambda txn, hot: LMDBReader(txn, store.dbs, hot).head(run_id))


def alternate(store: LMDBStore, home: Path, rounds: int = 3) -> list:
    """This process and another write run ``a`` in turn; what went stale, each round."""
    found = []
    for i in range(rounds):
        store.commit([StatusChanged(run_id="a", status=Status.RUNNING, reason=f"me {i}", at=2.0)])
        other(home, f"other {i}")
        found += stale(store)
        peek(store, "a")
        other(home, f"other again {i}")
        found += stale(store)
    return found


def test_two_processes_writing_in_turn_never_see_a_stale_value(tmp_path):
    home = tmp_path / "home"
    store = LMDBStore(home, durability="fast")
    try:
        new_run(store, "a")
        assert alternate(store, home) == []
        with store.reader() as r:
            assert r.head("a").records == 1 + 3 * 3
    finally:
        store.close()


def test_without_the_transaction_id_check_the_other_process_s_writes_go_stale(tmp_path,
                                                                             monkeypatch):
    """The negative control: a cache that trusts every transaction is caught above."""
    def trusting(self, txn_id, store):
        self.txn_id, self.store, self.batches = txn_id, store, store.batches
        self.undo, self.undo_seq, self.poisoned, self.wrote = {}, self.last_seq, False, False

    monkeypatch.setattr(hot_cache.HotCache, "begin", trusting)
    home = tmp_path / "home"
    store = LMDBStore(home, durability="fast")
    try:
        new_run(store, "a")
        assert alternate(store, home, rounds=1) != []
    finally:
        store.close()
