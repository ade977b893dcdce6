"""Pauses for approval, decisions through the inbox, the watcher, leases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import bide
import pytest
from bide.engine.human.inbox import drop_decision, sign
from bide.engine.ops.watcher import Watcher
from conftest import APPS, count_lines
from polling import wait_for

sys.path.insert(0, str(APPS))
import incident_app  # noqa: E402


@pytest.fixture
def effects(tmp_path, monkeypatch):
    path = tmp_path / "effects.log"
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(path))
    return path


def start_paused(engine, run_id="r-42"):
    engine.register(incident_app.flow)
    run = engine.start("incident", input={"query": "disk full"}, run_id=run_id)
    assert run.status == "WAITING_APPROVAL"
    return run


def test_pause_commits_request_and_checkpoint_and_keeps_sibling_writes(engine, effects, home):
    run = start_paused(engine)
    aid = run.waiting["approval_id"]
    assert run.waiting == {"type": "approval", "node_id": "apply_patch", "approval_id": aid}
    request = json.loads((home / "requests" / f"{aid}.json").read_text())
    assert request["action"] == "apply patch" and request["payload"] == {"patch": "p-9"}
    assert request["decision_files"][0]["decision"] == "approve"
    (pending,) = engine.pending()
    assert pending["approval_id"] == aid and pending["run_id"] == "r-42"
    assert pending["node"] == "apply_patch" and pending["digest"].startswith("sha256:")
    assert engine.checkpoints("r-42")[-1].status == "WAITING_APPROVAL"
    assert engine.resume("r-42").status == "WAITING_APPROVAL"  # undecided: nothing runs
    assert engine.decide(aid, "approve", by="alice", reason="ok") is True
    assert engine.decide(aid, "approve", by="alice") is False  # the same decision: a no-op
    with pytest.raises(bide.DecisionRefused, match="already decided"):
        engine.decide(aid, "reject")
    run = engine.resume("r-42")
    assert run.status == "DONE" and run.state["applied"] is True
    lines = count_lines(effects)
    assert lines["node search_logs r-42"] == 1 and lines["node prepare_patch r-42"] == 1
    assert lines["node apply_patch r-42"] == 2  # asked, then ran again after the decision
    assert sum(v for k, v in lines.items() if k.startswith("tool git_apply")) == 1


def test_rejected_approval(engine, effects):
    run = start_paused(engine)
    engine.decide(run.waiting["approval_id"], "reject", by="bob", reason="not now")
    run = engine.resume("r-42")
    assert run.status == "DONE" and run.state["applied"] is False
    assert not any(k.startswith("tool git_apply") for k in count_lines(effects))


def test_tool_that_needs_approval_asks_with_its_arguments(engine):
    deleted = []

    @bide.tool(needs_approval=True)
    def delete_branch(name: str) -> None:
        deleted.append(name)

    flow = bide.Flow("cleanup")
    flow.node(lambda s, ctx: {"x": ctx.tool(delete_branch, "old")}, name="clean", start=True)
    engine.register(flow)
    run = engine.start("cleanup", run_id="rc")
    (p,) = engine.pending()
    assert run.status == "WAITING_APPROVAL" and p["payload"] == {"args": ["old"], "kwargs": {}}
    engine.decide(p["approval_id"], "approve")
    assert engine.resume("rc").status == "DONE" and deleted == ["old"]


def test_expired_request_rejects_itself(home):
    now = [1000.0]
    flow = bide.Flow("exp")
    flow.node(lambda s, ctx: {"ok": ctx.approve("x", expires_in=60)}, name="n", start=True)
    with bide.open(home, durability="fast", clock=lambda: now[0]) as eng:
        eng.register(flow)
        aid = eng.start("exp", run_id="re").waiting["approval_id"]
        now[0] += 61
        with pytest.raises(bide.DecisionRefused, match="expired"):
            eng.decide(aid, "approve")
        assert eng.resume("re").state == {"ok": False}


def inbox_files(home, sub):
    return sorted(p.name for p in (home / "inbox" / sub).iterdir())


def test_decision_file_through_the_inbox(engine, effects, home):
    run = start_paused(engine)
    aid = run.waiting["approval_id"]
    path = drop_decision(home, aid, "approve", by="alice", reason="looks right",
                         run_id="r-42", digest=engine.pending()[0]["digest"])
    watcher = Watcher(engine, log=lambda line: None)
    result = watcher.once()
    assert [f.accepted for f in result["files"]] == [True]
    assert [r.status for r in result["runs"]] == ["DONE"]
    assert inbox_files(home, "processed") == [path.name]
    shutil_copy = (home / "inbox" / "processed" / path.name).read_bytes()
    (home / "inbox" / "again.json").write_bytes(shutil_copy)
    assert [f.duplicate for f in watcher.once()["files"]] == [True]  # same file twice: no-op
    with engine.store.reader() as r:
        decision = r.approval(aid)
    assert decision.by == "alice" and decision.file == path.name
    assert decision.content_digest.startswith("sha256:")


BAD_FILES = {
    "notjson.json": b"{approve",
    "array.json": b"[1, 2]",
    "missing.json": b'{"decision": "approve"}',
    "types.json": b'{"approval_id": 7, "decision": "approve"}',
    "unknown_field.json": b'{"approval_id": "AID", "decision": "approve", "extra": 1}',
    "dupkeys.json": b'{"approval_id": "AID", "decision": "approve", "decision": "reject"}',
    "nan.json": b'{"approval_id": "AID", "decision": "approve", "reason": NaN}',
    "latin1.json": b'{"approval_id": "AID", "decision": "appr\xe9ve"}',
    "unknown_id.json": b'{"approval_id": "a-nope", "decision": "approve"}',
    "not_allowed.json": b'{"approval_id": "AID", "decision": "mark_done"}',
    "wrong_run.json": b'{"approval_id": "AID", "decision": "approve", "run_id": "r-other"}',
    "wrong_digest.json": b'{"approval_id": "AID", "decision": "approve", "digest": "sha256:00"}',
    "big.json": b'{"approval_id": "AID", "decision": "approve", "reason": "' + b"x" * 70000
    + b'"}',
}


def test_every_bad_file_is_rejected_with_a_reason_and_nothing_runs(engine, home, effects):
    aid = start_paused(engine).waiting["approval_id"]
    inbox = home / "inbox"
    for name, body in BAD_FILES.items():
        (inbox / name).write_bytes(body.replace(b"AID", aid.encode()))
    os.symlink(inbox / "notjson.json", inbox / "link.json")
    os.mkfifo(inbox / "fifo.json")
    (inbox / "dir.json").mkdir()
    (inbox / ".writing.json").write_text("{}")  # dot-file: still being written, ignored
    (inbox / "half.json.tmp").write_text("{}")
    results = Watcher(engine, log=lambda line: None).once()["files"]
    assert not any(f.accepted for f in results)
    rejected = inbox_files(home, "rejected")
    for name in [*BAD_FILES, "link.json", "fifo.json", "dir.json"]:
        assert name in rejected and f"{name}.error.json" in rejected, name
        why = json.loads((inbox / "rejected" / f"{name}.error.json").read_text())["error"]
        assert why
    assert (inbox / ".writing.json").exists() and (inbox / "half.json.tmp").exists()
    assert (inbox / "rejected" / "big.json").stat().st_size > 64 * 1024  # moved unchanged
    assert engine.get("r-42").status == "WAITING_APPROVAL"
    good = drop_decision(home, aid, "approve", by="alice")
    assert [f.name for f in Watcher(engine, log=lambda _line: None).once()["files"] if f.accepted] \
        == [good.name]
    assert engine.get("r-42").status == "DONE"


def test_signed_decisions(home, effects):
    key = b"s3cret"
    with bide.open(home, durability="fast", approval_key=key) as eng:
        aid = start_paused(eng).waiting["approval_id"]
        drop_decision(home, aid, "approve", by="mallory")  # unsigned
        forged = {"approval_id": aid, "decision": "approve", "by": "mallory", "reason": None}
        forged["sig"] = sign(forged, b"wrong")
        (home / "inbox" / "forged.json").write_text(json.dumps(forged))
        results = Watcher(eng, log=lambda _line: None).once()["files"]
        assert sorted(f.reason for f in results) == ["bad signature",
                                                     "this home requires signed decisions and "
                                                     "the file has no 'sig'"]
        drop_decision(home, aid, "approve", by="alice", key=key)
        assert Watcher(eng, log=lambda _line: None).once()["runs"][0].status == "DONE"


def test_submit_then_watch_runs_pending(engine, effects, home):
    engine.register(incident_app.flow)
    rid = engine.submit("incident", input={"query": "q"})
    assert engine.get(rid).status == "PENDING"
    runs = Watcher(engine, log=lambda _line: None).once()["runs"]
    assert [r.run_id for r in runs] == [rid] and runs[0].status == "WAITING_APPROVAL"


def test_orphans_expire_and_crash_loops_stop(home):
    now = [5000.0]
    flow = bide.Flow("o")
    flow.node(lambda s, c: {"x": 1}, name="n", start=True)
    with bide.open(home, durability="fast", clock=lambda: now[0], lease_ttl=10) as eng:
        eng.register(flow)
        from bide.formats import LeaseAcquired
        for rid, attempts in (("old", 0), ("loop", 5), ("fresh", 1)):
            eng.submit("o", run_id=rid)
            eng.store.commit([LeaseAcquired(run_id=rid, owner="elsewhere:1:x", token=1,
                                            expires_at=now[0] + 10, attempts=attempts,
                                            at=now[0])])
        from bide.formats import StatusChanged
        eng.store.commit([StatusChanged(run_id=r, status="RUNNING", at=now[0])
                          for r in ("old", "loop", "fresh")])
        now[0] += 30  # every lease expired
        eng.store.commit([StatusChanged(run_id=r, status="RUNNING", at=now[0])
                          for r in ("fresh", "loop")])
        now[0] += 1
        resumed = eng.recover(max_age=20, max_attempts=5)
        assert [r.run_id for r in resumed] == ["fresh"] and resumed[0].status == "DONE"
        assert "expired" in eng.get("old").reason
        assert eng.get("loop").status == "FAILED" and "5 times" in eng.get("loop").reason


def test_stale_worker_cannot_commit(engine):
    flow = bide.Flow("stale")

    @flow.node(start=True)
    def slow(state, ctx):
        # another worker takes the lease over while this node runs
        from bide.formats import LeaseAcquired
        engine.store.commit([LeaseAcquired(run_id=ctx.run_id, owner="thief:1:x", token=99,
                                           expires_at=time.time() + 60)])
        return {"x": 1}

    engine.register(flow)
    with pytest.raises(bide.StaleLease):
        engine.start("stale", run_id="rs")
    types = [t for _, t, _ in engine.records("rs")]
    assert "pending_write" not in types and types.count("checkpoint") == 1


def watch_proc(home, effects, *extra, env=None):
    e = {**os.environ, "PYTHONPATH": str(APPS), "BIDE_TEST_EFFECTS": str(effects), **(env or {})}
    e.pop("BIDE_FAULT", None)
    return subprocess.Popen([sys.executable, "-m", "bide.cli", "watch", "--home", str(home),
                             "--app", "incident_app:flow", *extra], env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_watcher_process_picks_up_a_dropped_file_then_stops_on_sigterm(tmp_path, effects):
    home = tmp_path / "home"
    with bide.open(home, durability="fast") as eng:
        aid = start_paused(eng).waiting["approval_id"]
    proc = watch_proc(home, effects, "--lease-ttl", "5")
    try:
        drop_decision(home, aid, "approve", by="alice")

        def done():
            with bide.open(home, durability="fast") as eng:
                return eng.get("r-42").status == "DONE"
        assert wait_for(done, 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "file accepted" in out and "run r-42: DONE" in out


def test_killed_watcher_run_is_recovered_by_another_after_lease(tmp_path, effects):
    home = tmp_path / "home"
    with bide.open(home, durability="fast") as eng:
        aid = start_paused(eng).waiting["approval_id"]
        eng.decide(aid, "approve")
    proc = watch_proc(home, effects, "--once", "--lease-ttl", "2", env={"BIDE_TEST_SLOW": "60"})
    assert wait_for(lambda: count_lines(effects).get("node apply_patch r-42", 0) == 2, 30)
    proc.kill()
    proc.communicate(timeout=30)
    second = watch_proc(home, effects, "--once", "--lease-ttl", "2")
    out, _ = second.communicate(timeout=60)
    with bide.open(home, durability="fast") as eng:
        run = eng.get("r-42")
        assert run.status == "DONE", out
        assert run.head.attempts == 1
    assert sum(v for k, v in count_lines(effects).items() if k.startswith("tool git_apply")) == 1


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"bare {name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_a_request_file_is_strict_json_whatever_the_payload_holds(engine, home):
    """NaN, tuple keys and the other kept state types must not break or bend the request file."""
    import datetime
    import decimal
    import uuid

    flow = bide.Flow("odd-payload")

    @flow.node(start=True)
    def ask(state, ctx):
        ctx.approve("wire", payload={"amount": float("nan"), "limit": float("inf"),
                                     ("eur", 2): "tuple key", b"\x01": "bytes key",
                                     "when": datetime.datetime(2026, 11, 30, 12, 0),
                                     "fee": decimal.Decimal("1.50"), "id": uuid.UUID(int=7),
                                     "tags": {"a"}})
        return {"ok": True}

    engine.register(flow)
    run = engine.start("odd-payload", run_id="r-odd")
    assert run.status == "WAITING_APPROVAL"
    request = _strict((home / "requests" / f"{run.waiting['approval_id']}.json").read_text())
    assert request["payload"] == {"amount": "NaN", "limit": "Infinity", '["eur", 2]': "tuple key",
                                  "01": "bytes key", "when": "2026-11-30T12:00:00",
                                  "fee": "1.50", "id": str(uuid.UUID(int=7)), "tags": ["a"]}
