"""``bide bench langgraph-tools``: the cost rows count what they should, and a kill between a
wrapped call's effect and its outcome asks a person instead of repeating it."""

from __future__ import annotations

import pytest
from extras import need

need("langgraph.graph")
need("langgraph.checkpoint.sqlite")
need("langchain_core")

from bide.bench import langgraph_crash, langgraph_tools  # noqa: E402
from bide.bench.kit.langgraph_loop import build, config, initial  # noqa: E402
from test_bench import NEGATIVE  # noqa: E402  what no bench text may print

K = 6


@pytest.fixture(scope="module")
def cost(tmp_path_factory) -> dict:
    return langgraph_tools.cost(tmp_path_factory.mktemp("cost"), k=K, rounds=2, flushes=False)


def test_every_case_runs_the_same_calls_and_the_ratios_come_per_round(cost: dict) -> None:
    rows = {r["case"]: r for r in cost["rows"]}
    assert set(rows) == set(langgraph_tools.CASES)
    assert all(r["ms_per_call"] > 0 and len(r["ms_per_call_rounds"]) == 2 for r in rows.values())
    ratios = {r["ratio"]: r for r in cost["ratios"]}
    assert set(ratios) == {"b/a", "b/c", "lc b/a", "b/sqlite"}
    assert all(r["min"] <= r["median"] <= r["max"] and len(r["rounds"]) == 2
               for r in ratios.values())


def test_a_wrapped_call_adds_its_two_intent_commits(cost: dict) -> None:
    rows = {r["case"]: r for r in cost["rows"]}
    # IntentPrepared before the call, IntentCompleted before it returns; nothing else
    assert rows["lg-durable"]["commits_per_call"] - rows["lg-plain"]["commits_per_call"] == \
        pytest.approx(2)
    assert rows["lg-lc-durable"]["commits_per_call"] - rows["lg-lc"]["commits_per_call"] == \
        pytest.approx(2)
    assert rows["lg-sqlite"]["commits_per_call"] >= 1  # SQLite's COMMITs were seen at all


def test_the_report_prints_every_row_and_no_negative_number(cost: dict) -> None:
    crash = [langgraph_crash.summarize("bide", K, 0.1, [
        {"delay": 0.05, "killed": True, "effects": K, "duplicated": 0, "missing": 0,
         "asked": 1, "stopped": ["NEEDS_RECONCILIATION"], "state_ok": True}])]
    text = langgraph_tools.render({"cost": cost, "crash": crash})
    for system in langgraph_tools.CASES.values():
        assert system in text
    assert "LangGraph + bide tools" in text and not NEGATIVE.search(text)


def test_an_strace_summary_counts_only_flush_calls() -> None:
    summary = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 97.10    0.081021         101       800           fdatasync
  2.90    0.002420          12       200         3 fsync
------ ----------- ----------- --------- --------- ----------------
100.00    0.083441          83      1000         3 total
"""
    assert langgraph_tools.sync_calls(summary) == 1000


def test_a_thread_never_checkpointed_has_no_metadata(tmp_path) -> None:
    """What the resumer relies on to tell "start it" from "go on" (``next`` cannot: a step
    whose writes committed before the kill leaves none)."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp_path / "lg.sqlite", check_same_thread=False)
    graph = build(2, lambda i: str(i)).compile(checkpointer=SqliteSaver(conn))
    assert graph.get_state(config("none", 2)).metadata is None
    graph.invoke(initial(), config("t", 2), durability="sync")
    assert graph.get_state(config("t", 2)).metadata is not None
    conn.close()


def test_a_kill_after_the_effect_asks_a_person_and_repeats_nothing(tmp_path) -> None:
    r = langgraph_crash.kill_once("bide", tmp_path, K, None, fault="after_tool_effect:3:kill")
    assert r["killed"] and r["stopped"] == ["NEEDS_RECONCILIATION"]
    assert (r["asked"], r["duplicated"], r["effects"], r["state_ok"]) == (1, 0, K, True)


def test_a_kill_before_the_effect_is_retried_by_the_person(tmp_path) -> None:
    r = langgraph_crash.kill_once("bide", tmp_path, K, None, fault="after_intent_prepared:3:kill")
    assert r["killed"] and r["asked"] == 1  # outcome unknown: it may have happened
    assert (r["duplicated"], r["missing"], r["effects"], r["state_ok"]) == (0, 0, K, True)


def test_a_reconciler_settles_the_unknown_outcome_without_asking(tmp_path) -> None:
    r = langgraph_crash.kill_once("bide-reconcile", tmp_path, K, None,
                                  fault="after_tool_effect:3:kill")
    assert r["killed"] and (r["asked"], r["duplicated"], r["state_ok"]) == (0, 0, True)


def test_negative_control_without_intent_replay_the_effect_is_counted_twice(tmp_path) -> None:
    """The count can fail: with replay switched off, a call whose outcome was durable
    before the kill (its step's checkpoint not yet) is made again, and is seen twice."""
    r = langgraph_crash.kill_once("bide", tmp_path, K, None,
                                  fault="after_intent_completed:3:kill",
                                  env={"BIDE_TEST_SWITCHES": "no_intent_replay"})
    assert r["killed"] and r["duplicated"] >= 1 and r["asked"] == 0
