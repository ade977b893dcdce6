"""Issue 11 item 7: Ctrl-C in an app ends the run INTERRUPTED, resumable at once.

A real worker process gets SIGINT while a node runs; a second process resumes
the run while the first (the former lease owner) is still alive: no lease wait.
The effect counter lives outside the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import bide
import pytest
from bide.engine.run.executor import Execution
from conftest import APPS, count_lines, run_app


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate(timeout=5)
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("mode", ["single", "parallel", "async", "astart"])
def test_ctrl_c_mid_run_ends_interrupted_and_resumes_at_once(tmp_path, mode):
    home, effects = tmp_path / "home", tmp_path / "effects"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    argv = [sys.executable, str(APPS / "interrupt_app.py"), str(home), str(effects), mode,
            "start", "r1"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env) as worker:
        try:
            interrupt_then_resume(worker, home, effects, mode)
        finally:
            worker.stdin.close()
            worker.wait(timeout=30)
    assert worker.returncode == 130
    assert sum(count_lines(effects).values()) == 1  # the tool ran once, was replayed after


def interrupt_then_resume(worker: subprocess.Popen, home: Path, effects: Path, mode: str
                          ) -> None:
    wait_for(Path(f"{effects}.ready"), worker)
    worker.send_signal(signal.SIGINT)
    line = worker.stdout.readline()
    assert line, worker.stderr.read()
    after = json.loads(line)
    assert after["status"] == "INTERRUPTED" and after["lease_owner"] is None
    # asyncio.run turns Ctrl-C into a cancellation of the astart task
    assert ("cancelled" if mode == "astart" else "KeyboardInterrupt") in after["reason"]
    assert after["state"] == {"sent": "sent once"}  # the checkpoint before the stop
    assert worker.poll() is None  # the interrupted worker still lives...
    out = run_app("interrupt_app.py", str(home), str(effects), mode, "resume", "r1",
                  timeout=30)
    assert out.returncode == 0, out.stderr  # ...and its lease did not block the resume
    resumed = json.loads(out.stdout)
    assert resumed["status"] == "DONE"
    assert resumed["state"]["slow"] is True and resumed["state"]["sent"] == "sent once"


def test_ctrl_c_just_after_the_last_commit_leaves_the_run_done(engine, monkeypatch):
    """The stop can land after the DONE checkpoint committed: the run stays DONE (the
    lease fence refuses the INTERRUPTED record; a guard, it passed before the fix too)."""
    flow = bide.Flow("short")

    @flow.node(start=True)
    def only(state, ctx):
        return {"x": 1}

    original = Execution._checkpoint

    def then_ctrl_c(self, status, **options):
        original(self, status, **options)
        if status == "DONE":
            raise KeyboardInterrupt

    monkeypatch.setattr(Execution, "_checkpoint", then_ctrl_c)
    engine.register(flow)
    with pytest.raises(KeyboardInterrupt):
        engine.start("short", run_id="r1")
    run = engine.get("r1")
    assert run.status == "DONE" and run.state == {"x": 1} and run.head.lease_owner is None
