"""Each rule about where a run stands, once (``engine/run/run_view.py``), over a hand-built log."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from bide import UnknownVersion
from bide.engine.run.run_view import (
    RunView,
    ended,
    expired,
    finished,
    owner_alive,
    pid_alive,
    settled,
    unfolded_from,
)
from bide.engine.storage.index import ApprovalState, RunHead
from bide.formats import Checkpoint, PendingWrite, Record

RUN = "r"


class LogReader:
    """The few reader calls the run view makes, over a dict ``{seq: record}``."""

    def __init__(self, records: dict[int, Record], *, renewal: tuple[int, float] | None = None,
                 approvals: dict[str, ApprovalState] | None = None, now: float = 0.0) -> None:
        self.records, self.renewal, self.approvals = records, renewal, approvals or {}
        self._now = now

    def now(self) -> float:
        return self._now

    def record(self, seq: int) -> Record:
        return self.records[seq]

    def run_entries(self, run_id: str, start: int = 0) -> Iterator[tuple[int, str]]:
        for seq in sorted(self.records):
            if seq >= start and self.records[seq].run_id == run_id:  # type: ignore[attr-defined]
                yield seq, self.records[seq].TYPE

    def lease_expiry(self, run_id: str) -> tuple[int, float] | None:
        return self.renewal

    def approval(self, approval_id: str) -> ApprovalState | None:
        return self.approvals.get(approval_id)


def cp(version: int, superstep: int, scan_from: int = -1, run_id: str = RUN) -> Checkpoint:
    return Checkpoint(run_id=run_id, version=version, superstep=superstep, status="RUNNING",
                      full=True, state={}, scan_from=scan_from)


def pw(task: str, superstep: int, run_id: str = RUN) -> PendingWrite:
    return PendingWrite(run_id=run_id, task=task, superstep=superstep, node=task.split(":")[1])


def head(checkpoint: int = 0, **fields: Any) -> RunHead:
    return RunHead(run_id=RUN, flow="f", status="RUNNING", checkpoint=checkpoint, **fields)


def request(decision: str | None = None, expires_at: float | None = None) -> ApprovalState:
    return ApprovalState(approval_id="a1", run_id=RUN, kind="approval", node="n", task="t",
                         action="act", digest="d", decision=decision, expires_at=expires_at)


# -- the status ----------------------------------------------------------------------------
@pytest.mark.parametrize(("status", "is_finished", "is_ended"), [
    ("PENDING", False, False), ("RUNNING", False, False), ("WAITING_APPROVAL", False, False),
    ("NEEDS_RECONCILIATION", False, False), ("INTERRUPTED", False, False),
    ("FAILED", True, False),  # finished, yet a resume may retry it
    ("DONE", True, True), ("CANCELLED", True, True),
])
def test_finished_and_ended(status: str, is_finished: bool, is_ended: bool):
    h = RunHead(run_id=RUN, flow="f", status=status)
    assert finished(h) is is_finished and ended(h) is is_ended


# -- the pending-write scan ----------------------------------------------------------
def test_unfolded_from_starts_after_a_folding_checkpoint_or_at_the_kept_start():
    assert unfolded_from(7, cp(1, 1)) == 8
    assert unfolded_from(7, cp(1, 1, scan_from=3)) == 3


def test_unfolded_keeps_the_writes_of_the_checkpoints_superstep_and_later_by_task():
    log = {0: pw("0:a:0", 0), 1: cp(1, 1), 2: pw("1:b:0", 1), 3: pw("0:old:0", 0),
           4: pw("2:c:0", 2), 5: pw("1:b:0", 1), 6: pw("1:x:0", 1, run_id="other")}
    got_cp, start, found = RunView(LogReader(log), head(checkpoint=1)).unfolded()
    assert got_cp == log[1] and start == 2
    assert {task: seq for task, (seq, _) in found.items()} == {"1:b:0": 5, "2:c:0": 4}


def test_unfolded_scans_from_scan_from_when_the_checkpoint_did_not_fold():
    log = {0: cp(0, 0), 1: pw("1:a:0", 1), 2: cp(1, 1, scan_from=1), 3: pw("1:b:0", 1)}
    _, start, found = RunView(LogReader(log), head(checkpoint=2)).unfolded()
    assert start == 1 and sorted(found) == ["1:a:0", "1:b:0"]


# -- a checkpoint by version ---------------------------------------------------------
def test_checkpoint_seq_finds_the_last_checkpoint_of_a_version_else_unknown_version():
    log = {0: cp(0, 0), 1: cp(1, 1), 2: cp(1, 1), 3: cp(2, 2, run_id="other")}
    view = RunView(LogReader(log), head(checkpoint=2))
    assert view.checkpoint_seq(0) == 0 and view.checkpoint_seq(1) == 2
    with pytest.raises(UnknownVersion, match="stored versions: 0, 1") as caught:
        view.checkpoint_seq(2)
    assert caught.value.run_id == RUN and caught.value.version == 2


# -- the lease ---------------------------------------------------------------------------
GONE = f"{socket.gethostname()}:{2**22 + 12345}:x"  # above pid_max by default: no such pid
OTHER_HOST = "elsewhere.invalid:1:x"


def test_lease_expires_takes_a_renewal_of_the_current_token_only():
    h = head(lease_owner=OTHER_HOST, lease_token=3, lease_expires=10.0)
    assert RunView(LogReader({}), h).lease_expires() == 10.0
    assert RunView(LogReader({}, renewal=(3, 25.0)), h).lease_expires() == 25.0
    assert RunView(LogReader({}, renewal=(2, 25.0)), h).lease_expires() == 10.0
    assert RunView(LogReader({}, renewal=(3, 5.0)), h).lease_expires() == 10.0


@pytest.mark.parametrize(("owner", "expires", "live"), [
    (None, 100.0, False),        # nobody holds it
    (OTHER_HOST, 100.0, True),   # another host's, not expired: honoured
    (OTHER_HOST, 40.0, False),   # expired
    (GONE, 100.0, False),        # a process of this host that has gone
])
def test_lease_live(owner: str | None, expires: float, live: bool):
    h = head(lease_owner=owner, lease_token=1, lease_expires=expires)
    assert RunView(LogReader({}, now=50.0), h).lease_live() is live  # by the store's clock


# -- the approval a run waits for ----------------------------------------------------------
def test_awaited_approval_is_the_request_named_by_waiting():
    req = request()
    reader = LogReader({}, approvals={"a1": req})
    assert RunView(reader, head(waiting={"type": "approval", "approval_id": "a1"})
                   ).awaited_approval() == req
    assert RunView(reader, head(waiting={"type": "approval", "approval_id": "zz"})
                   ).awaited_approval() is None
    assert RunView(reader, head()).awaited_approval() is None


@pytest.mark.parametrize(("decision", "expires_at", "is_expired", "is_settled"), [
    (None, None, False, False),
    (None, 60.0, False, False),
    (None, 40.0, True, True),     # expired: resumes as a rejection
    ("approve", None, False, True),
    ("reject", 40.0, True, True),
])
def test_settled_and_expired(decision: str | None, expires_at: float | None,
                             is_expired: bool, is_settled: bool):
    req = request(decision, expires_at)
    assert expired(req, 50.0) is is_expired
    assert settled(req, 50.0) is is_settled


# -- processes -----------------------------------------------------------------------------
def test_pid_alive_tells_a_live_process_from_a_reaped_one():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    assert pid_alive(os.getpid()) is True
    assert pid_alive(child.pid) is False
    assert pid_alive(1) is True  # init: exists, perhaps another user's


def test_owner_alive_judges_only_processes_of_this_host():
    me = f"{socket.gethostname()}:{os.getpid()}:x"
    assert owner_alive(me) is True
    assert owner_alive(GONE) is False
    assert owner_alive(OTHER_HOST) is True
    assert owner_alive(f"{socket.gethostname()}:not-a-pid") is True
