"""A crash in the step after a tool step redoes that step only (issue 6's redo target).

A tool step's checkpoint used to be held to ride the run's next commit whatever
came next. After a step that calls no tool (an LLM step) that commit is the next
step's own checkpoint, made after it ran: a crash in the next step lost both, and
the tool's outcome with them (the crash bench saw a quarter of its kills redo two
supersteps). The checkpoint is now held only before a node seen calling a tool
(whose first commit, its prepare, carries it), so here it is durable before
``think`` starts, however long the flusher would wait (HOLD_BOUND).
"""

from __future__ import annotations

import json

import pytest
from conftest import count_lines, run_app


@pytest.mark.parametrize("outcomes", ["at_return", "with_next_commit"])
def test_a_kill_in_the_step_after_a_tool_step_finds_the_tool_step_durable(tmp_path, outcomes):
    home, effects = str(tmp_path / "home"), tmp_path / "effects"
    env = {"HOLD_BOUND": "60", "BIDE_TEST_TOOL_OUTCOMES": outcomes}
    out = run_app("tool_then_think_app.py", home, str(effects), "start", "r1", env=env)
    assert out.returncode in (-9, 137), out.stdout + out.stderr
    out = run_app("tool_then_think_app.py", home, str(effects), "resume", "r1", env=env)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    # the tool's outcome was durable: no reconciliation, the recorded result replayed
    assert run["status"] == "DONE", run
    assert run["state"] == {"sent": "sent 1", "thought": True}
    seen = count_lines(effects)
    assert seen.pop("think") == 2  # the one step that was running, redone once
    assert list(seen.values()) == [1]  # one effect, never repeated
