"""Issue 11 item 14 for LangGraph threads: the ``langgraph`` table's values carry a checksum.

A flipped bit in an entry (a checkpoint's seq pointer, a blob's, a pending write's,
the thread's latest mark, its flags) is refused by the saver's read with the key
named, named ``corrupt`` by ``bide doctor`` and repaired by ``doctor --rebuild``.
Homes written before (store format 1) read as they are and gain the checksums on
their first writable open, losing nothing.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import lmdb
import msgspec
import pytest
from extras import need

need("langgraph.checkpoint.base")

from bide.cli import main  # noqa: E402
from bide.engine.langgraph.store import Threads  # noqa: E402
from bide.engine.storage import langgraph_index as lg  # noqa: E402
from bide.engine.storage.index import read_index  # noqa: E402
from bide.engine.storage.lmdb_layout import MAX_DBS  # noqa: E402
from bide.engine.storage.lmdb_store import META, LMDBReader, existing_dbs  # noqa: E402
from bide.formats import CorruptIndex  # noqa: E402
from bide.langgraph import BideSaver  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def cli(home: Path, *args: str):
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def shown(key: bytes) -> str:
    return key.decode(errors="replace").replace("\x00", " ")


@pytest.fixture
def thread(tmp_path):
    """A thread of two checkpoints (run id "run-1"): writes on the first, an error on the second."""
    home = tmp_path / "home"
    with BideSaver.from_home(home, durability="fast") as saver:
        first = empty_checkpoint()
        first["channel_values"], first["channel_versions"] = {"a": 1}, {"a": 1}
        c1 = saver.put(ROOT, first, {"source": "input", "step": -1, "run_id": "run-1"}, {"a": 1})
        saver.put_writes(c1, [("a", 2)], "task-1")
        second = create_checkpoint(first, None, 0)
        second["channel_values"], second["channel_versions"] = {"a": 2}, {"a": 2}
        c2 = saver.put(c1, second, {"source": "loop", "step": 0, "run_id": "run-1"}, {"a": 2})
        saver.put_writes(c2, [("__error__", ValueError("boom"))], "task-2")
    id1, id2 = c1["configurable"]["checkpoint_id"], c2["configurable"]["checkpoint_id"]
    keys = {
        "checkpoint": lg.ckpt_key("t", "", id2),
        "blob": lg.blob_key("t", "", "a", 2),
        "write": lg.write_key("t", "", id1, "task-1", 0),
        "latest": lg.latest_key("t"),
        "flags": lg.flags_key("t", "", id2),
        "record": lg.seqs_prefix("t", "", id2),  # completed below: the first seq under it
        "run": lg.run_key("run-1", "t", "", id2),
    }
    with BideSaver.from_home(home) as saver, saver.threads.store.reader() as r:
        keys["record"] = next(k for k, _ in r.scan(lg.LG, keys["record"]))
        assert all(r.get(lg.LG, k) is not None for k in keys.values())
    return home, c1, c2, keys


def flip_bit(home: Path, key: bytes) -> None:
    """Flip one bit in the middle of a stored value behind the engine's back (a disk fault)."""
    with BideSaver.from_home(home) as saver:
        store = saver.threads.store

        def body(txn):
            value = bytearray(txn.get(key, db=store.dbs[lg.LG]))
            at = len(value) * 4
            value[at // 8] ^= 1 << (at % 8)
            txn.put(key, bytes(value), db=store.dbs[lg.LG])
        store._write(body)


def snapshot(saver: BideSaver, *configs) -> list:
    return [(t.checkpoint, t.metadata, t.pending_writes and [w[:2] for w in t.pending_writes])
            for t in map(saver.get_tuple, configs)]


# the saver's read each kind of entry is met by (the "record" and "run" entries are
# only walked by key; doctor alone reads their values)
READS = {
    "checkpoint": lambda s, c1, c2: s.get_tuple(c2),
    "blob": lambda s, c1, c2: s.get_tuple(c2),
    "write": lambda s, c1, c2: s.get_tuple(c1),
    "latest": lambda s, c1, c2: s.put_writes(c2, [("a", 3)], "task-3"),
    "flags": lambda s, c1, c2: s.put_writes(c2, [("a", 3)], "task-3"),
}


@pytest.mark.parametrize("kind", ["checkpoint", "blob", "write", "latest", "flags",
                                  "record", "run"])
def test_a_flipped_langgraph_entry_is_refused_named_by_doctor_and_rebuilt(thread, kind):
    home, c1, c2, keys = thread
    key = keys[kind]
    with BideSaver.from_home(home) as saver:
        before = snapshot(saver, c1, c2)
    flip_bit(home, key)
    if kind in READS:
        with BideSaver.from_home(home) as saver:
            with pytest.raises(CorruptIndex) as refused:
                READS[kind](saver, c1, c2)
        assert (refused.value.table, refused.value.key) == (lg.LG, key)
        assert "checksum" in str(refused.value) and "bide doctor --rebuild" in str(refused.value)
    doctor = cli(home, "doctor", "--json")
    assert doctor.exit_code == 1, doctor.stdout
    problems = json.loads(doctor.stdout)["problems"]
    assert [(p["kind"], p["table"], p["key"]) for p in problems] == [
        ("corrupt", "langgraph", shown(key))]
    rebuilt = cli(home, "doctor", "--rebuild", "--json")
    assert rebuilt.exit_code == 0 and json.loads(rebuilt.stdout)["ok"], rebuilt.stdout
    with BideSaver.from_home(home) as saver:
        assert snapshot(saver, c1, c2) == before


def test_every_bit_flip_of_a_langgraph_value_is_caught(thread):
    home, _, _, keys = thread
    with BideSaver.from_home(home) as saver, saver.threads.store.reader() as r:
        good = {kind: r.get(lg.LG, key) for kind, key in keys.items()}
    for kind, key in keys.items():
        assert good[kind][:1] == b"\xc1", kind
        for bit in range(len(good[kind]) * 8):
            value = bytearray(good[kind])
            value[bit // 8] ^= 1 << (bit % 8)
            if kind in ("latest", "flags") and bit < 8:
                continue  # a flipped frame byte reads as an older, unframed text: doctor's
                # rebuild comparison names it ("differs"); test_..._rebuilt covers doctor
            with pytest.raises(CorruptIndex):
                read_index(lg.LG, key, bytes(value))


# -- homes written before the checksums ----------------------------------------------
def old_home(tmp_path: Path) -> tuple[Path, list]:
    """Threads written by bide at db67783 (fixtures/make_format1_langgraph_home.py)."""
    with tarfile.open(FIXTURES / "format1_langgraph_home.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "home", msgspec.msgpack.decode((tmp_path / "expected.msgpack").read_bytes())


def everything(threads: Threads) -> list:
    return [[s.thread, s.ns, s.record.checkpoint_id, s.record.checkpoint, s.record.metadata,
             {ch: list(v) for ch, v in s.values.items()},
             [[t, ch, list(v)] for t, ch, v in s.writes]]
            for s in threads.load(threads.keys(None, None))]


def raw_home(store: Path):
    """The format and the ``langgraph`` table, read with plain LMDB; checkpoints read
    through the saver's read path on the unmigrated bytes (nothing is written)."""
    env = lmdb.open(str(store), readonly=True, lock=False, max_dbs=MAX_DBS)
    try:
        with env.begin() as txn:
            dbs = existing_dbs(env, txn, write=False)
            reader = LMDBReader(txn, dbs)
            threads = Threads(None)  # type: ignore[arg-type]
            read = [threads._load(reader, k, v) for k, v in txn.cursor(db=dbs[lg.LG])
                    if k[:1] == lg.CKPT and lg.is_checkpoint(k)]
            return txn.get(b"format", db=dbs[META]), dict(txn.cursor(db=dbs[lg.LG])), read
    finally:
        env.close()


def test_an_old_langgraph_home_reads_as_it_is(tmp_path):
    home, expected = old_home(tmp_path)
    fmt, table, read = raw_home(home / "store")
    assert fmt == b"1" and table and all(v[:1] != b"\xc1" for v in table.values())
    kinds = {lg._kind(k) for k in table}
    assert kinds == {"checkpoint", "channel value", "write", "record", "run", "latest", "flags"}
    assert sorted(s.record.checkpoint_id for s in read) == sorted(e[2] for e in expected)


def test_an_old_langgraph_home_migrates_and_reads_back_every_checkpoint(tmp_path):
    home, expected = old_home(tmp_path)
    _, before, _ = raw_home(home / "store")
    with BideSaver.from_home(home) as saver:
        assert everything(saver.threads) == expected
    fmt, after, _ = raw_home(home / "store")
    assert fmt == b"5" and after.keys() == before.keys()
    for key, value in after.items():
        assert value[:1] == b"\xc1", key
        assert read_index(lg.LG, key, value) == read_index(lg.LG, key, before[key])
    doctor = cli(home, "doctor", "--json")
    assert doctor.exit_code == 0 and json.loads(doctor.stdout)["ok"], doctor.stdout
    with BideSaver.from_home(home) as saver:  # and the threads go on
        assert everything(saver.threads) == expected
        cfg = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
        latest = saver.get_tuple(cfg)
        nxt = create_checkpoint(latest.checkpoint, None, 99)
        saver.put(latest.config, nxt, {"source": "loop", "step": 99}, {})
        assert saver.get_tuple(cfg).checkpoint["id"] == nxt["id"]
        assert saver.get_tuple(cfg).checkpoint["channel_values"] == \
            latest.checkpoint["channel_values"]
