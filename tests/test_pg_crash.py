"""The crash matrix on PostgreSQL: a worker killed at every fault point the engine has
on this backend (first occurrences at least), resumed in a new process against the
same database; the world's counters (files outside the store) say what happened.

The same scenarios and checks as on LMDB, with a URL as the home: chain_app at every
commit boundary (``test_crash_resume``), a fan-out's held outputs, each step of the
intent protocol and of a held tool outcome (``test_intents_crash``,
``test_held_crash``), a takeover dying again, a pause, the inbox (``bide watch
--once``) and ``bide prune``; a durable timer's boundaries in ``test_timers_crash``
(its ``world`` is LMDB and PostgreSQL); signals in ``test_signals_crash`` (on PostgreSQL
too); schedules in ``test_schedules_crash`` (both stores); child runs in
``test_children_crash`` (on PostgreSQL too). ``ALL_POINTS`` below checks that nothing is
left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import bide
import pytest
from bide import Status
from bide.engine.base.faults import FAULT_POINTS
from bide.engine.human.inbox import drop_decision
from bide.engine.upkeep import maintenance
from conftest import APPS, count_lines, run_app
from extras import need
from test_children_crash import CHILD_POINTS  # its tests kill at them on PostgreSQL too
from test_crash_resume import EXPECTED_TRAIL, FAULTS, HELD, HELD_FAULTS, crash_then_resume
from test_schedules_crash import SCHEDULE_POINTS  # its tests kill at them on PostgreSQL too
from test_send_crash import check_world, crash_and_resume
from test_signals_crash import SIGNAL_POINTS  # its tests kill at them on PostgreSQL too
from test_timers_crash import TIMER_POINTS  # run there on PostgreSQL too (its `world`)

need("psycopg")

QUICK = ("after_pending_write:2", "before_commit:5", "after_commit:9", "after_checkpoint:1",
         "sibling_output_held:1")
# Points that only the LMDB file has: PostgreSQL has no map to grow, no file to compact.
LMDB_ONLY = {"during_map_growth", "during_compact_swap"}
INTENT_POINTS = ("before_intent_prepared", "after_intent_prepared", "after_tool_effect",
                 "after_intent_completed")
HELD_OUTCOME = (("outcome_held", {}), ("outcome_rides", {}),
                ("before_outcome_flush", {"SLEEP_AFTER_TOOL": "0.3"}))
# a checkpoint is held only before a node that calls a tool: tool_loop_app, not tool_app
HELD_CHECKPOINT = "checkpoint_held"
PAUSE_POINTS = ("after_pause_committed", "after_request_file")
INBOX_POINTS = ("after_file_claimed", "after_decision_recorded")
# a map's boundaries (map_app: 12 Send tasks, 3 at once), and a tool effect mid-map
MAP_FAULTS = ("map_planned:1", "map_task_started:7", "after_tool_effect:4")
# the fan-out's held outputs: its first and last sibling (its other boundaries are in FAULTS)
HELD_PG = [f for f in HELD_FAULTS if f in ("sibling_output_held:1", "sibling_output_held:3")]
ALL_POINTS = ({f.split(":")[0] for f in FAULTS + HELD_PG} | set(INTENT_POINTS)
              | {p for p, _ in HELD_OUTCOME} | {HELD_CHECKPOINT} | {"after_lease_acquired"}
              | set(PAUSE_POINTS)
              | set(INBOX_POINTS) | {"during_prune"} | {f.split(":")[0] for f in MAP_FAULTS}
              | set(TIMER_POINTS) | set(SIGNAL_POINTS) | set(SCHEDULE_POINTS)
              | set(CHILD_POINTS))


def quick_or_slow(faults: list[str]) -> list:
    return [pytest.param(f, marks=() if f in QUICK else pytest.mark.slow) for f in faults]


def test_every_fault_point_is_in_the_postgres_matrix():
    assert ALL_POINTS | LMDB_ONLY == set(FAULT_POINTS), set(FAULT_POINTS) ^ (
        ALL_POINTS | LMDB_ONLY)
    assert not ALL_POINTS & LMDB_ONLY


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """Workers started from here keep their local directory (inbox, requests) in it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- chain_app at every commit boundary, and with the fan-out's outputs held --------------
@pytest.mark.parametrize("fault", quick_or_slow(FAULTS))
def test_crash_then_resume_on_postgres(pg_url, here, fault):
    crash_then_resume(pg_url, here / "effects.log", fault, "kill", "durable")


@pytest.mark.parametrize("fault", quick_or_slow(HELD_PG))
def test_crash_with_held_sibling_outputs_on_postgres(pg_url, here, fault):
    crash_then_resume(pg_url, here / "effects.log", fault, "kill", "durable", env=HELD)


@pytest.mark.slow
def test_a_takeover_that_dies_again_on_postgres(pg_url, here):
    counter = here / "effects.log"
    first = run_app("chain_app.py", pg_url, str(counter), "start", "r1", "durable",
                    fault="after_pending_write:2:kill")
    assert first.returncode == -9, first.stderr
    again = run_app("chain_app.py", pg_url, str(counter), "resume", "r1", "durable",
                    fault="after_lease_acquired:1:kill")
    assert again.returncode == -9, again.stderr
    out = run_app("chain_app.py", pg_url, str(counter), "resume", "r1", "durable")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"]["trail"] == EXPECTED_TRAIL
    assert max(count_lines(counter).values()) <= 2
    with bide.open(pg_url, durability="fast") as eng:
        assert eng.get("r1").status == Status.DONE and eng.get("r1").head.attempts >= 1


# -- the intent protocol and held outcomes (tool_app) --------------------------------------
def tool_app(pg_url, here, kind, action, fault=None, env=None) -> dict | None:
    out = run_app("tool_app.py", pg_url, str(here / "effects"), kind, action, "r1",
                  fault=fault, env=env)
    if fault:
        assert out.returncode in (-9, 137), out.stderr
        return None
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("point", [pytest.param(p, marks=() if p == "after_tool_effect"
                                                else pytest.mark.slow) for p in INTENT_POINTS])
def test_a_reconciled_tool_call_happens_once_on_postgres(pg_url, here, point):
    tool_app(pg_url, here, "reconciled", "start", fault=f"{point}:1:kill")
    run = tool_app(pg_url, here, "reconciled", "resume")
    assert run["status"] == Status.DONE and run["state"]["result"] == {"sha": "abc"}
    assert sum(count_lines(here / "effects").values()) == 1
    if point in ("after_tool_effect",):  # the effect happened, its outcome was not durable
        assert run["intents"][0]["via"] == "reconcile"


@pytest.mark.slow
def test_a_plain_call_with_an_unknown_outcome_waits_for_a_person_on_postgres(pg_url, here):
    tool_app(pg_url, here, "plain", "start", fault="after_tool_effect:1:kill")
    run = tool_app(pg_url, here, "plain", "resume")
    assert run["status"] == Status.NEEDS_RECONCILIATION
    assert [i["status"] for i in run["intents"]] == ["unknown"]
    with bide.open(pg_url) as eng:  # the request is in the database (no local dir was given)
        assert [p["approval_id"] for p in eng.pending()] == [run["waiting"]["approval_id"]]
    assert sum(count_lines(here / "effects").values()) == 1  # never called again on its own


@pytest.mark.parametrize(("point", "env"), [pytest.param(p, e, marks=pytest.mark.slow)
                                            for p, e in HELD_OUTCOME])
def test_a_held_outcome_lost_in_memory_is_reconciled_on_postgres(pg_url, here, point, env):
    fault = f"{point}:1:kill" + (",before_outcome_flush:1:kill"
                                 if point == "outcome_rides" else "")
    held_env = {"BIDE_TEST_TOOL_OUTCOMES": "with_next_commit", **(env or {})}  # the opt-in
    tool_app(pg_url, here, "reconciled", "start", fault=fault, env=held_env)
    run = tool_app(pg_url, here, "reconciled", "resume")
    assert run["status"] == Status.DONE and run["intents"][0]["via"] == "reconcile"
    assert sum(count_lines(here / "effects").values()) == 1


def test_a_kill_right_after_the_call_returned_replays_it_on_postgres(pg_url, here):
    """The default: the outcome is committed (synchronous_commit on) before ctx.tool returns;
    a worker SIGKILLed the moment it returned leaves a completed call, replayed."""
    env = {"KILL_AFTER_TOOL": "1", "BIDE_TEST_DURABILITY": "durable"}
    out = run_app("tool_app.py", pg_url, str(here / "effects"), "plain", "start", "r1", env=env)
    assert out.returncode in (-9, 137), out.stderr
    run = tool_app(pg_url, here, "plain", "resume", env={"BIDE_TEST_DURABILITY": "durable"})
    assert run["status"] == Status.DONE
    assert [(i["status"], i["via"]) for i in run["intents"]] == [("completed", "call")]
    assert sum(count_lines(here / "effects").values()) == 1


@pytest.mark.slow
def test_a_held_checkpoint_lost_in_a_crash_costs_no_effect_on_postgres(pg_url, here):
    args = (pg_url, str(here / "effects"), "reconciled")
    out = run_app("tool_loop_app.py", *args, "start", "r1", fault=f"{HELD_CHECKPOINT}:2:kill")
    assert out.returncode in (-9, 137), out.stdout + out.stderr
    out = run_app("tool_loop_app.py", *args, "resume", "r1")
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    assert run["status"] == "DONE" and run["state"]["i"] == 4, run
    assert set(count_lines(here / "effects").values()) == {1}
    assert len(count_lines(here / "effects")) == 4


# -- a pause, the inbox, prune (proof_app, bide watch --once, bide prune) -------------------
def proof_app(pg_url, here, action, *args, fault=None) -> dict | None:
    out = run_app("proof_app.py", pg_url, str(here / "effects"), action, "r1", *args,
                  fault=fault)
    if fault:
        assert out.returncode in (-9, 137), out.stderr
        return None
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def proof_done_once(pg_url, here, run: dict) -> None:
    assert run["status"] == Status.DONE and run["state"]["paid"], run
    lines = count_lines(here / "effects")
    assert [n for k, n in lines.items() if k.startswith("tool charge")] == [1], lines
    assert lines["node prep r1"] == 1  # its output was durable before any kill
    with bide.open(pg_url, durability="fast") as eng:
        assert maintenance.doctor(eng.store).ok


@pytest.mark.parametrize("point", [pytest.param(p, marks=pytest.mark.slow)
                                   for p in PAUSE_POINTS])
def test_a_crash_at_a_pause_asks_again_and_is_decided_once_on_postgres(pg_url, here, point):
    proof_app(pg_url, here, "start", "ask", fault=f"{point}:1:kill")
    waiting = proof_app(pg_url, here, "resume")
    assert waiting["status"] == Status.WAITING_APPROVAL
    with bide.open(pg_url, durability="fast") as eng:  # asked once, in the database
        assert [p["approval_id"] for p in eng.pending()] == [waiting["waiting"]["approval_id"]]
    # (after_pause_committed leaves no request file: a starting watcher writes it again,
    # tests/test_request_files_rewritten.py)
    proof_done_once(pg_url, here, proof_app(pg_url, here, "decide", "approve"))


def bide_cli(here: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env.update(PYTHONPATH=str(APPS), PROOF_EFFECTS=str(here / "effects"),
               **({"BIDE_FAULT": fault} if fault else {}))
    return subprocess.run([sys.executable, "-m", "bide.cli", *args], env=env, cwd=here,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("point", [pytest.param(p, marks=pytest.mark.slow)
                                   for p in INBOX_POINTS])
def test_a_watcher_killed_in_the_inbox_records_the_decision_once_on_postgres(pg_url, here,
                                                                            point):
    waiting = proof_app(pg_url, here, "start", "ask")
    assert waiting["status"] == Status.WAITING_APPROVAL
    drop_decision(here / ".bide", waiting["waiting"]["approval_id"], "approve", by="proof")
    watch = ("watch", "--home", pg_url, "--app", "proof_app:flow", "--once")
    assert bide_cli(here, *watch, fault=f"{point}:1:kill").returncode == -9
    done = bide_cli(here, *watch)
    assert done.returncode == 0, done.stderr
    with bide.open(pg_url, durability="fast") as eng:
        run = {"status": eng.get("r1").status, "state": eng.state("r1")}
        with eng.store.reader() as r:
            decided = [s for s, t in r.run_entries("r1") if t == "approval_decided"]
    assert len(decided) == 1  # one decision, however many times the file was taken
    proof_done_once(pg_url, here, run)
    assert not list((here / ".bide" / "inbox").glob("*.json"))  # the file was handled


@pytest.mark.slow
def test_a_prune_killed_midway_leaves_the_database_whole(pg_url, here):
    for i in range(3):
        out = run_app("proof_app.py", pg_url, str(here / "effects"), "start", f"r{i}")
        assert out.returncode == 0, out.stderr
    before = json.loads(bide_cli(here, "stats", "--json", "--home", pg_url).stdout)
    prune = ("prune", "--finished-older-than", "0s", "--home", pg_url)
    assert bide_cli(here, *prune, fault="during_prune:1:kill").returncode == -9
    doctor = bide_cli(here, "doctor", "--json", "--home", pg_url)
    assert doctor.returncode == 0 and json.loads(doctor.stdout)["ok"], doctor.stdout
    after = json.loads(bide_cli(here, "stats", "--json", "--home", pg_url).stdout)
    assert after["total_records"] == before["total_records"]
    assert bide_cli(here, *prune).returncode == 0
    doctor = bide_cli(here, "doctor", "--json", "--home", pg_url)
    assert doctor.returncode == 0 and json.loads(doctor.stdout)["ok"], doctor.stdout


# -- a map (map_app): killed mid-map, each item's effect once, the state complete ----------
@pytest.mark.parametrize("fault", [pytest.param(f, marks=() if f == "map_task_started:7"
                                                else pytest.mark.slow) for f in MAP_FAULTS])
def test_killed_mid_map_each_item_happens_once_on_postgres(pg_url, here, fault):
    point, occurrence = fault.split(":")
    run = crash_and_resume(here, point, int(occurrence), {}, url=pg_url)
    check_world(here, run, point)
