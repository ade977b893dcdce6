"""Kill a worker at each boundary of a held tool outcome; the world's counter decides.

An outcome is held in memory until it rides in the task's next commit, or is
committed alone when the node keeps working (``SLEEP_AFTER_TOOL``). Until it is
durable, a crash leaves it unknown, exactly as a crash between a call and its
own completion commit did: the tool's effect happens once, or the run stops in
NEEDS_RECONCILIATION (a plain tool), or a reconciler / the idempotency key
settles it. Once durable, the node replays it.
"""

from __future__ import annotations

import json

import pytest
from conftest import count_lines, run_app

SLOW = {"SLEEP_AFTER_TOOL": "0.3"}  # the node keeps working: its outcome is flushed alone
# (point, env): the outcome is unknown at each of these
# A busy machine can hold a fast node past the bound, so its outcome is flushed alone:
# "outcome_rides" is armed with "before_outcome_flush" (both: not durable yet).
RIDES = "outcome_rides"
# A checkpoint carrying held outcomes is held only before a node seen calling a tool
# (tests/test_held_checkpoint_crash.py); here the next node calls none: never held.
HELD_CP = "checkpoint_held"
UNKNOWN = [("outcome_held", {}), (RIDES, {}), ("outcome_held", SLOW),
           ("before_outcome_flush", SLOW)]
DURABLE = [("after_intent_completed", {}), ("after_intent_completed", SLOW)]
APPS = [("tool_app.py", ()), ("async_tool_app.py", ("sync",)), ("async_tool_app.py", ("async",))]


# these runs hold outcomes: the opt-in whose window this file tests
HELD = {"BIDE_TEST_TOOL_OUTCOMES": "with_next_commit"}


def app(tmp_path, which, kind, *args, fault=None, env=None, outcomes=HELD):
    script, api = which
    return run_app(script, str(tmp_path / "home"), str(tmp_path / "effects"), kind, *api, *args,
                   fault=fault, env={**outcomes, **(env or {})})


def crash_then_resume(tmp_path, which, kind, point, env, mode="kill"):
    fault = f"{point}:1:{mode}"
    if point in (RIDES, HELD_CP):
        fault += f",before_outcome_flush:1:{mode}"
    out = app(tmp_path, which, kind, "start", "r1", fault=fault, env=env)
    assert out.returncode in (-9, 137), out.stderr
    out = app(tmp_path, which, kind, "resume", "r1")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("which", APPS, ids=lambda a: "-".join((a[0][:-3], *a[1])))
def test_the_checkpoint_before_a_node_that_calls_no_tool_is_not_held(tmp_path, which):
    out = app(tmp_path, which, "plain", "start", "r1", fault=f"{HELD_CP}:1:kill")
    assert out.returncode == 0, out.stderr
    assert effects(tmp_path) == 1


def effects(tmp_path) -> int:
    return sum(count_lines(tmp_path / "effects").values())


@pytest.mark.parametrize("which", APPS, ids=lambda a: "-".join((a[0][:-3], *a[1])))
@pytest.mark.parametrize(("point", "env"), UNKNOWN, ids=lambda p: p if isinstance(p, str)
                         else ("slow" if p else "fast"))
def test_a_crash_before_the_outcome_is_durable_leaves_it_unknown(tmp_path, which, point, env):
    run = crash_then_resume(tmp_path, which, "plain", point, env)
    assert effects(tmp_path) == 1
    assert run["status"] == "NEEDS_RECONCILIATION"
    assert run["waiting"]["type"] == "reconciliation" and run["waiting"]["tool"] == "send_email"
    assert [i["status"] for i in run["intents"]] == ["unknown"]


@pytest.mark.parametrize("mode", ["kill", "exit"])
@pytest.mark.parametrize(("point", "env"), UNKNOWN, ids=lambda p: p if isinstance(p, str)
                         else ("slow" if p else "fast"))
def test_a_reconciler_settles_an_outcome_lost_in_memory(tmp_path, point, env, mode):
    run = crash_then_resume(tmp_path, APPS[0], "reconciled", point, env, mode)
    assert run["status"] == "DONE" and run["state"]["result"] == {"sha": "abc"}
    assert effects(tmp_path) == 1
    assert run["intents"][0]["via"] == "reconcile"


@pytest.mark.parametrize(("point", "env"), UNKNOWN, ids=lambda p: p if isinstance(p, str)
                         else ("slow" if p else "fast"))
def test_an_idempotent_tool_repeats_only_with_its_key(tmp_path, point, env):
    run = crash_then_resume(tmp_path, APPS[0], "idempotent", point, env)
    assert run["status"] == "DONE"
    seen = count_lines(tmp_path / "effects")
    assert len(seen) == 1 and list(seen.values())[0] == 2  # the same key, called again


@pytest.mark.parametrize("which", APPS, ids=lambda a: "-".join((a[0][:-3], *a[1])))
@pytest.mark.parametrize(("point", "env"), DURABLE, ids=lambda p: p if isinstance(p, str)
                         else ("slow" if p else "fast"))
def test_a_crash_after_the_outcome_rode_or_flushed_replays_it(tmp_path, which, point, env):
    run = crash_then_resume(tmp_path, which, "plain", point, env)
    assert run["status"] == "DONE", run["error"]
    assert run["state"]["result"] == "sent to ops@example.com"
    assert effects(tmp_path) == 1
    assert [i["status"] for i in run["intents"]] == ["completed"]


# -- the default: the outcome is durable when ctx.tool returns ---------------------------
AT_RETURN = {"BIDE_TEST_TOOL_OUTCOMES": "at_return", "BIDE_TEST_DURABILITY": "durable"}


@pytest.mark.parametrize("which", APPS, ids=lambda a: "-".join((a[0][:-3], *a[1])))
@pytest.mark.parametrize("kind", ["plain", "reconciled"])
def test_a_kill_right_after_the_call_returned_replays_its_result(tmp_path, which, kind):
    """SIGKILL in the node, the moment ctx.tool (or atool) returned, under durable: the
    resume replays the recorded result; the tool ran once and no person is asked."""
    out = app(tmp_path, which, kind, "start", "r1", env={"KILL_AFTER_TOOL": "1"},
              outcomes=AT_RETURN)
    assert out.returncode in (-9, 137), out.stderr
    out = app(tmp_path, which, kind, "resume", "r1", outcomes=AT_RETURN)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    assert run["status"] == "DONE", run["error"]
    assert effects(tmp_path) == 1
    assert [(i["status"], i["via"]) for i in run["intents"]] == [("completed", "call")]


@pytest.mark.parametrize("which", APPS, ids=lambda a: "-".join((a[0][:-3], *a[1])))
@pytest.mark.parametrize("point", ["after_intent_completed", "checkpoint_held"])
def test_a_kill_at_the_outcomes_commit_or_after_it_replays_it(tmp_path, which, point):
    """Killed at the fault point right after the outcome's own commit, or where the step's
    checkpoint would be held: nothing of the call is left unknown."""
    out = app(tmp_path, which, "plain", "start", "r1", fault=f"{point}:1:kill",
              outcomes=AT_RETURN)
    if point == "checkpoint_held":  # the next node calls no tool: its checkpoint is not held
        assert out.returncode == 0, out.stderr
    else:
        assert out.returncode in (-9, 137), out.stderr
    out = app(tmp_path, which, "plain", "resume", "r1", outcomes=AT_RETURN)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    assert run["status"] == "DONE" and effects(tmp_path) == 1
    assert [i["status"] for i in run["intents"]] == ["completed"]
