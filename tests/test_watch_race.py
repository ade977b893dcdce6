"""Two watcher processes over one home: every run resumed exactly once."""

from __future__ import annotations

import os
import subprocess
import sys

import bide
from conftest import APPS, count_lines

sys.path.insert(0, str(APPS))
import incident_app  # noqa: E402

RUNS = 12


def test_two_watchers_race_over_many_runs(tmp_path, monkeypatch):
    home, effects = tmp_path / "home", tmp_path / "effects.log"
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(effects))
    with bide.open(home, durability="fast") as eng:
        eng.register(incident_app.flow)
        for i in range(RUNS):
            eng.start("incident", input={"query": f"q{i}"}, run_id=f"r{i}")
        for p in eng.pending():
            eng.decide(p["approval_id"], "approve", by="race")
    env = {**os.environ, "PYTHONPATH": str(APPS), "BIDE_TEST_EFFECTS": str(effects)}
    cmd = [sys.executable, "-m", "bide.cli", "watch", "--home", str(home), "--app",
           "incident_app:flow", "--once", "--durability", "fast"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    with bide.open(home, durability="fast") as eng:
        assert {r.status.value for r in eng.runs()} == {"DONE"}
    lines = count_lines(effects)
    for i in range(RUNS):
        assert lines[f"node apply_patch r{i}"] == 2  # asked once, resumed exactly once
    applies = [k for k in lines if k.startswith("tool git_apply")]
    assert len(applies) == RUNS and all(lines[k] == 1 for k in applies)
    done_lines = sum(out.count(": DONE") for out in outs)
    assert done_lines == RUNS  # each run finished by exactly one of the two watchers
