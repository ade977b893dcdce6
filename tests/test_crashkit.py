"""The crash kit: effects counted outside the store, workers with a clean environment, forks."""

from __future__ import annotations

import os
import signal
import time

from bide.bench.kit.crashkit import count_effects, in_fork, record_effect, run_worker, worker_env


def test_effects_are_whole_lines_counted_by_line(tmp_path):
    path = tmp_path / "effects"
    assert count_effects(path) == {}
    for line in ("tool:a k1", "node:b@0", "tool:a k1"):
        record_effect(path, line)
    assert count_effects(path) == {"tool:a k1": 2, "node:b@0": 1}


def test_a_worker_gets_no_bide_variable_from_its_parent_but_the_armed_fault(monkeypatch):
    monkeypatch.setenv("BIDE_FAULT", "after_commit:1:kill")
    monkeypatch.setenv("BIDE_OTHER", "x")
    env = worker_env("before_commit:2:exit", {"EXTRA": "1"})
    assert env["BIDE_FAULT"] == "before_commit:2:exit" and "BIDE_OTHER" not in env
    assert env["EXTRA"] == "1"
    assert "BIDE_FAULT" not in worker_env()
    out = run_worker("-c", "import os; print(os.environ.get('BIDE_OTHER'))")
    assert out.stdout.strip() == "None"


def test_a_forked_phase_reports_its_value_or_its_error(tmp_path):
    assert in_fork(tmp_path, "ok", lambda: {"n": 1}) == ("ok", {"n": 1})
    kind, tb = in_fork(tmp_path, "boom", lambda: 1 / 0)
    assert kind == "error" and "ZeroDivisionError" in tb


def test_a_forked_phase_killed_mid_way_leaves_only_whole_effects(tmp_path):
    path = tmp_path / "effects"

    def forever() -> None:
        while True:
            record_effect(path, "tick")

    kind, code = in_fork(tmp_path, "loop", forever, kill_after=0.2)
    assert (kind, code) == ("killed", -signal.SIGKILL)
    assert set(count_effects(path)) == {"tick"}


def test_a_phase_dying_by_itself_counts_as_killed(tmp_path):
    kind, _ = in_fork(tmp_path, "exit", lambda: os._exit(137))
    assert kind == "killed"
    started = time.monotonic()
    kind, why = in_fork(tmp_path, "hang", lambda: time.sleep(30), timeout=0.2)
    assert kind == "error" and "hung" in why and time.monotonic() - started < 10
