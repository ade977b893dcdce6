"""Kill a worker at each step of the intent protocol; the world's counter decides."""

from __future__ import annotations

import json

import pytest
from conftest import count_lines, run_app

POINTS = ["before_intent_prepared", "after_intent_prepared", "after_tool_effect",
          "after_intent_completed"]


def app(tmp_path, kind, *args, fault=None, env=None):
    out = run_app("tool_app.py", str(tmp_path / "home"), str(tmp_path / "effects"), kind, *args,
                  fault=fault, env=env)
    return out


def effects(tmp_path):
    return count_lines(tmp_path / "effects")


def crash(tmp_path, kind, point, mode):
    if point == "during_call":
        out = app(tmp_path, kind, "start", "r1", env={"DIE_IN_TOOL": "1"})
    else:
        out = app(tmp_path, kind, "start", "r1", fault=f"{point}:1:{mode}")
    assert out.returncode in (-9, 137), out.stderr


def resumed(tmp_path, kind, *extra):
    out = app(tmp_path, kind, *(extra or ("resume", "r1")))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def effect_happened(point: str) -> bool:
    return point in ("after_tool_effect", "during_call", "after_intent_completed")


@pytest.mark.parametrize("mode", ["kill", "exit"])
@pytest.mark.parametrize("point", POINTS + ["during_call"])
def test_plain_tool_never_repeats_without_a_decision(tmp_path, point, mode):
    crash(tmp_path, "plain", point, mode)
    run = resumed(tmp_path, "plain")
    n = sum(effects(tmp_path).values())
    assert n == (1 if effect_happened(point) else 0) or (point == "before_intent_prepared"
                                                          and n == 1)
    if point in ("after_intent_prepared", "after_tool_effect", "during_call"):
        # outcome unknown: the run waits for a human instead of guessing
        assert run["status"] == "NEEDS_RECONCILIATION"
        assert run["waiting"]["type"] == "reconciliation"
        assert run["waiting"]["tool"] == "send_email" and run["waiting"]["node_id"] == "act"
        assert (tmp_path / "home" / "requests" / f"{run['waiting']['approval_id']}.json").exists()
        assert [i["status"] for i in run["intents"]] == ["unknown"]
        again = resumed(tmp_path, "plain")  # resuming again changes nothing
        assert again["status"] == "NEEDS_RECONCILIATION"
        assert sum(effects(tmp_path).values()) == n
    else:
        assert run["status"] == "DONE" and run["state"]["result"] == "sent to ops@example.com"
        assert sum(effects(tmp_path).values()) == 1


def test_mark_done_gives_the_node_the_human_result(tmp_path):
    crash(tmp_path, "plain", "after_tool_effect", "kill")
    resumed(tmp_path, "plain")
    run = resumed(tmp_path, "plain", "decide", "r1", "mark_done", json.dumps("sent (checked)"))
    assert run["status"] == "DONE" and run["state"]["result"] == "sent (checked)"
    assert sum(effects(tmp_path).values()) == 1
    (intent,) = run["intents"]
    assert intent["status"] == "resolved" and intent["decision"] == "mark_done"
    assert intent["by"] == "alice" and intent["reason"] == "checked by hand"


def test_retry_calls_again_with_the_same_key(tmp_path):
    crash(tmp_path, "plain", "after_intent_prepared", "kill")
    resumed(tmp_path, "plain")
    assert effects(tmp_path) == {}
    run = resumed(tmp_path, "plain", "decide", "r1", "retry")
    assert run["status"] == "DONE"
    assert sum(effects(tmp_path).values()) == 1


def test_abort_fails_the_run(tmp_path):
    crash(tmp_path, "plain", "after_tool_effect", "kill")
    resumed(tmp_path, "plain")
    run = resumed(tmp_path, "plain", "decide", "r1", "abort")
    assert run["status"] == "FAILED" and "aborted by alice" in run["error"]
    assert sum(effects(tmp_path).values()) == 1


@pytest.mark.parametrize("point", POINTS + ["during_call"])
def test_idempotent_tool_is_repeated_only_with_the_same_key(tmp_path, point):
    crash(tmp_path, "idempotent", point, "kill")
    run = resumed(tmp_path, "idempotent")
    assert run["status"] == "DONE"
    assert run["state"]["result"] == {"ticket": "T-1", "title": "disk full"}
    seen = effects(tmp_path)
    assert len(seen) == 1  # one distinct key, however many repeats
    assert list(seen.values())[0] <= 2


@pytest.mark.parametrize("point", POINTS + ["during_call"])
def test_reconciler_decides_and_nothing_runs_twice(tmp_path, point):
    crash(tmp_path, "reconciled", point, "kill")
    run = resumed(tmp_path, "reconciled")
    assert run["status"] == "DONE" and run["state"]["result"] == {"sha": "abc"}
    assert sum(effects(tmp_path).values()) == 1
    if effect_happened(point) and point != "after_intent_completed":
        assert run["intents"][0]["via"] == "reconcile"


def test_negative_control_without_replay_the_effect_repeats(tmp_path):
    """With intent replay switched off (test-only), a completed call is made again.

    The node keeps working after its call, so its outcome is committed alone and the
    crash lands before the node's own output is: the node runs again on resume."""
    out = app(tmp_path, "plain", "start", "r1", fault="after_intent_completed:1:kill",
              env={"SLEEP_AFTER_TOOL": "0.3"})
    assert out.returncode == -9, out.stderr
    out = app(tmp_path, "plain", "resume", "r1", env={"BIDE_TEST_SWITCHES": "no_intent_replay"})
    assert out.returncode == 0, out.stderr
    assert sum(effects(tmp_path).values()) == 2


def test_retry_that_dies_again_asks_again_instead_of_looping(tmp_path):
    """Regression: a 'retry' decision whose new attempt also died kept pointing at the
    old, already decided request, so resume paused and resumed forever without asking."""
    crash(tmp_path, "plain", "after_tool_effect", "kill")
    first = resumed(tmp_path, "plain")
    out = app(tmp_path, "plain", "decide", "r1", "retry", env={"DIE_IN_TOOL": "1"})
    assert out.returncode == -9
    second = resumed(tmp_path, "plain")
    assert second["status"] == "NEEDS_RECONCILIATION"
    assert second["waiting"]["approval_id"] != first["waiting"]["approval_id"]
    assert sum(effects(tmp_path).values()) == 2  # the original and the one retry decided
    done = resumed(tmp_path, "plain", "decide", "r1", "mark_done", '"ok"')
    assert done["status"] == "DONE" and sum(effects(tmp_path).values()) == 2
