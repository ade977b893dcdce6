# ruff: noqa: F811 - tests take the imported fixtures `home`/`template` as parameters
"""Issue 11 item 14: derived index values carry a checksum; a bad one is named, never shown.

Index values (run heads, intents, approvals, leases) are rebuilt from the log, so
the fix for a bad one is ``bide doctor --rebuild``; until then every read of it
refuses with the table and key. Homes written before (store format 1) read as
they are and gain checksums on their first writable open.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import bide
import lmdb
import pytest
from bide.cli import main
from bide.engine.storage.attention import ATTENTION
from bide.engine.storage.index import (
    APPROVALS,
    CHECKSUMMED,
    FRAMED,
    INTENTS,
    RUNLOG,
    RUNS,
    intent_key,
    read_index,
    runlog_key,
)
from bide.engine.storage.latest import SEGMENTS, STATE
from bide.engine.storage.lmdb_layout import MAX_DBS
from bide.engine.storage.lmdb_store import META, STORE_FORMAT, LMDBReader, TxnTables, existing_dbs
from bide.engine.storage.store import LEASES
from bide.formats import CorruptIndex, pack_value, unpack_value
from cli_world import DECIDED, FLOWS, NOTIFIED, home, template  # noqa: F401 - fixtures
from click.testing import CliRunner
from old_homes import finish_the_waiting_run

FIXTURES = Path(__file__).parent / "fixtures"
INDEX_TABLES = tuple(t for t in (*FRAMED, LEASES) if t not in (STATE, SEGMENTS))  # format 1


def cli(home: Path, *args: str):
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def flip_bit(home: Path, table: str, key: bytes, bit: int | None = None) -> None:
    """Flip one bit of a stored value behind the engine's back (a disk fault)."""
    with bide.open(home, create=False) as e:
        def body(txn):
            tables = TxnTables(txn, e.store.dbs)  # the key where the store's layout keeps it
            value = bytearray(tables.get(table, key))
            at = len(value) * 4 if bit is None else bit  # the middle of the value
            value[at // 8] ^= 1 << (at % 8)
            tables.put(table, key, bytes(value))
        e.store._write(body)


def waiting_approval(home: Path) -> str:
    with bide.open(home, create=False) as e:
        return e.get("r-waiting").waiting["approval_id"]


def test_a_flipped_approval_is_refused_by_pending_named_by_doctor_and_rebuilt(home):
    before = cli(home, "pending", "--json")
    assert before.exit_code == 0
    aid = waiting_approval(home)
    flip_bit(home, APPROVALS, aid.encode())
    refused = cli(home, "pending")
    assert refused.exit_code == 1 and refused.stdout == ""
    assert f"table 'approvals' at key '{aid}'" in refused.stderr, refused.stderr
    assert "checksum" in refused.stderr and "bide doctor --rebuild" in refused.stderr
    doctor = cli(home, "doctor", "--json")
    assert doctor.exit_code == 1
    problems = json.loads(doctor.stdout)["problems"]
    assert [(p["kind"], p["table"], p["key"]) for p in problems] == [
        ("corrupt", "approvals", aid)]
    rebuilt = cli(home, "doctor", "--rebuild", "--json")
    assert rebuilt.exit_code == 0 and json.loads(rebuilt.stdout)["ok"], rebuilt.stdout
    assert cli(home, "pending", "--json").stdout == before.stdout


def test_a_flipped_run_head_is_refused_by_show_and_runs(home):
    flip_bit(home, RUNS, b"r-done")
    for args in (["show", "r-done"], ["runs"]):
        refused = cli(home, *args)
        assert refused.exit_code == 1, refused.stdout
        assert "table 'runs' at key 'r-done'" in refused.stderr, refused.stderr
    problems = json.loads(cli(home, "doctor", "--json").stdout)["problems"]
    assert [(p["kind"], p["table"], p["key"]) for p in problems] == [("corrupt", "runs", "r-done")]
    assert cli(home, "doctor", "--rebuild").exit_code == 0
    assert cli(home, "show", "r-done").exit_code == 0


def test_a_flipped_intent_and_lease_are_named(home):
    with bide.open(home, create=False) as e, e.store.reader() as r:
        (intent,) = list(r.intents("r-recon"))
    key = intent_key("r-recon", intent.key)
    flip_bit(home, INTENTS, key)
    with bide.open(home, create=False) as e:  # a heartbeat: r-orphan's lease gets an entry
        with e.store.reader() as r:
            head = r.head("r-orphan")
        assert e.store.renew_leases([("r-orphan", head.lease_token, 1.0)]) == [True]
    refused = cli(home, "intents", "r-recon")
    assert refused.exit_code == 1 and "table 'intents'" in refused.stderr, refused.stderr
    flip_bit(home, LEASES, b"r-orphan")
    with bide.open(home, create=False) as e, e.store.reader() as r:
        with pytest.raises(CorruptIndex, match="table 'leases' at key 'r-orphan'"):
            r.lease_expiry("r-orphan")
    problems = json.loads(cli(home, "doctor", "--json").stdout)["problems"]
    assert {(p["kind"], p["table"]) for p in problems} == {("corrupt", "intents"),
                                                          ("corrupt", "leases")}


def test_a_flipped_run_log_entry_is_refused_by_log_and_named_by_doctor(home):
    with bide.open(home, create=False) as e, e.store.reader() as r:
        seq = next(s for s, t in r.run_entries("r-done") if t == "checkpoint")
    flip_bit(home, RUNLOG, runlog_key("r-done", seq))
    refused = cli(home, "log", "r-done")
    assert refused.exit_code == 1, refused.stdout
    assert f"table 'runlog' at key 'r-done@{seq}'" in refused.stderr, refused.stderr
    problems = json.loads(cli(home, "doctor", "--json").stdout)["problems"]
    assert [(p["kind"], p["table"], p["key"]) for p in problems] == [
        ("corrupt", "runlog", f"r-done@{seq}")]
    assert cli(home, "doctor", "--rebuild").exit_code == 0
    assert cli(home, "log", "r-done").exit_code == 0


def test_every_single_bit_flip_of_an_index_value_is_caught(home):
    with bide.open(home, create=False) as e, e.store.reader() as r:
        raw = r.get(RUNS, b"r-done")
        first = next(seq for seq, _ in r.run_entries("r-done"))
        tag = r.get(RUNLOG, runlog_key("r-done", first))
    for table, good in ((RUNS, raw), (RUNLOG, tag)):
        for bit in range(len(good) * 8):
            value = bytearray(good)
            value[bit // 8] ^= 1 << (bit % 8)
            with pytest.raises(CorruptIndex):
                read_index(table, b"k", bytes(value))


def test_index_values_round_trip_with_kept_types():
    value = [3, {"when": {1, 2}}]
    assert unpack_value(pack_value(value), table=LEASES, key=b"k") == [3, {"when": {1, 2}}]


# -- homes written before index checksums ---------------------------------------------

def old_home(tmp_path: Path) -> Path:
    """A home written by bide at db67783 (tests/fixtures/make_format1_home.py)."""
    with tarfile.open(FIXTURES / "format1_home.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "home"


def raw_tables(store: Path) -> tuple[bytes, dict[str, dict[bytes, bytes]]]:
    """The format and every index table, read with plain LMDB (nothing is written)."""
    env = lmdb.open(str(store), readonly=True, lock=False, max_dbs=MAX_DBS)
    try:
        with env.begin() as txn:
            dbs = existing_dbs(env, txn, write=False)
            reader = LMDBReader(txn, dbs)  # reads a not yet migrated home as it is
            tables = {t: dict(reader.scan(t)) if reader.lay.home_db(t) in dbs else {}
                      for t in INDEX_TABLES}  # (a table newer than the home: none)
            tables["read"] = {h.run_id: h.status for h in reader.heads()}  # type: ignore
            tables["read"].update({a.approval_id: a.decision for a in reader.approvals()})
            return txn.get(b"format", db=dbs[META]), tables
    finally:
        env.close()


def test_a_home_from_before_checksums_reads_as_it_is(tmp_path):
    old = old_home(tmp_path)
    fmt, tables = raw_tables(old / "store")
    assert fmt == b"1"
    assert all(v[:1] != b"\xc1" for t in INDEX_TABLES for v in tables[t].values())
    read = tables["read"]
    assert read["r-waiting"] == "WAITING_APPROVAL" and read["r-decided"] == "DONE"
    decisions = [v for k, v in read.items() if k.startswith("a-")]
    assert sorted(decisions, key=str) == [None, "approve"]


def test_a_home_from_before_checksums_gains_them_on_its_first_writable_open(tmp_path):
    old = old_home(tmp_path)
    _, before = raw_tables(old / "store")
    with bide.open(old, create=False):
        pass
    fmt, after = raw_tables(old / "store")
    assert fmt == str(STORE_FORMAT).encode() == b"5"
    assert all(after[table] for table in CHECKSUMMED)  # (an old home has no lease entries)
    assert before[ATTENTION] == {}  # format 1 had no attention table; the upgrade builds it
    assert {k.decode(): read_index(ATTENTION, k, v).status
            for k, v in after[ATTENTION].items()} == {"r-waiting": "WAITING_APPROVAL"}
    for table in INDEX_TABLES:
        if table == ATTENTION:
            continue
        assert after[table].keys() == before[table].keys()
        for key, value in after[table].items():
            assert value[:1] == b"\xc1", (table, key)
            assert read_index(table, key, value) == read_index(table, key, before[table][key])
    assert after["read"] == before["read"]
    doctor = cli(old, "doctor", "--json")
    assert doctor.exit_code == 0 and json.loads(doctor.stdout)["ok"], doctor.stdout


def test_a_migrated_old_home_runs_on(tmp_path):
    finish_the_waiting_run(old_home(tmp_path), "make_format1_home").close()
