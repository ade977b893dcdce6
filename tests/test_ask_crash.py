"""``ctx.ask`` across crashes: workers are real processes SIGKILLed at a fault point (the
pause, an answer's record, the resume after it), then a new process goes on.

What must hold, counted outside the store (tests/apps/ask_app.py's effects file): the
answer is recorded once, the node's effect after the ask (a tool call) happens once,
and ``ctx.ask`` returns the same value however often the node runs again. On LMDB and
on PostgreSQL homes.
"""

from __future__ import annotations

import json
from typing import Any

import bide
import pytest
from bide.bench.kit.crashkit import run_worker
from conftest import APPS, World, app_json, count_lines, run_app, world_on

ORDER = {"item": "tea", "cups": 2}


@pytest.fixture(params=["lmdb", "postgres"])
def world(request, tmp_path) -> World:
    return world_on(request, tmp_path, "ASK_APP_LOCAL")


def worker(w: World, *args: str, fault: str | None = None) -> Any:
    """Run ask_app in a fresh process; its JSON, or None if the fault killed it."""
    return app_json(run_app("ask_app.py", w.home, *args, fault=fault, env=w.env()), fault)


def answered_once(w: World) -> None:
    """The run ends with the answer given, the brew made once, one answer recorded."""
    run = worker(w, "resume", "r-1")
    assert run is not None and run["status"] == "WAITING_INPUT"
    assert run["waiting"]["question"] == "for whom?"
    worker(w, "answer", "r-1", '"ann"')
    run = worker(w, "resume", "r-1")
    assert run is not None and run["status"] == "DONE", run
    assert run["state"] == {"order": ORDER, "for": "ann", "brewed": "2 tea"}
    effects = count_lines(w.effects)
    assert effects["brew tea x2"] == 1
    assert set(k for k in effects if k.startswith("answered")) == {"answered tea x2"}
    with w.engine() as eng:
        assert eng.stats()["records"]["approval_decided"]["count"] == 2  # one per question
        assert eng.doctor().ok


def test_killed_after_the_pause_commit_the_question_waits_in_the_store(world):
    w = world
    assert worker(w, "start", "r-1", fault="after_pause_committed:1:kill") is None
    with w.engine() as eng:
        (row,) = eng.pending()  # the request file may be missing; the record is not
        assert row["question"] == "what to brew?" and eng.get("r-1").status == "WAITING_INPUT"
        request = eng.doors.requests / f"{row['approval_id']}.json"
        assert not request.exists()
    watch = run_worker("-m", "bide.cli", "watch", "--once", "--home", w.home,
                       *local_doors(w), "--app", "ask_app:flow",
                       env={"PYTHONPATH": str(APPS), "BIDE_TEST_EFFECTS": str(w.effects)})
    assert watch.returncode == 0, watch.stderr  # a starting watcher writes it again
    body = json.loads(request.read_text())
    assert body["schema"] == row["schema"] and body["answer_file"]["value"] == {
        "item": "coffee", "cups": 0}
    worker(w, "answer", "r-1", json.dumps(ORDER))
    answered_once(w)


@pytest.mark.parametrize("fault", ["after_lease_acquired", "after_intent_prepared",
                                   "after_tool_effect", "after_checkpoint"])
def test_killed_resuming_after_the_answer_the_value_and_the_effect_hold(world, fault):
    w = world
    assert worker(w, "start", "r-1")["status"] == "WAITING_INPUT"
    worker(w, "answer", "r-1", json.dumps(ORDER))
    run = worker(w, "resume", "r-1")  # the second question; then its answer
    assert run["waiting"]["question"] == "for whom?"
    worker(w, "answer", "r-1", '"ann"')
    assert worker(w, "resume", "r-1", fault=f"{fault}:1:kill") is None
    run = worker(w, "resume", "r-1")
    assert run["status"] == "DONE" and run["state"]["order"] == ORDER
    effects = count_lines(w.effects)
    assert effects["brew tea x2"] == 1
    assert set(k for k in effects if k.startswith("answered")) == {"answered tea x2"}


def test_a_watcher_killed_after_recording_an_answer_file_records_it_once(world):
    w = world
    assert worker(w, "start", "r-1")["status"] == "WAITING_INPUT"
    with w.engine() as eng:
        aid = eng.pending()[0]["approval_id"]
        from bide.engine.human.inbox import drop_decision

        drop_decision(eng.home, aid, "answer", value=ORDER, by="ann", inbox=eng.doors.inbox)
        inbox = eng.doors.inbox
    assert worker(w, "inbox", fault="after_decision_recorded:1:kill") is None
    assert [p.name for p in (inbox / ".work").iterdir()]  # claimed, recorded, not moved
    (result,) = worker(w, "inbox")
    assert result["accepted"] and result["reason"] == "duplicate of a recorded decision"
    assert not list((inbox / ".work").iterdir()) and len(list((inbox / "processed").iterdir()))
    with w.engine() as eng:
        assert eng.stats()["records"]["approval_decided"]["count"] == 1
    answered_once(w)


def test_bide_watch_takes_an_answer_file_and_resumes_the_run(world):
    """The whole loop with a real watcher process: ask, answer file, resume, ask again."""
    w = world
    assert worker(w, "start", "r-1")["status"] == "WAITING_INPUT"
    with w.engine() as eng:
        aid = eng.pending()[0]["approval_id"]
        inbox = eng.doors.inbox
    code, out = cli_answer(w, aid, json.dumps(ORDER))
    assert code == 0, out
    env = {"PYTHONPATH": str(APPS), "BIDE_TEST_EFFECTS": str(w.effects)}
    assert inbox == w.local / "inbox"
    proc = run_worker("-m", "bide.cli", "watch", "--once", "--home", w.home, *local_doors(w),
                      "--app", "ask_app:flow", env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    with w.engine() as eng:
        run = eng.get("r-1")
        assert run.status == bide.Status.WAITING_INPUT and run.waiting["question"] == "for whom?"
    assert count_lines(w.effects)["answered tea x2"] == 1


def cli_answer(w: World, aid: str, value: str) -> tuple[int, str]:
    """``bide answer`` as a person types it, in its own process."""
    proc = run_worker("-m", "bide.cli", "answer", aid, value, "--home", w.home)
    return proc.returncode, proc.stderr + proc.stdout


def local_doors(w: World) -> list[str]:
    """A watcher on a PostgreSQL home serves this test's local inbox and requests."""
    if not w.home.startswith("postgresql://"):
        return []
    return ["--inbox", str(w.local / "inbox"), "--requests", str(w.local / "requests")]
