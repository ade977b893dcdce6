"""doctor, rebuild, prune and compact: they find damage, and never cost a run its resume."""

# ruff: noqa: F811 - tests take the imported fixtures `home`/`template` as parameters

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import bide
import cli_world
import pytest
from bide.cli import main
from bide.engine.base import faults
from bide.engine.storage.index import RUNLOG, RUNS, ApprovalState, RunHead, runlog_key
from bide.engine.storage.lmdb_store import LOG, TxnTables
from bide.engine.upkeep import compaction, maintenance
from bide.formats import (
    Checkpoint,
    LeaseAcquired,
    LeaseReleased,
    PendingWrite,
    RunCreated,
    StatusChanged,
    pack,
    pack_value,
    unpack_value,
)
from cli_world import DECIDED, FLOWS, NOTIFIED, home, template  # noqa: F401 - fixtures
from click.testing import CliRunner

UNFINISHED = ["r-waiting", "r-recon", "r-orphan", "r-pending", DECIDED]


def cli(home: Path, *args: str) -> tuple[int, object]:
    result = CliRunner().invoke(main, [*args, "--home", str(home), "--json"],
                                catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


def raw_write(home: Path, table: str, key: bytes, value: bytes | None) -> None:
    """Change one stored value behind the engine's back (what a disk fault or a bug does)."""
    with bide.open(home, create=False) as e:
        def body(txn):
            tables = TxnTables(txn, e.store.dbs)  # the key where the store's layout keeps it
            if value is None:
                tables.delete(table, key)
            else:
                tables.put(table, key, value)
        e.store._write(body)


def read(home: Path, table: str, key: bytes) -> bytes:
    with bide.open(home, create=False) as e, e.store.reader() as r:
        return TxnTables(r.txn, e.store.dbs).get(table, key)


def a_seq(home: Path, run_id: str, rtype: str) -> int:
    with bide.open(home, create=False) as e, e.store.reader() as r:
        return next(s for s, t in r.run_entries(run_id) if t == rtype)


# -- doctor --------------------------------------------------------------------------
def test_doctor_names_a_corrupted_record(home: Path) -> None:
    seq = a_seq(home, "r-done", "checkpoint")
    key = seq.to_bytes(8, "big")
    value = bytearray(read(home, LOG, key))
    value[len(value) // 2] ^= 0x01  # one bit flipped in the middle of the body
    raw_write(home, LOG, key, bytes(value))
    code, doc = cli(home, "doctor")
    assert code == 1 and doc["ok"] is False
    (problem,) = doc["problems"]
    assert problem["kind"] == "corrupt" and problem["key"] == f"seq {seq}"
    assert "run r-done, checkpoint" in problem["detail"] and "checksum" in problem["detail"]
    result = CliRunner().invoke(main, ["doctor", "--home", str(home)])
    assert result.exit_code == 1 and f"seq {seq}" in result.stdout
    # a rebuild from a log that cannot be read would lie: refused, nothing changed
    code, _ = cli(home, "doctor", "--rebuild")
    assert code == 1
    code, _ = cli(home, "prune")
    assert code == 1


def test_doctor_finds_a_stale_index_and_rebuild_fixes_it(home: Path) -> None:
    head = unpack_value(read(home, RUNS, b"r-done"), RunHead, table=RUNS, key=b"r-done")
    head.status = "RUNNING"
    raw_write(home, RUNS, b"r-done", pack(head))
    raw_write(home, RUNLOG, runlog_key("r-failed", a_seq(home, "r-failed", "checkpoint")), None)
    made_up = ApprovalState(approval_id="a-made-up", run_id="r-x", kind="approval", node="n",
                            task="t", action="a", digest="d")
    raw_write(home, "approvals", b"a-made-up", pack_value(made_up))
    code, doc = cli(home, "doctor")
    assert code == 1
    found = {(p["kind"], p["table"], p["key"]) for p in doc["problems"]}
    seq = a_seq(home, "r-failed", "run_created") + 1
    assert found == {("differs", "runs", "r-done"), ("missing", "runlog", f"r-failed@{seq}"),
                     ("extra", "approvals", "a-made-up")}
    differs = next(p for p in doc["problems"] if p["kind"] == "differs")
    assert "status: 'RUNNING' in the index, 'DONE' from the log" in differs["detail"]
    code, doc = cli(home, "doctor", "--rebuild")
    assert code == 0 and doc["ok"] and doc["rebuilt"]
    assert cli(home, "show", "r-done")[1]["status"] == "DONE"


def test_rebuild_of_a_healthy_store_changes_nothing(home: Path) -> None:
    def snapshot() -> dict:
        with bide.open(home, create=False) as e, e.store.reader() as r:
            named = {name.encode() for name in e.store.dbs}  # their records hold page numbers
            return {name: [(k, v) for k, v in r.txn.cursor(db=db) if k not in named]
                    for name, db in e.store.dbs.items()}

    before = snapshot()
    with bide.open(home, create=False) as e:
        assert maintenance.rebuild_indexes(e.store) > 0
    assert snapshot() == before


# -- prune ------------------------------------------------------------------------------
def test_needed_keeps_chains_and_what_resume_reads() -> None:
    items = [(seq, 10, rec) for seq, rec in enumerate([
        RunCreated(run_id="r", flow="f"),
        Checkpoint(run_id="r", version=0, superstep=0, status="RUNNING", full=True, state={}),
        LeaseAcquired(run_id="r", owner="a", token=1, expires_at=0),
        PendingWrite(run_id="r", task="0:n:0", superstep=0, node="n"),
        Checkpoint(run_id="r", version=1, superstep=1, status="RUNNING", base=1, writes=[3]),
        PendingWrite(run_id="r", task="1:n:0", superstep=1, node="n"),
        Checkpoint(run_id="r", version=2, superstep=2, status="RUNNING", full=True, state={}),
        PendingWrite(run_id="r", task="2:n:0", superstep=2, node="n"),
        Checkpoint(run_id="r", version=3, superstep=3, status="RUNNING", base=6, writes=[7]),
        PendingWrite(run_id="r", task="3:n:0", superstep=3, node="n"),
        LeaseAcquired(run_id="r", owner="b", token=2, expires_at=0),
        StatusChanged(run_id="r", status="RUNNING"),
        LeaseReleased(run_id="r", owner="b", token=2),
    ])]
    assert maintenance.needed(items, 1) == {0, 6, 7, 8, 9, 10, 11, 12}
    assert maintenance.needed(items, 2) == {0, 6, 7, 8, 9, 10, 11, 12}
    assert maintenance.needed(items, 3) == {0, 1, 3, 4, 6, 7, 8, 9, 10, 11, 12}


def test_prune_trims_old_checkpoints_but_keeps_the_latest_chain(home: Path) -> None:
    before = cli(home, "checkpoints", "r-orphan")[1]
    assert [c["version"] for c in before] == [0, 1, 2, 3]
    code, report = cli(home, "prune", "--keep", "1")
    assert code == 0 and report["records_removed"] > 0 and not report["runs_removed"]
    assert [c["version"] for c in cli(home, "checkpoints", "r-orphan")[1]] == [2, 3]
    assert [c["version"] for c in cli(home, "checkpoints", "r-done")[1]] == [6]
    assert cli(home, "state", "r-done", "--version", "2")[0] == 3  # pruned: not found
    assert cli(home, "doctor")[1]["ok"]
    # the paused run's finished sibling still counts as done
    assert list(cli(home, "show", "r-waiting")[1]["pending_writes"]) == ["notify"]
    with bide.open(home, create=False) as e:  # a FAILED run kept: it can still be retried
        e.register(*FLOWS)
        again = e.resume("r-failed")
    assert str(again.status) == "FAILED" and "the disk is lava" in again.error


def test_a_pruned_seq_is_never_given_again(tmp_path: Path) -> None:
    home = tmp_path / "h"
    with bide.open(home) as e:
        e.register(*FLOWS)
        e.start("steps", {"until": 2}, run_id="r-old")
        with e.store.reader() as r:
            last = r.last_seq()
        report = maintenance.prune(e.store, finished_older_than=0, now=time.time() + 1)
        assert report.runs_removed == ["r-old"]
        e.start("steps", {"until": 2}, run_id="r-new")
        with e.store.reader() as r:
            assert min(s for s, _ in r.run_entries("r-new")) > last


def test_prune_removes_old_finished_runs_whole(home: Path) -> None:
    code, report = cli(home, "prune", "--finished-older-than", "1h")
    assert code == 0 and report["runs_removed"] == []  # nothing is an hour old
    with bide.open(home, create=False) as e:
        report = maintenance.prune(e.store, keep=2, finished_older_than=3600,
                                   now=time.time() + 7200)
    assert sorted(report.runs_removed) == ["r-cancelled", "r-done", "r-failed"]
    for run_id in report.runs_removed:
        assert cli(home, "show", run_id)[0] == 3
    assert {r["run_id"] for r in cli(home, "runs")[1]} == set(UNFINISHED)
    assert cli(home, "doctor")[1]["ok"]


def test_prune_dry_run_changes_nothing(home: Path) -> None:
    total = cli(home, "stats")[1]["total_records"]
    code, report = cli(home, "prune", "--dry-run", "--finished-older-than", "0s")
    assert code == 0 and report["dry_run"] and report["runs_removed"]
    assert cli(home, "stats")[1]["total_records"] == total


def finish_everything(home: Path) -> dict[str, dict]:
    """Decide what waits, recover what can run; return every run's final state."""
    with bide.open(home, create=False) as e:
        e.register(*FLOWS)
        e.decide(e.get("r-waiting").waiting["approval_id"], "approve", by="t")
        e.decide(e.get("r-recon").waiting["approval_id"], "mark_done", by="t",
                 result={"charged": 5})
        report = e.recover()
        assert report.skipped == () and report.blocked == ()
        return {run.run_id: (str(run.status), run.state) for run in e.runs()}


def test_pruned_store_resumes_exactly_like_an_unpruned_one(home: Path, tmp_path: Path) -> None:
    twin = tmp_path / "twin"
    shutil.copytree(home, twin)
    with bide.open(home, create=False) as e:
        maintenance.prune(e.store, keep=1, finished_older_than=0, now=time.time() + 1)
    assert cli(home, "doctor")[1]["ok"]
    NOTIFIED.clear()
    charges = len(cli_world.CHARGES)
    pruned = finish_everything(home)
    assert NOTIFIED == []  # the paused superstep's finished sibling was not run again
    assert len(cli_world.CHARGES) == charges  # the in-doubt charge was not repeated
    full = finish_everything(twin)
    assert set(pruned) == set(UNFINISHED)
    assert pruned == {k: v for k, v in full.items() if k in pruned}
    assert all(status == "DONE" for status, _ in pruned.values())


# -- compact -----------------------------------------------------------------------------
def test_compact_shrinks_and_keeps_every_run_resumable(home: Path, tmp_path: Path) -> None:
    twin = tmp_path / "twin"
    shutil.copytree(home, twin)
    with bide.open(home, create=False) as e:
        maintenance.prune(e.store, keep=1)
    report = compaction.compact(home)
    assert report.after < report.before
    assert not list(home.glob(".compact-*"))
    assert cli(home, "doctor")[1]["ok"]
    assert finish_everything(home) == finish_everything(twin)


def test_compact_keep_old_and_a_crash_during_the_swap(home: Path) -> None:
    report = compaction.compact(home, keep_old=True)
    old = Path(report.kept_old)
    assert old.is_file() and old.parent == home
    faults.configure("during_compact_swap:1:raise")
    try:
        with pytest.raises(faults.InjectedFault):
            compaction.compact(home)
    finally:
        faults.configure(None)
    # the store is untouched; the hard link left behind is the live file itself
    links = [p for p in home.glob(".compact-*.old.mdb") if p != old]
    assert len(links) == 1 and links[0].samefile(home / "store" / "data.mdb")
    assert not [p for p in home.glob(".compact-*") if p.is_dir()]
    assert cli(home, "doctor")[1]["ok"]
    compaction.compact(home)
    assert list(home.glob(".compact-*.old.mdb")) == [old]  # only the one asked to be kept
    assert cli(home, "doctor")[1]["ok"] and len(cli(home, "runs")[1]) == 8


HOLD = """
import sys, time, bide
e = bide.open(sys.argv[1], create=False)
print("open", flush=True)
sys.stdin.read()
"""


def test_compact_refuses_while_another_process_has_the_store_open(home: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(home)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        size = (home / "store" / "data.mdb").stat().st_size
        with pytest.raises(compaction.StoreBusy, match=f"process {proc.pid}"):
            compaction.compact(home)
        result = CliRunner().invoke(main, ["compact", "--home", str(home)])
        assert result.exit_code == 1 and str(proc.pid) in result.stderr
        assert (home / "store" / "data.mdb").stat().st_size == size
        assert not list(home.glob(".compact-*"))
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()
    assert compaction.holder(home / "store" / "lock.mdb") is None
    compaction.compact(home)


def test_compact_a_home_that_is_not_one(tmp_path: Path) -> None:
    with pytest.raises(bide.NotAHome):
        compaction.compact(tmp_path)
    assert os.listdir(tmp_path) == []
