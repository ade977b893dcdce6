"""One contract suite for every Store implementation: LMDB, in-memory and PostgreSQL.

Tests taking ``open_store`` run against every backend (PostgreSQL on the
throwaway cluster of ``tests/pg_cluster.py``, one database per home). Tests that are about
LMDB itself (map growth, size limit, files on disk, other processes) call
``lmdb_only`` or open ``LMDBStore`` directly.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lmdb
import pytest
from bide.engine.base.errors import NewerStore, NotAHome, StaleLease, StoreFull
from bide.engine.base.vocabulary import Status
from bide.engine.storage import lmdb_store, memory_store
from bide.engine.storage.lmdb_store import LMDBStore
from bide.engine.storage.memory_store import MemoryStore
from bide.formats import LeaseAcquired, PendingWrite, RunCreated, StatusChanged
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def _memory(home: Path, **kw) -> MemoryStore:
    kw.pop("map_size", None), kw.pop("max_size", None)  # LMDB's knobs; memory has no map
    return MemoryStore(f"{memory_store.SCHEME}{home}", **kw)


BACKENDS = {"lmdb": lambda home, **kw: LMDBStore(home, **kw), "memory": _memory,
            "postgres": None}  # needs the cluster: made in `open_store`


def _postgres(request):
    """Homes -> databases of the test cluster: one database per home, the same on reopen."""
    from bide.engine.postgres.store import PostgresStore

    cluster, databases = request.getfixturevalue("pg_cluster"), {}
    request.addfinalizer(lambda: [cluster.drop_database(d) for d in databases.values()])

    def make(home: Path, **kw) -> PostgresStore:
        kw.pop("map_size", None), kw.pop("max_size", None)  # LMDB's knobs
        if home not in databases:
            databases[home] = cluster.create_database()
        return PostgresStore(cluster.url(databases[home]), **kw)

    return make


@pytest.fixture(params=sorted(BACKENDS))
def open_store(request, tmp_path):
    opened = []
    backend = _postgres(request) if request.param == "postgres" else BACKENDS[request.param]

    def make(home: Path | None = None, **kw):
        store = backend(home or tmp_path / "home", **kw)
        opened.append(store)
        return store

    make.backend = request.param
    yield make
    for s in opened:
        s.close()
    memory_store.forget_all(str(tmp_path))


def lmdb_only(open_store) -> None:
    """Skip a contract test that is about LMDB itself on other backends."""
    if open_store.backend != "lmdb":
        pytest.skip("about LMDB itself (its map, files or processes)")


def created(run_id: str) -> RunCreated:
    return RunCreated(run_id=run_id, flow="f", at=1.0)


def test_commit_appends_in_order_and_indexes_follow(open_store):
    store = open_store(durability="fast")
    assert store.commit([created("r1"), created("r2")]) == [0, 1]
    seqs = store.commit([StatusChanged(run_id="r1", status="FAILED", error="x", at=2.0)])
    assert seqs == [2]
    with store.reader() as r:
        assert r.last_seq() == 2
        assert r.head("r1").status == "FAILED" and r.head("r1").error == "x"
        assert r.head("r2").status == "RUNNING"
        assert [t for _, t in r.run_entries("r1")] == ["run_created", "status_changed"]
        assert [s for s, _ in r.log()] == [0, 1, 2]
        assert r.record(2).status == "FAILED"


def test_a_failing_check_writes_nothing(open_store):
    store = open_store(durability="fast")
    store.commit([created("r1")])

    def refuse(reader):
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.commit([created("r2")], check=refuse)
    with store.reader() as r:
        assert r.last_seq() == 0 and r.head("r2") is None


def test_a_later_record_is_built_from_the_seqs_given_before_it(open_store):
    """``store.Later``: a record naming records of its own commit gets their real seqs (on
    PostgreSQL they have gaps: a rolled-back commit's are never given again)."""
    store = open_store(durability="fast")
    store.commit([created("r0")])

    def fails(seqs):
        raise RuntimeError(f"not built on {list(seqs)}: nothing of this commit is written")

    with pytest.raises(RuntimeError, match="not built"):
        store.commit(lambda r: [created("x"), fails])
    seen: list[list[int]] = []

    def later(seqs):
        seen.append(list(seqs))
        return StatusChanged(run_id="r1", status=Status.FAILED, error=f"after {list(seqs)}",
                             at=2.0)

    seqs = store.commit(lambda r: [created("r1"), created("r2"), later])
    assert len(seqs) == 3 and seen[-1] == seqs[:2] and seqs[0] > 0
    with store.reader() as r:
        assert r.head("x") is None
        assert r.record(seqs[2]).error == r.head("r1").error == f"after {seqs[:2]}"


def test_fencing_refuses_a_stale_token(open_store):
    store = open_store(durability="fast")
    store.commit([created("r1"), LeaseAcquired(run_id="r1", owner="w1", token=1,
                                               expires_at=9e12)])
    store.commit([StatusChanged(run_id="r1", status="RUNNING")], fence=("r1", 1))
    store.commit([LeaseAcquired(run_id="r1", owner="w2", token=2, expires_at=9e12)])
    with pytest.raises(StaleLease):
        store.commit([StatusChanged(run_id="r1", status="DONE")], fence=("r1", 1))
    with store.reader() as r:
        assert r.head("r1").status == "RUNNING"


def test_expired_lease_cannot_commit(open_store):
    store = open_store(durability="fast")
    store.commit([created("r1"), LeaseAcquired(run_id="r1", owner="w1", token=1,
                                               expires_at=1.0)])
    with pytest.raises(StaleLease):
        store.commit([StatusChanged(run_id="r1", status="DONE")], fence=("r1", 1))


def test_map_grows_from_a_tiny_map(open_store):
    lmdb_only(open_store)
    store = open_store(durability="fast", map_size=64 << 10)
    store.commit([created("r1")])
    blob = "x" * 20_000
    for i in range(100):
        store.commit([PendingWrite(run_id="r1", task=f"{i}:a:0", superstep=i, node="a",
                                   ops=[("k", "set", blob)])])
    assert store.info()["map_size"] > 64 << 10
    with store.reader() as r:
        assert r.last_seq() == 100 and r.record(100).ops[0][2] == blob


def test_size_limit_is_a_clear_error_and_store_stays_readable(open_store):
    lmdb_only(open_store)
    store = open_store(durability="fast", map_size=64 << 10, max_size=256 << 10)
    store.commit([created("r1")])
    with pytest.raises(StoreFull, match="size limit"):
        for i in range(100):
            store.commit([PendingWrite(run_id="r1", task=f"{i}", superstep=i, node="a",
                                       ops=[("k", "set", "y" * 20_000)])])
    with store.reader() as r:
        assert r.head("r1") is not None and r.last_seq() >= 1


def test_durable_and_fast_both_read_back(open_store, tmp_path):
    for mode in ("durable", "fast"):
        store = open_store(tmp_path / mode, durability=mode)
        store.commit([created("r")])
        store.close()
        again = open_store(tmp_path / mode, durability=mode)
        with again.reader() as r:
            assert r.head("r").flow == "f"


def test_not_a_home(open_store, tmp_path):
    lmdb_only(open_store)
    stuff = tmp_path / "stuff"
    stuff.mkdir()
    (stuff / "notes.txt").write_text("mine")
    with pytest.raises(NotAHome, match="not empty"):
        open_store(stuff)
    assert (stuff / "notes.txt").read_text() == "mine"
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(NotAHome, match="file"):
        open_store(afile)
    with pytest.raises(NotAHome, match="no store"):
        open_store(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()


def test_store_from_a_newer_bide_is_refused(open_store, tmp_path):
    lmdb_only(open_store)
    store = open_store(tmp_path / "h", durability="fast")
    store.commit([created("r")])
    with store.env.begin(write=True) as txn:
        txn.put(b"format", b"99", db=store.dbs["meta"])
    store.close()
    with pytest.raises(NewerStore, match="upgrade bide"):
        open_store(tmp_path / "h", durability="fast")


def test_reader_in_another_process_while_writing(open_store, tmp_path):
    lmdb_only(open_store)
    home = tmp_path / "shared"
    store = open_store(home, durability="fast")
    store.commit([created("r")])
    reader = textwrap.dedent(f"""
        import sys, time
        from bide.engine.storage.lmdb_store import LMDBStore
        s = LMDBStore({str(home)!r}, durability="fast", create=False)
        seen = -1
        deadline = time.monotonic() + 30
        while seen < 300 and time.monotonic() < deadline:
            with s.reader() as r:
                seen = r.last_seq()
                assert r.head("r") is not None
        print(seen)
    """)
    proc = subprocess.Popen([sys.executable, "-c", reader], stdout=subprocess.PIPE, text=True)
    for i in range(300):
        store.commit([PendingWrite(run_id="r", task=str(i), superstep=i, node="a",
                                   ops=[("k", "set", "v" * 3000)])])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and int(out) >= 300


def test_two_processes_grow_the_map_while_writing(tmp_path):
    home = tmp_path / "grow"
    LMDBStore(home, durability="fast", map_size=64 << 10).close()
    writer = textwrap.dedent(f"""
        import sys
        from bide.engine.storage.lmdb_store import LMDBStore
        from bide.formats import PendingWrite, RunCreated
        s = LMDBStore({str(home)!r}, durability="fast", map_size=64 << 10)
        me = sys.argv[1]
        s.commit([RunCreated(run_id=me, flow="f")])
        for i in range(150):
            s.commit([PendingWrite(run_id=me, task=str(i), superstep=i, node="a",
                                   ops=[("k", "set", "z" * 5000)])])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer, f"w{i}"]) for i in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = LMDBStore(home, durability="fast")
    try:
        with store.reader() as r:
            assert r.last_seq() == 301
            assert sorted(h.records for h in r.heads()) == [151, 151]
    finally:
        store.close()


def test_a_home_another_process_is_creating_is_not_refused(tmp_path, monkeypatch):
    """Between "is there a store/data.mdb?" and "is everything here ours?", another
    process may finish creating the home: its data.mdb must not make it foreign."""
    home = tmp_path / "home"
    LMDBStore(home).close()
    looks = []

    def not_yet_then_real(path):
        looks.append(path)
        return len(looks) > 1 and (path / "store" / "data.mdb").is_file()

    monkeypatch.setattr(lmdb_store, "_is_home", not_yet_then_real)
    LMDBStore(home).close()


@pytest.mark.slow
def test_processes_creating_one_home_at_once_all_open_it(tmp_path):
    opener = textwrap.dedent("""
        import sys, time
        from bide.engine.storage.lmdb_store import LMDBStore
        while time.time() < float(sys.argv[2]):
            pass
        LMDBStore(sys.argv[1]).close()
    """)
    for trial in range(10):
        home, start = tmp_path / f"h{trial}", time.time() + 1.0
        procs = [subprocess.Popen([sys.executable, "-c", opener, str(home), str(start)],
                                  stderr=subprocess.PIPE, text=True) for _ in range(6)]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, errors


def test_open_retries_when_another_process_grew_the_map_during_it(tmp_path, monkeypatch):
    """py-lmdb's open reads the map size, then begins a transaction: a process that
    grows the map in between makes that begin fail (``MapResizedError`` out of
    ``lmdb.open``, about 1 run in 10 of the test above). Opening again reads the new size."""
    home = tmp_path / "home"
    LMDBStore(home, durability="fast").close()
    real_open, calls = lmdb.open, []

    def open_racing_a_grower(*args, **kwargs):
        calls.append(args)
        if len(calls) <= 2:
            raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(lmdb, "open", open_racing_a_grower)
    store = LMDBStore(home, durability="fast")
    try:
        store.commit([RunCreated(run_id="r", flow="f")])
        assert len(calls) == 3
    finally:
        store.close()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=4),
                        min_size=1, max_size=6))
def test_property_log_is_gapless_and_heads_count_records(open_store, tmp_path_factory, batches):
    store = open_store(tmp_path_factory.mktemp("p") / "h", durability="fast")
    expected = {}
    total = 0
    for batch in batches:
        records = []
        for rid in batch:
            records.append(created(rid) if rid not in expected else
                           StatusChanged(run_id=rid, status="RUNNING"))
            expected[rid] = expected.get(rid, 0) + 1
        store.commit(records)
        total += len(records)
    with store.reader() as r:
        assert [s for s, _ in r.log()] == list(range(total))
        assert {h.run_id: h.records for h in r.heads()} == expected
    if open_store.backend == "lmdb":
        assert isinstance(store.env, lmdb.Environment)


def test_delete_refolds_the_run_and_never_gives_a_seq_again(open_store):
    store = open_store(durability="fast")
    store.commit([created("r1"), StatusChanged(run_id="r1", status="FAILED", error="x"),
                  created("r2")])
    assert store.delete(lambda reader: [1, 2, 99]) == [1, 2]
    with store.reader() as r:
        assert r.head("r1").status == "RUNNING" and r.head("r1").records == 1
        assert r.head("r2") is None and r.last_seq() == 2
        assert [s for s, _ in r.log()] == [0]
    assert store.commit([created("r3")]) == [3]


def test_renew_leases_extends_only_the_holding_tokens_in_one_call(open_store):
    store = open_store(durability="fast")
    store.commit([created("r1"), LeaseAcquired(run_id="r1", owner="w1", token=1,
                                               expires_at=5.0),
                  created("r2"), LeaseAcquired(run_id="r2", owner="w1", token=3,
                                               expires_at=5.0)])
    with store.reader() as r:
        before = r.now()
    assert store.renew_leases([("r1", 1, 600.0), ("r1", 2, 600.0), ("r2", 3, 60.0),
                               ("absent", 1, 60.0)]) == [True, False, True, False]
    assert store.renew_leases([]) == []
    with store.reader() as r:
        (t1, e1), (t2, e2), after = r.lease_expiry("r1"), r.lease_expiry("r2"), r.now()
        assert r.lease_expiry("absent") is None
    # written in the store's clock: its now() at the renewal plus each lease's ttl
    assert (t1, t2) == (1, 3)
    assert before + 600 <= e1 <= after + 600 and before + 60 <= e2 <= after + 60
    store.commit([StatusChanged(run_id="r1", status="DONE")], fence=("r1", 1))  # renewed: live


def test_a_grant_by_ttl_expires_by_the_store_clock(open_store):
    """A LeaseAcquired that gives ``ttl`` gets its expiry from the store's own clock in
    the commit, whatever ``expires_at`` the worker wrote (no host's clock decides)."""
    store = open_store(durability="fast")
    with store.reader() as r:
        before = r.now()
    store.commit([created("r1"), LeaseAcquired(run_id="r1", owner="w1", token=1,
                                               expires_at=1.0, ttl=30.0)])
    store.commit(lambda r: [LeaseAcquired(run_id="r1", owner="w2", token=2,
                                          expires_at=2.0, ttl=45.0)])
    with store.reader() as r:
        after, head = r.now(), r.head("r1")
        first = r.record(1)
    assert before + 30 <= first.expires_at <= after + 30
    assert head.lease_token == 2 and before + 45 <= head.lease_expires <= after + 45


def test_rebuild_indexes_replays_what_load_returns(open_store):
    store = open_store(durability="fast")
    store.commit([created("r1"), StatusChanged(run_id="r1", status="FAILED", error="x")])

    def load(reader):
        return [(seq, len(raw), reader.record(seq)) for seq, raw in reader.log()][:1]

    assert store.rebuild_indexes(load) == 1
    with store.reader() as r:
        assert r.head("r1").status == "RUNNING" and r.last_seq() == 1
        assert [t for _, t in r.run_entries("r1")] == ["run_created"]


def test_on_commit_observers_see_every_durable_write_and_refusals(open_store):
    store = open_store(durability="fast")
    seen = []
    stop = store.on_commit(seen.append)
    store.commit([created("r1"), LeaseAcquired(run_id="r1", owner="w", token=1,
                                               expires_at=9e12)])
    with pytest.raises(StaleLease):
        store.commit([StatusChanged(run_id="r1", status="DONE")], fence=("r1", 2))
    store.renew_leases([("r1", 1, 60.0)])
    store.delete(lambda reader: [1])
    stop()
    store.commit([created("r2")])
    assert [(e.kind, e.seqs, e.fence, e.refused) for e in seen] == [
        ("commit", (0, 1), None, False), ("commit", (), ("r1", 2), True),
        ("renew_lease", (), ("r1", 1), False), ("delete", (1,), None, False)]


def test_readers_and_scans_see_one_snapshot(open_store):
    store = open_store(durability="fast")
    store.commit([created("a"), created("b"), created("c")])
    with store.reader() as r:
        store.commit([created("d")])
        assert [k for k, _ in r.scan("runs")] == [b"a", b"b", b"c"]
        assert [k for k, _ in r.scan("runs", reverse=True)] == [b"c", b"b", b"a"]
        assert [k for k, _ in r.scan("runs", b"b")] == [b"b"]
        assert r.get("runs", b"d") is None
    info = store.info()
    assert info["used_bytes"] > 0 and info["durability"] == "fast"
    assert store.reader_check() >= 0


def test_the_core_index_names_no_extension():
    from bide.engine.storage import extensions, index
    source = Path(index.__file__).read_text().lower()
    assert "langgraph" not in source and " lg" not in source
    for ext in extensions.EXTENSIONS:
        assert set(ext.tables) <= set(index.DERIVED)
