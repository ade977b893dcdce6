"""The latest-state index (engine/storage/latest.py): reads that stay flat in a run's length.

It is a derived table: it must equal what a replay of the log gives (the state
itself, and its bytes, which doctor compares), on both backends, after prune,
after a rebuild, and after the format upgrade of an older home.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bide
import pytest
from bide.bench.kit.workloads import Workload
from bide.cli import main
from bide.engine.run.state import materialize, replay
from bide.engine.storage import latest
from bide.engine.storage.lmdb_store import META, STORE_FORMAT, LMDBReader, TxnTables
from bide.engine.storage.memory_store import MemoryStore, forget_all
from bide.engine.upkeep import maintenance
from bide.formats import Checkpoint, PendingWrite, RunCreated
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st


@contextmanager
def small_chunks(chunk_bytes: int = 24, segment_chunks: int = 4):
    """Tiny chunks and segments, so short lists cross every boundary."""
    saved = latest.CHUNK_BYTES, latest.SEGMENT_CHUNKS
    latest.CHUNK_BYTES, latest.SEGMENT_CHUNKS = chunk_bytes, segment_chunks
    try:
        yield
    finally:
        latest.CHUNK_BYTES, latest.SEGMENT_CHUNKS = saved


class NoLog:
    """A reader that refuses to read log records: what reads the index alone passes."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def record(self, seq: int) -> Any:
        raise AssertionError(f"read log record {seq}")

    def run_entries(self, *args: Any) -> Any:
        raise AssertionError("walked the run log")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


def run_long(engine: bide.Engine, k: int, run_id: str = "r") -> None:
    w = Workload("long", k, 100)
    engine.register(w.flow())
    run = engine.start("bench-long", w.initial(), run_id=run_id)
    assert run.state == w.expected()


@contextmanager
def opened(home: Path, backend: str):
    """An engine on LMDB, or on an in-memory store forgotten afterwards."""
    if backend == "lmdb":
        with bide.open(home) as eng:
            yield eng
        return
    try:
        with bide.open(home, store=MemoryStore(f"memory:latest-{uuid.uuid4().hex}")) as eng:
            yield eng
    finally:
        forget_all("latest-")


@pytest.fixture(params=["lmdb", "memory", "postgres"])
def engine(request, tmp_path):
    if request.param == "postgres":  # a fresh database on the session's throwaway server
        with bide.open(request.getfixturevalue("pg_url"), local=tmp_path / "local") as eng:
            yield eng
        return
    with opened(tmp_path / "home", request.param) as eng:
        assert isinstance(eng.store, MemoryStore) == (request.param == "memory")
        yield eng


def test_the_latest_state_is_read_without_the_log(engine):
    with small_chunks():
        run_long(engine, 300)
        with engine.store.reader() as r:
            head = r.head("r")
            indexed = materialize(NoLog(r), "r", head.checkpoint)
            want = Workload("long", 300, 100).expected()
            assert indexed == replay(r, "r", head.checkpoint) == want
            assert list(indexed) == list(replay(r, "r", head.checkpoint))  # same key order
            directory = latest.load_directory(r, "r")
            assert directory is not None and directory.at == head.checkpoint
            closed, _ = directory.keys["items"]
            groups = [k for k, _ in r.scan(latest.SEGMENTS) if k[-5:-4] == b"g"]
            assert len(groups) == closed // 4  # a read takes a group of 4 chunks as one value
        assert maintenance.doctor(engine.store).ok


def test_an_older_version_still_replays(engine):
    run_long(engine, 20)
    with engine.store.reader() as r:
        old = [c.seq for c in engine.checkpoints("r")][5]
        assert latest.read(r, "r", old) is None
    assert engine.state("r", version=5) == {"items": Workload("long", 5, 100).expected()["items"],
                                            "count": 5}


def test_doctor_finds_a_damaged_entry_and_rebuild_restores_it(tmp_path):
    home = tmp_path / "home"
    with bide.open(home) as eng:
        run_long(eng, 50)
        with eng.store.reader() as r:
            key = latest.value_key("r", "count")
            good = r.get(latest.STATE, key)
        eng.store._write(lambda txn: TxnTables(txn, eng.store.dbs).put(
            latest.STATE, key, latest.pack_value(7)))
    code, report = cli(home, "doctor")
    assert code != 0 and any(p["table"] == latest.STATE and p["kind"] == "differs"
                             for p in report["problems"])
    code, report = cli(home, "doctor", "--rebuild")
    assert code == 0 and report["ok"]
    with bide.open(home) as eng, eng.store.reader() as r:
        assert r.get(latest.STATE, key) == good
        assert eng.state("r")["count"] == 50


def test_prune_keeps_the_index_equal_to_a_rebuild(engine):
    with small_chunks():
        run_long(engine, 200, "a")
        run_long(engine, 30, "b")
        removed = maintenance.prune(engine.store, keep=1)
        assert removed.records
        assert maintenance.doctor(engine.store).ok
        assert engine.state("a") == Workload("long", 200, 100).expected()
        maintenance.prune(engine.store, finished_older_than=-1)
        assert maintenance.doctor(engine.store).ok
        with engine.store.reader() as r:
            assert latest.load_directory(r, "a") is None


def test_a_format_2_home_gains_the_index_on_its_first_writable_open(tmp_path):
    home = tmp_path / "home"
    with bide.open(home) as eng:
        run_long(eng, 120)
        want = eng.state("r")
    as_format_2(home)
    with bide.open(home) as eng, eng.store.reader() as r:
        assert r.txn.get(b"format", db=eng.store.dbs[META]) == str(STORE_FORMAT).encode()
        head = r.head("r")
        assert materialize(NoLog(r), "r", head.checkpoint) == want
    code, report = cli(home, "doctor")
    assert code == 0 and report["ok"]


def as_format_2(home: Path) -> None:
    """What bide wrote before the latest-state index: no such entries, format 2."""
    with bide.open(home) as eng:
        def body(txn):
            tables = TxnTables(txn, eng.store.dbs)
            for key, _ in list(LMDBReader(txn, eng.store.dbs).scan(latest.STATE)):
                tables.delete(latest.STATE, key)
            txn.put(b"format", b"2", db=eng.store.dbs[META])
        eng.store._write(body)
        with eng.store.reader() as r:
            assert not list(r.scan(latest.STATE))


def cli(home: Path, *args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(main, [*args, "--home", str(home), "--json"],
                                catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


# -- the fold equals a replay, whatever the ops ---------------------------------------

values = st.recursive(
    st.none() | st.integers(-5, 5) | st.text(max_size=12) | st.binary(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
    | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=6)
keys = st.sampled_from(["a", "b", "c\x00d", "é"])
ops = st.one_of(
    st.tuples(keys, st.just("set"), values),
    st.tuples(keys, st.just("append"), st.lists(values, max_size=6)),
    st.tuples(keys, st.just("merge"), st.dictionaries(st.text(max_size=2), values, max_size=2)),
)
steps = st.lists(st.tuples(st.lists(ops, max_size=3), st.lists(ops, max_size=3), st.booleans()),
                 max_size=12)


def replayable(state: dict[str, Any], op: tuple[str, str, Any]) -> bool:
    """Ops a replay can apply (a merge into a non-dict fails there too)."""
    key, kind, _ = op
    old = state.get(key)
    if kind == "merge":
        return old is None or isinstance(old, dict)
    return kind != "append" or old is None or isinstance(old, (list, tuple))


def applied(state: dict[str, Any], ops: list[tuple[str, str, Any]]) -> list[Any]:
    """Apply to ``state`` the ops a replay can apply, one by one; return those."""
    from bide.engine.run.state import apply_op

    kept = []
    for op in ops:
        if replayable(state, op):
            apply_op(state, op)
            kept.append(op)
    return kept


@settings(max_examples=60, deadline=None)
@given(initial=st.dictionaries(keys, values, max_size=3), steps=steps)
def test_the_fold_equals_a_replay(initial, steps):
    with small_chunks(), tempfile.TemporaryDirectory() as tmp, \
            opened(Path(tmp) / "home", "memory") as eng:
        store = eng.store
        store.commit([RunCreated(run_id="p", flow="f")])
        [base] = store.commit([Checkpoint(run_id="p", version=0, superstep=0, status="RUNNING",
                                          full=True, state=initial)])
        state, version, last = dict(initial), 0, base
        for written, own, full in steps:
            written, own = applied(state, written), applied(state, own)
            version += 1
            if full:
                [last] = store.commit([Checkpoint(run_id="p", version=version, superstep=version,
                                                  status="RUNNING", full=True, state=state)])
                base = last
                continue
            [pw] = store.commit([PendingWrite(run_id="p", task="t", superstep=version, node="n",
                                              ops=written)])
            [last] = store.commit([Checkpoint(run_id="p", version=version, superstep=version,
                                              status="RUNNING", base=base, writes=[pw],
                                              ops=own)])
        with store.reader() as r:
            assert latest.read(r, "p", last) == replay(r, "p", last) == state
        assert maintenance.doctor(store).ok


class Recording(maintenance.MemTables):
    """In-memory tables that note each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, bytes, int]] = []

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.writes.append((table, key, len(value)))
        super().put(table, key, value)

    def delete(self, table: str, key: bytes) -> None:
        self.writes.append((table, key, -1))
        super().delete(table, key)


def test_a_step_rewrites_a_small_tail_not_the_list():
    items = [f"{i:04d}" + "x" * 96 for i in range(1800)]
    tables = Recording()
    latest.fold(tables, 1, Checkpoint(run_id="r", version=0, superstep=0, status="RUNNING",
                                      full=True, state={"items": items, "n": 0}))
    groups, closed_before = 0, latest.load_directory(tables, "r").keys["items"][0]
    for step in range(2, 200):
        tables.writes.clear()
        latest.fold(tables, step, Checkpoint(
            run_id="r", version=step, superstep=step, status="RUNNING", base=1,
            ops=[("items", "append", ["y" * 100]), ("n", "set", step)]))
        group = [w for w in tables.writes if w[2] > 2 * latest.CHUNK_BYTES]
        groups += bool(group)  # a group of chunks is written when its last chunk closes
        assert len(tables.writes) <= 4 + len(group)  # directory, counter, tail, closed chunk
        # nothing is deleted but an emptied tail (a closed chunk took its items)
        assert all(table == latest.STATE for table, _, size in tables.writes if size < 0)
    closed = latest.load_directory(tables, "r").keys["items"][0]
    assert closed - closed_before > 10  # the appends closed chunks...
    # ...and each group they completed was written once
    assert groups == closed // latest.SEGMENT_CHUNKS - closed_before // latest.SEGMENT_CHUNKS
    assert latest.read(tables, "r", 199)["items"] == items + ["y" * 100] * 198
    tables.writes.clear()
    latest.fold(tables, 200, Checkpoint(run_id="r", version=200, superstep=200,
                                        status="RUNNING", full=True,
                                        state={"items": items + ["y" * 100] * 198, "n": 199}))
    assert len(tables.writes) <= 2  # a full snapshot of the same list rewrites nothing of it


def test_a_run_with_large_list_items_is_left_out_and_reads_replay(engine):
    w = Workload("long", 30, 1000)
    assert w.payload > latest.ITEM_BYTES
    engine.register(w.flow())
    assert engine.start("bench-long", w.initial(), run_id="big").state == w.expected()
    run_long(engine, 30, "small")
    with engine.store.reader() as r:
        assert latest.load_directory(r, "big") is None
        assert latest.load_directory(r, "small") is not None
        assert not any(k.startswith(b"big\x00") for k, _ in r.scan(latest.STATE))
    assert engine.state("big") == w.expected()
    assert maintenance.doctor(engine.store).ok


@pytest.mark.parametrize("fault", ["after_checkpoint:2", "before_commit:6", "after_commit:7"])
def test_a_killed_worker_leaves_the_index_equal_to_a_replay(tmp_path, fault):
    """SIGKILL at a commit boundary, resume in a new process: the index is what the log says."""
    from conftest import run_app

    home, counter = tmp_path / "home", tmp_path / "effects.log"
    crashed = run_app("chain_app.py", str(home), str(counter), "start", "r1", "durable",
                      fault=f"{fault}:kill")
    assert crashed.returncode in (-9, 137), crashed.stderr  # it really died there
    assert_index_is_the_replay(home)
    done = run_app("chain_app.py", str(home), str(counter), "resume", "r1", "durable")
    assert done.returncode == 0, done.stderr
    assert_index_is_the_replay(home)
    with bide.open(home) as eng:
        assert eng.state("r1")["trail"] == ["a", "b", "c", "join", "loop", "loop", "loop", "loop"]


def assert_index_is_the_replay(home: Path) -> None:
    with bide.open(home) as eng:
        assert maintenance.doctor(eng.store).ok
        with eng.store.reader() as r:
            head = r.head("r1")
            assert materialize(NoLog(r), "r1", head.checkpoint) == replay(r, "r1", head.checkpoint)
