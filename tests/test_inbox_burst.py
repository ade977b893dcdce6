"""A burst of decision files is recorded in ONE commit, each file checked as if alone
(issue 13, item 3): a bad file is rejected with its reason and never takes the others down."""

from __future__ import annotations

import json
from pathlib import Path

import bide
import pytest
from bide.engine.base import faults
from bide.engine.base.errors import StoreFull
from bide.engine.human.inbox import Inbox, drop_decision
from bide.engine.storage.store import WriteEvent


def _ask() -> bide.Flow:
    flow = bide.Flow("ask")

    @flow.node(start=True)
    def asking(state, ctx):
        return {"ok": ctx.approve("go")}

    return flow


@pytest.fixture
def eng(tmp_path: Path):
    with bide.open(tmp_path / "home", durability="fast") as e:
        e.register(_ask())
        yield e


def _paused(eng: bide.Engine, n: int) -> dict[str, str]:
    for i in range(n):
        eng.start("ask", run_id=f"r{i}")
    return {p["run_id"]: p["approval_id"] for p in eng.pending()}


def _commits(eng: bide.Engine) -> list[WriteEvent]:
    seen: list[WriteEvent] = []
    eng.store.on_commit(seen.append)
    return seen


def test_a_burst_of_files_is_one_commit(eng):
    asks = _paused(eng, 20)
    for aid in asks.values():
        drop_decision(eng.home, aid, "approve", by="t")
    commits = _commits(eng)
    results = Inbox(eng).process()
    assert len(results) == 20 and all(f.accepted and not f.duplicate for f in results)
    assert {f.run_id for f in results} == set(asks)
    assert len(commits) == 1 and len(commits[0].seqs) == 20
    assert all(a["decision"] == "approve" for a in _approvals(eng))
    assert len(list((eng.home / "inbox" / "processed").iterdir())) == 20


def _approvals(eng: bide.Engine) -> list[dict]:
    with eng.store.reader() as r:
        return [{"id": a.approval_id, "decision": a.decision, "by": a.by, "file": a.file}
                for a in r.approvals()]


def test_bad_files_in_a_burst_are_rejected_alone_with_their_reason(eng):
    asks = _paused(eng, 4)
    inbox = eng.home / "inbox"
    good = [drop_decision(eng.home, asks[f"r{i}"], "approve", by="t").name for i in (0, 1)]
    (inbox / "garbage.json").write_bytes(b"{nope")
    (inbox / "unknown.json").write_text(json.dumps({"approval_id": "a-nope",
                                                    "decision": "approve"}))
    (inbox / "digest.json").write_text(json.dumps({"approval_id": asks["r2"],
                                                   "decision": "approve",
                                                   "digest": "sha256:00"}))
    results = {f.name: f for f in Inbox(eng).process()}
    assert sorted(n for n, f in results.items() if f.accepted) == sorted(good)
    reasons = {n: f.reason for n, f in results.items() if not f.accepted}
    assert reasons.keys() == {"garbage.json", "unknown.json", "digest.json"}
    assert "not valid JSON" in reasons["garbage.json"]
    assert "a-nope" in reasons["unknown.json"]
    assert "digest does not match" in reasons["digest.json"]
    for name in reasons:
        why = json.loads((inbox / "rejected" / f"{name}.error.json").read_text())["error"]
        assert why == reasons[name]
    decided = {a["id"]: a["decision"] for a in _approvals(eng)}
    assert decided == {asks["r0"]: "approve", asks["r1"]: "approve", asks["r2"]: None,
                       asks["r3"]: None}


def test_two_files_for_one_request_in_a_burst_behave_as_one_after_the_other(eng):
    asks = _paused(eng, 2)
    inbox = eng.home / "inbox"
    for name, aid, decision in [("a1.json", asks["r0"], "approve"),
                                ("a2.json", asks["r0"], "approve"),  # same again: a no-op
                                ("a3.json", asks["r0"], "reject"),  # conflicts: refused
                                ("b1.json", asks["r1"], "reject")]:
        (inbox / name).write_text(json.dumps({"approval_id": aid, "decision": decision,
                                              "by": name}))
    results = {f.name: f for f in Inbox(eng).process()}
    assert results["a1.json"].accepted and not results["a1.json"].duplicate
    assert results["a2.json"].accepted and results["a2.json"].duplicate
    assert not results["a3.json"].accepted
    assert results["a3.json"].reason.endswith("already decided 'approve' by a1.json")
    assert results["b1.json"].accepted
    by_id = {a["id"]: a for a in _approvals(eng)}
    assert (by_id[asks["r0"]]["decision"], by_id[asks["r0"]]["file"]) == ("approve", "a1.json")
    assert by_id[asks["r1"]]["decision"] == "reject"
    with eng.store.reader() as r:  # one decision record per request, not one per file
        assert sum(1 for s, t in r.run_entries("r0") if t == "approval_decided") == 1


def test_a_failing_burst_commit_gives_each_file_its_own_outcome(eng, monkeypatch):
    asks = _paused(eng, 3)
    for aid in asks.values():
        drop_decision(eng.home, aid, "approve", by="t")
    real = eng.store.commit
    calls: list[int] = []

    def commit(records, **kw):  # the disk is full for the big burst commit only
        calls.append(1)
        if len(calls) == 1:
            raise StoreFull(eng.home, free=0)
        return real(records, **kw)

    monkeypatch.setattr(eng.store, "commit", commit)
    results = Inbox(eng).process()
    assert len(calls) == 4 and all(f.accepted for f in results) and len(results) == 3


def test_a_crash_after_the_burst_commit_leaves_the_files_to_finish_as_duplicates(eng):
    asks = _paused(eng, 3)
    for aid in asks.values():
        drop_decision(eng.home, aid, "approve", by="t")

    faults.configure("after_decision_recorded:1:raise")
    try:
        with pytest.raises(faults.InjectedFault):
            Inbox(eng).process()
    finally:
        faults.configure(None)
    assert len(list((eng.home / "inbox" / ".work").iterdir())) == 3  # claimed, not moved
    results = Inbox(eng).process()
    assert all(f.accepted and f.duplicate for f in results) and len(results) == 3
    assert all(a["decision"] == "approve" for a in _approvals(eng))


def test_runs_are_handed_on_right_after_the_commit_before_the_files_move(eng):
    asks = _paused(eng, 3)
    for aid in asks.values():
        drop_decision(eng.home, aid, "approve", by="t")
    (eng.home / "inbox" / "bad.json").write_bytes(b"{nope")
    told: list[tuple[list[str], int]] = []
    inbox = Inbox(eng, on_recorded=lambda ids: told.append(
        (ids, len(list((eng.home / "inbox" / "processed").iterdir())))))
    inbox.process()
    assert told == [(["r0", "r1", "r2"], 0)]  # once, every decided run, nothing moved yet
