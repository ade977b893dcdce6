"""One broken run must not stop the watcher for everyone (issue 11, item 4).

A run's own problem (a renamed node, an unknown flow, a corrupt record of that
run) is recorded on the run, logged once, and the watcher keeps serving the others.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import bide
from bide.engine.ops.watcher import Watcher
from bide.engine.run.blocking import BLOCKED
from bide.engine.storage.lmdb_store import LOG, TxnTables
from bide.engine.upkeep import maintenance
from conftest import APPS
from polling import wait_for

sys.path.insert(0, str(APPS))
import evolving_app  # noqa: E402

BIDE = shutil.which("bide", path=str(Path(sys.executable).parent)) or "bide"


def _env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(APPS), base.get("PYTHONPATH")]))
    return base


def _status(home: Path, run_id: str) -> bide.Run:
    with bide.open(home, create=False) as e:
        return e.get(run_id)


def _records(home: Path, run_id: str, rtype: str) -> int:
    with bide.open(home, create=False) as e:
        return sum(1 for _, t, _ in e.records(run_id) if t == rtype)


def _submit(home: Path, flows: list[bide.Flow], flow: str, run_id: str) -> None:
    with bide.open(home) as e:
        e.register(*flows)
        e.submit(flow, run_id=run_id)


def test_a_serving_watcher_records_a_renamed_node_and_serves_the_others(home: Path) -> None:
    _submit(home, evolving_app.OLD, "evolve", "broken")
    for i in range(3):
        _submit(home, evolving_app.OLD, "count", f"ok-{i}")
    watcher = subprocess.Popen([BIDE, "watch", "--home", str(home), "--app",
                                "evolving_app:NEW"], env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all(_status(home, f"ok-{i}").status == "DONE"
                                    for i in range(3)), 30), "the healthy runs did not finish"
        _submit(home, evolving_app.OLD, "count", "later")  # still serving after the broken one
        assert wait_for(lambda: _status(home, "later").status == "DONE", 30)
        time.sleep(2.5)  # a few rescans (1 s each): the broken run is not recorded again
        assert watcher.poll() is None, "the watcher quit"
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    broken = _status(home, "broken")
    assert broken.status == "PENDING" and broken.reason == BLOCKED
    assert "FlowMismatch" in broken.error and "'legacy'" in broken.error
    assert _records(home, "broken", "status_changed") == 1
    assert out.count("run broken: blocked") == 1, out
    shown = subprocess.run([BIDE, "show", "broken", "--home", str(home)], env=_env(),
                           capture_output=True, text=True, timeout=60)
    assert "blocked" in shown.stdout and "FlowMismatch" in shown.stdout
    # redeploying the flow that has the node lets the run continue
    fixed = subprocess.run([BIDE, "watch", "--once", "--home", str(home), "--app",
                            "evolving_app:OLD"], env=_env(), capture_output=True, text=True,
                           timeout=60)
    assert fixed.returncode == 0, fixed.stderr
    done = _status(home, "broken")
    assert done.status == "DONE" and done.reason != BLOCKED and done.error is None


def test_watch_once_exits_zero_on_a_run_s_own_error(home: Path) -> None:
    _submit(home, evolving_app.OLD, "evolve", "broken")
    _submit(home, evolving_app.OLD, "count", "ok")
    once = subprocess.run([BIDE, "watch", "--once", "--home", str(home), "--app",
                           "evolving_app:NEW"], env=_env(), capture_output=True, text=True,
                          timeout=60)
    assert once.returncode == 0, once.stderr
    assert _status(home, "ok").status == "DONE"
    assert "run broken: blocked" in once.stdout


def test_an_unknown_flow_is_recorded_once_and_the_others_run(home: Path) -> None:
    _submit(home, evolving_app.OLD, "evolve", "orphaned-flow")
    _submit(home, evolving_app.OLD, "count", "ok")
    lines: list[str] = []
    with bide.open(home, durability="fast") as e:
        e.register(evolving_app.OLD[1])  # only "count": "evolve" is not served here
        watcher = Watcher(e, log=lines.append)
        assert [r.run_id for r in watcher.once()["runs"]] == ["ok"]
        watcher.once()
        head = e.get("orphaned-flow")
        assert head.status == "PENDING" and head.reason == BLOCKED
        assert "UnknownFlow" in head.error and "'evolve'" in head.error
    assert sum("orphaned-flow: blocked" in line for line in lines) == 1
    assert _records(home, "orphaned-flow", "status_changed") == 1
    # a second process with the same problem does not record it again either
    with bide.open(home, durability="fast") as e:
        e.register(evolving_app.OLD[1])
        Watcher(e, log=lambda _line: None).once()
        assert maintenance.doctor(e.store, rebuild=True).ok  # the indexes fold it as the log
    assert _records(home, "orphaned-flow", "status_changed") == 1
    assert _status(home, "orphaned-flow").reason == BLOCKED  # and so after a rebuild


def test_a_corrupt_record_blocks_only_its_run(home: Path) -> None:
    _submit(home, evolving_app.OLD, "count", "corrupt")
    _submit(home, evolving_app.OLD, "count", "ok")
    with bide.open(home, durability="fast") as e, e.store.reader() as r:
        seq = next(s for s, t in r.run_entries("corrupt") if t == "checkpoint")
    key = seq.to_bytes(8, "big")
    with bide.open(home, durability="fast") as e:
        def flip(txn):
            tables = TxnTables(txn, e.store.dbs)  # the key where the store's layout keeps it
            value = bytearray(tables.get(LOG, key))
            value[len(value) // 2] ^= 0x01
            tables.put(LOG, key, bytes(value))
        e.store._write(flip)
        e.register(*evolving_app.OLD)
        runs = Watcher(e, log=lambda _line: None).once()["runs"]
        assert [(r.run_id, r.status) for r in runs] == [("ok", "DONE")]
        head = e.get("corrupt")
        assert head.reason == BLOCKED and "CorruptRecord" in head.error
        assert e._head("corrupt").lease_owner is None  # any worker may retry once repaired


def test_recover_reports_a_blocked_run_as_not_advanced(home: Path) -> None:
    _submit(home, evolving_app.OLD, "evolve", "broken")
    with bide.open(home, durability="fast") as e:
        e.register(*evolving_app.NEW)
        report = e.recover()
        assert report == []
        assert [entry.run_id for entry in report.blocked] == ["broken"]
        assert report.skipped == () and report.given_up == ()
        assert report.blocked[0].recorded_now and "FlowMismatch" in report.blocked[0].reason
        again = e.recover()  # the same block, already recorded: reported, not recorded again
        assert [(x.run_id, x.recorded_now) for x in again.blocked] == [("broken", False)]


def test_a_node_that_raises_fails_its_run_and_the_others_go_on(home: Path) -> None:
    boom = bide.Flow("boom")

    @boom.node(start=True)
    def explode(state, ctx):
        raise RuntimeError("kaput")

    _submit(home, [boom], "boom", "failing")
    _submit(home, evolving_app.OLD, "count", "ok")
    with bide.open(home, durability="fast") as e:
        e.register(boom, *evolving_app.OLD)
        runs = {r.run_id: str(r.status) for r in Watcher(e, log=lambda _l: None).once()["runs"]}
        assert runs == {"failing": "FAILED", "ok": "DONE"}
        assert "kaput" in e.get("failing").error
