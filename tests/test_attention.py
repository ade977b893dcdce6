"""The attention table: the runs that are not finished, so a watcher's rescan never reads
the heads of finished runs (issue 13, item 1: an idle watcher costs nothing)."""

from __future__ import annotations

from pathlib import Path

import bide
import lmdb
import pytest
from bide.engine.storage import attention
from bide.engine.storage.attention import ATTENTION
from bide.engine.storage.index import RUNS
from bide.engine.storage.lmdb_store import META, STORE_FORMAT, LMDBStore, TxnTables
from bide.engine.storage.memory_store import SCHEME, MemoryStore, forget_all
from bide.engine.upkeep import maintenance
from bide.formats import RunCreated, StatusChanged


@pytest.fixture(params=["lmdb", "memory"])
def store(request, tmp_path):
    if request.param == "lmdb":
        s = LMDBStore(tmp_path / "home", durability="fast")
    else:
        s = MemoryStore(f"{SCHEME}{tmp_path}", durability="fast")
    yield s
    s.close()
    forget_all(str(tmp_path))


def listed(store) -> dict[str, str]:
    with store.reader() as r:
        return {run_id: attention.read_value(run_id.encode(), r.get(ATTENTION, run_id.encode())
                                             ).status for run_id in attention.run_ids(r)}


def test_only_runs_not_finished_are_listed_and_finishing_removes_them(store):
    store.commit([RunCreated(run_id=f"r{i}", flow="f", status="PENDING", at=1.0)
                  for i in range(4)])
    assert listed(store) == {f"r{i}": "PENDING" for i in range(4)}
    store.commit([StatusChanged(run_id="r0", status=bide.Status.DONE.value, at=2.0),
                  StatusChanged(run_id="r1", status=bide.Status.FAILED.value, error="x", at=2.0),
                  StatusChanged(run_id="r2", status=bide.Status.RUNNING.value, at=2.0)])
    assert listed(store) == {"r2": "RUNNING", "r3": "PENDING"}
    store.commit([StatusChanged(run_id="r1", status=bide.Status.RUNNING.value, at=3.0)])  # retried
    assert listed(store) == {"r1": "RUNNING", "r2": "RUNNING", "r3": "PENDING"}
    assert maintenance.doctor(store).ok


def test_a_record_that_keeps_the_status_writes_nothing_to_the_table(store):
    store.commit([RunCreated(run_id="r", flow="f", status="RUNNING", at=1.0)])
    with store.reader() as r:
        before = r.get(ATTENTION, b"r")
    writes: list[str] = []

    class Spy:
        def __init__(self, tables):
            self.tables = tables

        def get(self, table, key):
            return self.tables.get(table, key)

        def put(self, table, key, value):
            writes.append(table)

        def delete(self, table, key):
            writes.append(table)

    tables = maintenance.MemTables()
    tables.data[ATTENTION][b"r"] = before
    attention.fold(Spy(tables), "r", "RUNNING")
    assert writes == []
    attention.fold(Spy(tables), "r", "PENDING")
    assert writes == [ATTENTION]


def test_prune_of_finished_runs_leaves_the_table_equal_to_a_replay(store):
    store.commit([RunCreated(run_id=f"r{i}", flow="f", status="PENDING", at=1.0)
                  for i in range(3)])
    store.commit([StatusChanged(run_id="r0", status=bide.Status.DONE.value, at=2.0)])
    report = maintenance.prune(store, finished_older_than=1.0, now=100.0)
    assert report.runs_removed == ["r0"]
    assert listed(store) == {"r1": "PENDING", "r2": "PENDING"}
    assert maintenance.doctor(store).ok
    maintenance.rebuild_indexes(store)
    assert listed(store) == {"r1": "PENDING", "r2": "PENDING"}


def test_a_stale_entry_is_found_by_doctor_and_fixed_by_rebuild(tmp_path):
    store = LMDBStore(tmp_path / "home", durability="fast")
    try:
        store.commit([RunCreated(run_id="r", flow="f", status="PENDING", at=1.0),
                      StatusChanged(run_id="r", status=bide.Status.DONE.value, at=2.0)])
        with store.env.begin(write=True) as txn:  # an entry the log does not imply
            txn.put(b"r", attention.pack_value(attention.Attention(status="PENDING")),
                    db=store.dbs[ATTENTION])
        problems = maintenance.doctor(store).problems
        assert [(p.kind, p.table) for p in problems] == [("extra", ATTENTION)]
        assert maintenance.doctor(store, rebuild=True).ok
        assert listed(store) == {}
    finally:
        store.close()


def test_the_rescan_never_reads_a_finished_run_s_head(tmp_path):
    """A finished run's head is not read at all: damage it, and the rescan does not notice."""
    with bide.open(tmp_path / "home", durability="fast") as eng:
        flow = bide.Flow("f")
        flow.node(lambda s, ctx: {"x": 1}, name="n", start=True)
        eng.register(flow)
        eng.start("f", run_id="done")
        eng.submit("f", run_id="waiting")
        with eng.store.env.begin(write=True) as txn:  # where the store's layout keeps it
            TxnTables(txn, eng.store.dbs).put(RUNS, b"done", b"\xc1not a head")
        assert [h.run_id for h in eng._runnable()] == ["waiting"]


def _as_format_2(store_dir: Path) -> None:
    """Make a current home look like one written before the attention table existed."""
    env = lmdb.open(str(store_dir), max_dbs=16)
    try:
        with env.begin(write=True) as txn:
            txn.drop(env.open_db(ATTENTION.encode(), txn=txn), delete=True)
            txn.put(b"format", b"2", db=env.open_db(META.encode(), txn=txn))
    finally:
        env.close()


def test_a_format_2_home_gains_the_table_on_its_first_writable_open(tmp_path):
    home = tmp_path / "home"
    with bide.open(home, durability="fast") as eng:
        flow = bide.Flow("f")
        flow.node(lambda s, ctx: {"x": 1}, name="n", start=True)
        eng.register(flow)
        eng.start("f", run_id="done")
        for i in range(3):
            eng.submit("f", run_id=f"p{i}")
    _as_format_2(home / "store")
    with bide.open(home, create=False) as eng:
        with eng.store.reader() as r:
            assert r.get(META, b"format") == str(STORE_FORMAT).encode() == b"5"
            assert list(attention.run_ids(r)) == ["p0", "p1", "p2"]
        assert maintenance.doctor(eng.store).ok
