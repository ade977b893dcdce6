"""A worker killed between a pause's commit and its request file: the run waits with no
file in ``requests/`` to show it. A watcher that starts writes the file again (real
SIGKILL at the fault point, a new process for the watcher)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import bide
from bide import Status
from conftest import APPS, count_lines, run_app


def proof_app(home, effects, action, *args, fault=None):
    out = run_app("proof_app.py", str(home), str(effects), action, "r1", *args, fault=fault)
    if fault:
        assert out.returncode in (-9, 137), out.stderr
        return None
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def watch_once(home, effects) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env.update(PYTHONPATH=str(APPS), PROOF_EFFECTS=str(effects))
    return subprocess.run([sys.executable, "-m", "bide.cli", "watch", "--home", str(home),
                           "--app", "proof_app:flow", "--once"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_watcher_writes_again_the_request_file_a_killed_worker_left_unwritten(tmp_path):
    home, effects = tmp_path / "home", tmp_path / "effects"
    proof_app(home, effects, "start", "ask", fault="after_pause_committed:1:kill")
    with bide.open(home) as eng:
        [asked] = eng.pending()
    request = home / "requests" / f"{asked['approval_id']}.json"
    assert not request.exists()  # the kill landed between the commit and the file

    out = watch_once(home, effects)
    assert out.returncode == 0, out.stderr
    assert request.exists(), out.stdout + out.stderr
    assert "written again" in out.stdout + out.stderr
    body = json.loads(request.read_text())
    assert body["approval_id"] == asked["approval_id"] and body["run_id"] == "r1"
    assert [f["decision"] for f in body["decision_files"]] == ["approve", "reject"]

    again = watch_once(home, effects)  # a file that is there is left as it is
    assert "written again" not in again.stdout + again.stderr

    done = proof_app(home, effects, "decide", "approve")
    assert done["status"] == Status.DONE
    assert [n for k, n in count_lines(effects).items() if k.startswith("tool charge")] == [1]


def test_decided_and_expired_requests_are_not_written_again(tmp_path):
    from bide.engine.run.approvals import Doors, write_missing_requests
    from bide.engine.storage.index import ApprovalState

    def state(approval_id, **kw):
        return ApprovalState(run_id="r", approval_id=approval_id, kind="approval", node="n",
                             task="t", action="a", payload=None, digest="d",
                             state_version=1, allowed=["approve", "reject"], **kw)

    doors = Doors.of(tmp_path)
    written = write_missing_requests(doors, [
        state("a-open", requested_at=1.0, expires_at=None),
        state("a-old", requested_at=1.0, expires_at=5.0),
        state("a-done", requested_at=1.0, decision="approve"),
    ], now=10.0)
    assert [p.name for p in written] == ["a-open.json"]
    assert write_missing_requests(Doors.of(tmp_path, url="postgresql://x/y", local=False),
                                  [state("a-pg", requested_at=1.0, expires_at=None)],
                                  now=10.0) == []  # this engine writes no request files
