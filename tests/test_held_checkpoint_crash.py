"""Kill a worker while a tool step's checkpoint waits to ride the next step's prepare.

A checkpoint that carries held tool outcomes is held with them and commits in the
run's next commit (engine/run/held.py), so a loop of tool steps costs one durable commit
a step. A crash before that commit loses the step's checkpoint and its outcome
together: the step runs again and finds its call prepared without an outcome,
exactly the *outcome unknown* a crash before a separate completion commit left. The
world's counter (a file outside the store) says every effect happened once.
"""

from __future__ import annotations

import json

import pytest
from conftest import count_lines, run_app

SENT = [f"sent {i}" for i in range(4)]


def loop_app(tmp_path, kind, action, fault=None) -> dict:
    out = run_app("tool_loop_app.py", str(tmp_path / "home"), str(tmp_path / "effects"), kind,
                  action, "r1", fault=fault, env={"BIDE_TEST_TOOL_OUTCOMES": "with_next_commit"})
    if fault is not None:
        assert out.returncode in (-9, 137), out.stdout + out.stderr
        return {}
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def effects(tmp_path) -> dict[str, int]:
    return count_lines(tmp_path / "effects")


# (point, what the crash leaves)
CRASHES = [
    ("checkpoint_held:2", "step 1's checkpoint and outcome held, not durable"),
    ("outcome_rides:2", "step 2's prepare, carrying them, about to commit"),
    ("after_intent_completed:2", "they rode in step 2's prepare; step 2 not called yet"),
]


@pytest.mark.parametrize(("point", "what"), CRASHES, ids=[p for p, _ in CRASHES])
@pytest.mark.parametrize("mode", ["kill", "exit"])
def test_a_held_checkpoint_lost_in_a_crash_costs_no_effect(tmp_path, point, what, mode):
    loop_app(tmp_path, "reconciled", "start", fault=f"{point}:{mode}")
    run = loop_app(tmp_path, "reconciled", "resume")
    assert run["status"] == "DONE", run
    assert run["state"] == {"i": 4, "sent": SENT}
    seen = effects(tmp_path)
    assert sorted(line.split()[0] for line in seen) == ["0", "1", "2", "3"], what
    assert set(seen.values()) == {1}, what


def test_a_plain_tool_whose_held_checkpoint_was_lost_waits_for_a_person(tmp_path):
    loop_app(tmp_path, "plain", "start", fault="checkpoint_held:2:kill")
    run = loop_app(tmp_path, "plain", "resume")
    assert run["status"] == "NEEDS_RECONCILIATION"
    assert run["waiting"]["type"] == "reconciliation"
    assert run["intents"] == ["completed", "unknown"]  # step 0 durable, step 1 unknown
    assert sorted(line.split()[0] for line in effects(tmp_path)) == ["0", "1"]


def test_without_a_crash_every_call_happens_once(tmp_path):
    run = loop_app(tmp_path, "reconciled", "start")
    assert run["status"] == "DONE" and run["state"]["sent"] == SENT
    assert run["intents"] == ["completed"] * 4
    assert len(effects(tmp_path)) == 4
