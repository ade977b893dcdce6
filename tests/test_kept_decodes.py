"""A commit reuses what the run's last commit decoded or packed, never at the cost of a byte.

The commit fence's run head, the latest-state directory and a list's open tail are
kept by their bytes (engine/storage/kept.py; engine/storage/index.py ``take_head``,
engine/storage/latest.py ``_take_directory`` and ``_take_tail``):
reused only while the stored bytes are the ones they were packed to. The head is
packed without walking its scalar fields (``pack_head``): the same bytes as
``pack_value``, which golden tests pin.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import bide
from bide.bench.kit.workloads import Workload
from bide.engine.base.vocabulary import Status
from bide.engine.storage import index, latest
from bide.engine.storage.index import RunHead, keep_head, pack_head, take_head
from bide.formats import Checkpoint, pack_value
from cost_helpers import DictTables


def head(**fields: Any) -> RunHead:
    base: dict[str, Any] = dict(run_id="r", flow="f", status=Status.RUNNING, policy={"a": 1},
                                committed=["step"], lease_owner="me", lease_token=3)
    return RunHead(**{**base, **fields})


def test_pack_head_writes_pack_value_s_bytes():
    heads = [
        head(),
        head(status="DONE", waiting=None, error="boom", reason=Status.FAILED),
        head(policy={"when": dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc), "t": (1, 2)}),
        head(waiting={"type": "timer", "until": 5.0, "ids": {"a", "b"}}, committed=[]),
        head(error=("not", "a", "str")),  # a scalar field holding a kept type: walked
        head(node=Status.DONE, woken="x", parent="p", parent_version=2),
    ]
    for h in heads:
        assert pack_head(h) == pack_value(h), h


def test_a_kept_head_is_taken_only_for_its_own_bytes():
    h = head()
    raw, key = pack_value(h), b"r-kept"
    keep_head(key, raw, h)
    other = pack_value(head(lease_token=4))
    assert take_head(other, key).lease_token == 4  # stored bytes differ: decoded
    assert take_head(raw, key) is not h  # the mismatch above dropped it
    keep_head(key, raw, h)
    assert take_head(raw, key) is h
    assert take_head(raw, key) is not h  # taken once: nobody shares it


def test_a_kept_head_owns_its_committed_list():
    names = ["a"]
    h = head(committed=names)
    keep_head(b"r-own", pack_value(h), h)
    names.append("b")
    assert h.committed == ["a"]


def checkpoint(version: int, **fields: Any) -> Checkpoint:
    return Checkpoint(run_id="kept", version=version, superstep=version,
                      status=bide.Status.RUNNING, at=0.0, **fields)


def test_a_directory_changed_under_the_fold_is_decoded_again():
    """Two stores folding the same run id: each fold reads its own directory's bytes."""
    one, two = DictTables(), DictTables()
    latest.fold(one, 1, checkpoint(0, full=True, state={"a": 1, "b": [0]}))
    latest.fold(two, 1, checkpoint(0, full=True, state={"b": [1]}))  # kept: two's
    latest.fold(one, 2, checkpoint(1, base=1, ops=[("c", "set", 2), ("b", "append", [3])]))
    latest.fold(two, 2, checkpoint(1, base=1, ops=[("b", "append", [2])]))
    assert latest.read(one, "kept", 2) == {"a": 1, "b": [0, 3], "c": 2}
    assert latest.read(two, "kept", 2) == {"b": [1, 2]}


def test_a_fold_that_fails_keeps_no_directory():
    tables = DictTables()
    latest.fold(tables, 1, checkpoint(0, full=True, state={"a": [1]}))
    before = dict(tables.data)
    key = latest.directory_key("kept")
    latest.fold(tables, 2, checkpoint(1, base=1, writes=[7]))  # seq 7 is not in the log
    assert key not in latest._folded and (latest.STATE, key) not in tables.data
    tables.data = before  # as if that transaction was rolled back
    latest.fold(tables, 3, checkpoint(2, base=1, ops=[("a", "append", [2])]))
    assert latest.read(tables, "kept", 3) == {"a": [1, 2]}


def test_chain_commits_keep_their_head(tmp_path, monkeypatch):
    decoded = []
    real = index.unpack_value
    monkeypatch.setattr(index, "unpack_value",
                        lambda raw, cls, **kw: (decoded.append(cls), real(raw, cls, **kw))[1])
    w = Workload("long", 30, 10)
    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(w.flow())
        run = eng.start(w.flow().name, w.initial(), run_id="c")
        assert run.state == w.expected()
    assert decoded.count(RunHead) <= 3  # at the run's first commits, not one a superstep


def _head_bytes_after(home, decode_every_time: bool) -> list[bytes]:
    from bide.engine.storage.index import RUNS
    from bide.engine.storage.lmdb_store import LMDBStore
    from bide.formats import LeaseAcquired, RunCreated, StatusChanged

    store = LMDBStore(home, durability="fast")
    out = []
    try:
        store.commit([RunCreated(run_id="i", flow="f", at=1.0),
                      LeaseAcquired(run_id="i", owner="w", token=1, expires_at=10**12)])
        for i in range(3):
            if decode_every_time:
                index._kept_heads.clear()  # as before heads were kept: decoded every time
            store.commit([StatusChanged(run_id="i", status="RUNNING", reason=str(i), at=5)],
                         fence=("i", 1))
            with store.reader() as r:
                out.append(r.get(RUNS, b"i"))
    finally:
        store.close()
    return out


def test_a_kept_head_writes_the_bytes_a_decoded_one_would_with_int_times(tmp_path):
    """A clock that gives ints: decoding makes the head's times floats, so the kept head
    must hold floats too, or the next commit packs ints (equal values, other bytes).
    Found in review; fails without ``keep_head``'s float()."""
    assert (_head_bytes_after(tmp_path / "kept", False)
            == _head_bytes_after(tmp_path / "decoded", True))


def test_kept_directories_stay_within_their_byte_budget() -> None:
    """Decoded, a directory takes ~18x its bytes (1,023 of 4 KB held 76 MB): the kept
    ones are capped by their stored bytes as well as by their number."""
    latest._folded.clear()
    keys = {f"k{i:04d}": None for i in range(300)}  # a directory of ~2 KB
    packed = latest._pack_directory(latest.Directory(at=1, keys=keys))
    try:
        for n in range(latest._MOST_KEPT):
            latest._folded.keep(b"run%d" % n, packed, latest.Directory(at=1, keys=keys))
            kept = sum(len(raw) for raw, _ in latest._folded.values())
            assert kept == latest._folded.bytes <= latest._KEPT_DIRECTORY_BYTES
        assert len(latest._folded) < latest._MOST_KEPT  # the budget, not the count, bound it
    finally:
        latest._folded.clear()
