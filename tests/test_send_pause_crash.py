"""Kill a worker (SIGKILL) while it resumes a map between two of its items' pauses.

Each item asks for approval, then charges. One step approves the decision the run
waits for and resumes it: that item charges, its output is committed, and the run
pauses again on the next item, with a checkpoint that refers to the planning
checkpoint's Sends. Killed at each boundary of that step, then stepped on in new
processes to DONE: each item charged exactly once (a file outside the store), every
item's result in the state in the order sent. On LMDB and on PostgreSQL.
"""

from __future__ import annotations

import json

import pytest
from conftest import count_lines, run_app
from extras import need

ITEMS = 3
# boundaries of a resume between two pauses (the map_pause_app run, item 0 approved);
# the resume runs item 0 alone (the others would only pause again: engine/run/waits.py),
# so its one map task start is the first
POINTS = ["after_lease_acquired:1", "map_task_started:1", "after_intent_prepared:1",
          "after_tool_effect:1", "after_intent_completed:1", "after_pending_write:1",
          "after_checkpoint:1", "after_pause_committed:1"]
QUICK = {"after_tool_effect:1", "after_checkpoint:1"}


def step(tmp_path, action, url=None, fault=None, env=None):
    args = [str(tmp_path / "home"), str(tmp_path / "effects"), action, "r-pay"]
    return run_app("map_pause_app.py", *args, *([url] if url else []), fault=fault, env=env)


def killed_between_pauses_then_finished(tmp_path, fault, url=None, env=None):
    out = step(tmp_path, "start", url, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["waiting"]["item"] == "pay[0]"
    out = step(tmp_path, "next", url, fault=f"{fault}:kill", env=env)
    assert out.returncode in (-9, 137), (out.returncode, out.stdout, out.stderr)
    for _ in range(ITEMS + 2):  # each step approves one item; the kill may have cost one
        out = step(tmp_path, "next", url, env=env)
        assert out.returncode == 0, out.stderr
        run = json.loads(out.stdout)
        if run["status"] == "DONE":
            break
    assert run["status"] == "DONE", run
    assert run["state"]["results"] == [f"charged i{i}" for i in range(ITEMS)]
    per_item = {line.split()[1]: n for line, n in count_lines(tmp_path / "effects").items()}
    assert per_item == {f"i{i}": 1 for i in range(ITEMS)}, "exactly once, each item"


def points() -> list:
    return [pytest.param(p, marks=() if p in QUICK else pytest.mark.slow) for p in POINTS]


@pytest.mark.parametrize("fault", points())
def test_killed_between_two_pauses_each_item_is_charged_once(tmp_path, fault):
    killed_between_pauses_then_finished(tmp_path, fault)


@pytest.mark.parametrize("fault", points())
def test_killed_between_two_pauses_each_item_is_charged_once_on_postgres(tmp_path, pg_url,
                                                                         fault):
    need("psycopg")
    killed_between_pauses_then_finished(tmp_path, fault, pg_url)


def test_negative_control_without_intent_replay_an_item_is_charged_twice(tmp_path):
    """The same kill with intent replay switched off: the world sees the repeat.

    (Killed after the effect, before its outcome is durable: what the intent log
    reconciles. A later point may find the item's output already committed with
    its outcome, and then nothing runs again, replay or not.)"""
    with pytest.raises(AssertionError, match="exactly once"):
        killed_between_pauses_then_finished(tmp_path, "after_tool_effect:1",
                                            env={"BIDE_TEST_SWITCHES": "no_intent_replay"})
