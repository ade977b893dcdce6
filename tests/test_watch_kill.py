"""SIGKILL a `bide watch --workers 4` while several workers run: every run resumes, and
no tool effect happens twice (counted in a file outside the store)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import bide
import pytest
from bide.engine.upkeep import maintenance
from conftest import APPS, count_lines
from polling import wait_for

sys.path.insert(0, str(APPS))
import incident_app  # noqa: E402

RUNS = 8
DEADLINE = 120.0


def _watch(home, env, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bide.cli", "watch", "--home", str(home),
                             "--app", "incident_app:flow", "--workers", "4", *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("after", [0, pytest.param(1, marks=pytest.mark.slow),
                                   pytest.param(3, marks=pytest.mark.slow)])
def test_a_killed_concurrent_watcher_leaves_every_run_resumable_and_no_effect_twice(
        tmp_path, after):
    home, effects = tmp_path / "home", tmp_path / "effects.log"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BIDE_")},
           "PYTHONPATH": str(APPS), "BIDE_TEST_EFFECTS": str(effects), "BIDE_TEST_SLOW": "0.3"}
    os.environ["BIDE_TEST_EFFECTS"] = str(effects)  # the in-process pauses count too
    try:
        with bide.open(home) as eng:
            eng.register(incident_app.flow)
            for i in range(RUNS):
                eng.start("incident", input={"query": f"q{i}"}, run_id=f"r{i}")
            for p in eng.pending():
                eng.decide(p["approval_id"], "approve", by="kill-test")
    finally:
        del os.environ["BIDE_TEST_EFFECTS"]
    first = _watch(home, env)
    try:
        # several workers are inside apply_patch (it sleeps 0.3 s there) before the kill
        applying = lambda: sum(1 for k, n in count_lines(effects).items()  # noqa: E731
                               if k.startswith("node apply_patch") for _ in range(n))
        assert wait_for(lambda: applying() >= RUNS + 2 + after, DEADLINE), first.pid
        first.send_signal(signal.SIGKILL)
        first.wait(DEADLINE)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(DEADLINE)
        first.stdout.close()
    killed_at = count_lines(effects)
    assert sum(n for k, n in killed_at.items() if k.startswith("tool git_apply")) < RUNS, \
        "the kill came after every run had finished: it tested nothing"
    _finish(home, env)
    lines = count_lines(effects)
    with bide.open(home, create=False) as eng:
        assert {r.run_id: r.status for r in eng.runs()} == {f"r{i}": bide.Status.DONE
                                                             for i in range(RUNS)}
        assert maintenance.doctor(eng.store).ok
        for i in range(RUNS):
            (call,) = [c for c in eng.intents(f"r{i}") if c["tool"] == "git_apply"]
            # the world saw the patch applied once per run: never twice, never lost
            assert lines[f"tool git_apply {call['idempotency_key']}"] == 1, (i, lines)
    applies = [k for k in lines if k.startswith("tool git_apply")]
    assert len(applies) == RUNS and all(lines[k] == 1 for k in applies)


def _finish(home, env) -> None:
    """A new watcher takes the orphans; a call whose outcome the kill made unknown is
    reconciled by a person who checked the world (it happened: mark_done)."""
    for _ in range(3):
        done = _watch(home, env, "--once")
        out = done.communicate(timeout=DEADLINE)[0]
        assert done.returncode == 0, out
        with bide.open(home) as eng:
            asks = [p for p in eng.pending() if p["kind"] != "approve"]
            for p in asks:
                eng.decide(p["approval_id"], "mark_done", by="kill-test",
                           result={"sha": "5e1f"})
            if all(r.status == bide.Status.DONE for r in eng.runs()):
                return
        time.sleep(0.1)
