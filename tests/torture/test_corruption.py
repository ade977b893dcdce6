"""Corruption and resource failures: every truncation and bit flip of each record type is
caught by its checksum (doctor names the key); a full map grows; a size limit fails clearly
and stays readable; a failed fsync stops the engine."""

from __future__ import annotations

import bide
import lmdb
import pytest
from bide.engine.base.errors import DurabilityLost, StoreFull
from bide.engine.storage.lmdb_store import LOG, TxnTables, seq_key
from bide.engine.upkeep.maintenance import doctor
from bide.formats import decode
from bide.formats.errors import CorruptRecord
from bide.tests.torture.harness.workloads import World, build_flow, drive

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """One raw record of each type, from a run with tools, an approval and a decision."""
    base = tmp_path_factory.mktemp("corrupt")
    drive(base / "home", "approval", "fast", World(base / "effects"))
    drive(base / "home2", "tools", "fast", World(base / "effects2"))
    by_type: dict[str, tuple[str, int, bytes]] = {}
    for home in ("home", "home2"):
        with bide.open(base / home, durability="fast") as eng:
            with eng.store.reader() as r:
                for seq, raw in r.log():
                    by_type.setdefault(type(decode(raw)).__name__, (home, seq, raw))
    assert len(by_type) >= 9, sorted(by_type)
    return base, by_type


def test_every_truncation_and_bit_flip_of_every_record_type_is_detected(records):
    _, by_type = records
    for _name, (_, seq, raw) in by_type.items():
        for n in range(len(raw)):
            with pytest.raises(CorruptRecord):
                decode(raw[:n], key=seq)
        for bit in range(len(raw) * 8):
            flipped = bytearray(raw)
            flipped[bit // 8] ^= 1 << (bit % 8)
            with pytest.raises(CorruptRecord):
                decode(bytes(flipped), key=seq)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_doctor_names_the_key_of_a_damaged_record(records, tmp_path, damage):
    base, by_type = records
    import shutil

    for name, (home, seq, raw) in by_type.items():
        copy = tmp_path / f"{name}-{damage}"
        shutil.copytree(base / home, copy)
        bad = raw[: len(raw) // 2] if damage == "truncate" else \
            raw[:-3] + bytes([raw[-3] ^ 0x10]) + raw[-2:]
        with bide.open(copy, durability="fast") as eng:
            eng.store._write(lambda txn, s=seq, b=bad: TxnTables(txn, eng.store.dbs).put(
                LOG, seq_key(s), b))
            report = doctor(eng.store)
        assert not report.ok, name
        assert any(p.kind == "corrupt" and str(seq) in p.key for p in report.problems), \
            (name, [str(p) for p in report.problems])


def test_a_full_map_grows(tmp_path):
    with bide.open(tmp_path / "h", durability="fast", map_size=1 << 17) as eng:
        eng.register(build_flow("grow", World(tmp_path / "e")))
        before = eng.store.info()["map_size"]
        assert eng.start("torture-grow", input={"n": 0}, run_id="r").status == "DONE"
        assert eng.store.info()["map_size"] > before
        assert doctor(eng.store).ok


def test_the_size_limit_fails_clearly_and_stays_readable(tmp_path):
    with bide.open(tmp_path / "h", durability="fast", map_size=1 << 17,
                   max_size=1 << 18) as eng:
        eng.register(build_flow("grow", World(tmp_path / "e")))
        try:
            run = eng.start("torture-grow", input={"n": 0}, run_id="r")
        except StoreFull as exc:  # the commit that did not fit says so
            assert "size limit" in str(exc)
        else:  # or a node's commit did not fit: the run FAILED saying why
            assert run.status == "FAILED" and "size limit" in (run.error or ""), run.error
        assert eng.runs() and doctor(eng.store).ok  # still readable and consistent
    with bide.open(tmp_path / "h", durability="fast") as eng:  # a larger limit goes on
        eng.register(build_flow("grow", World(tmp_path / "e")))
        assert eng.get("r").run_id == "r" and doctor(eng.store).ok  # get raises if it is gone


class _FailingCommit:
    """A write transaction whose commit fails like an fsync error."""

    def __init__(self, txn):
        self.txn = txn

    def __enter__(self):
        return self.txn.__enter__()

    def __exit__(self, *exc):
        self.txn.abort()
        raise lmdb.DiskError("fsync: Input/output error (simulated)")


class _Env:
    def __init__(self, env, fail):
        self._env, self._fail = env, fail

    def begin(self, write=False, **kw):
        txn = self._env.begin(write=write, **kw)
        return _FailingCommit(txn) if write and self._fail[0] else txn

    def __getattr__(self, name):
        return getattr(self._env, name)


def test_a_failed_fsync_stops_the_engine(tmp_path):
    world = World(tmp_path / "effects")
    with bide.open(tmp_path / "h", durability="durable") as eng:
        eng.register(build_flow("tools", world))
        fail = [False]
        eng.store.env = _Env(eng.store.env, fail)
        fail[0] = True
        with pytest.raises(DurabilityLost):
            eng.start("torture-tools", run_id="r")
        fail[0] = False  # the disk "recovers": this engine still refuses to write
        with pytest.raises(DurabilityLost):
            eng.start("torture-tools", run_id="r2")
        assert world.lines() == {}  # no tool ran after the failure
    with bide.open(tmp_path / "h", durability="durable") as eng:  # reopening recovers
        eng.register(build_flow("tools", world))
        assert eng.start("torture-tools", run_id="r3").status == "DONE"
