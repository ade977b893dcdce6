"""Kill a worker mid-map (SIGKILL at many boundaries), resume in a new process.

The world decides: each item's charge happened exactly once (counted in a file
outside the store), the reduced state holds every item of ONE plan in the order
sent, and a plan under way is never replaced by a new one. The same on
PostgreSQL: tests/test_pg_crash.py.
"""

from __future__ import annotations

import json

import pytest
from conftest import count_lines, run_app

ITEMS = 12
# (fault point, occurrence): before the plan is durable, mid-map, after the map folded
POINTS = [
    ("after_run_created", 1),
    ("map_planned", 1),
    ("map_task_started", 1),
    ("map_task_started", 7),
    ("after_intent_prepared", 5),
    ("after_tool_effect", 4),
    ("after_intent_completed", 1),
    ("after_pending_write", 6),
    ("after_checkpoint", 2),
]
POLICIES = {
    "default": {},
    "exit": {"checkpoint_every": "exit"},
    "no-pending": {"pending_writes": False, "snapshot": "full"},
}


def app(tmp_path, action, policy, fault=None, url=None, env=None):
    args = [str(tmp_path / "home"), str(tmp_path / "effects"), action, "r-map",
            json.dumps(policy)] + ([url] if url else [])
    return run_app("map_app.py", *args, fault=fault, env=env)


def check_world(tmp_path, run, point):
    assert run["status"] == "DONE", run
    results = run["state"]["results"]
    batch = results[0].split()[1].split("-")[0]
    planned = [f"charged {batch}-{i}" for i in range(ITEMS)]
    assert results == planned and run["state"]["total"] == ITEMS  # complete, in order sent
    if point != "after_run_created":
        assert batch == "p0"  # the plan was durable before any item ran: never re-planned
    effects = count_lines(tmp_path / "effects")
    per_item: dict[str, int] = {}
    for line, n in effects.items():
        item = line.split()[1]
        per_item[item] = per_item.get(item, 0) + n
    assert per_item == {f"{batch}-{i}": 1 for i in range(ITEMS)}, "exactly once, each item"


def crash_and_resume(tmp_path, point, occurrence, policy, url=None):
    out = app(tmp_path, "start", policy, fault=f"{point}:{occurrence}:kill", url=url)
    assert out.returncode in (-9, 137), (out.returncode, out.stdout, out.stderr)
    out = app(tmp_path, "resume", policy, url=url)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


CASES = [(point, n, policy) for point, n in POINTS for policy in sorted(POLICIES)
         if not (point == "after_pending_write" and policy == "no-pending")]  # never reached


@pytest.mark.parametrize(("point", "occurrence", "policy"), CASES)
def test_killed_mid_map_each_item_happens_once_and_the_state_is_complete(tmp_path, point,
                                                                         occurrence, policy):
    run = crash_and_resume(tmp_path, point, occurrence, POLICIES[policy])
    check_world(tmp_path, run, point)


def test_a_map_without_a_crash_charges_each_item_once(tmp_path):
    out = app(tmp_path, "start", {})
    assert out.returncode == 0, out.stderr
    check_world(tmp_path, json.loads(out.stdout), "none")


def test_negative_control_without_intent_replay_an_item_is_charged_twice(tmp_path):
    """The same crash with intent replay switched off: the world sees a repeat.

    Killed at the 4th item's effect, whose outcome is not recorded yet (the kill at
    ``after_intent_completed:1`` was not a control: when the map's items finish
    within the held-outcome bound, that point is first reached as their outcomes
    ride the map's own checkpoint, and nothing is left to repeat)."""
    off = {"BIDE_TEST_SWITCHES": "no_intent_replay"}
    policy = POLICIES["no-pending"]
    out = app(tmp_path, "start", policy, fault="after_tool_effect:4:kill", env=off)
    assert out.returncode in (-9, 137), out.stderr
    out = app(tmp_path, "resume", policy, env=off)
    assert out.returncode == 0, out.stderr
    with pytest.raises(AssertionError, match="exactly once"):
        check_world(tmp_path, json.loads(out.stdout), "after_tool_effect")
