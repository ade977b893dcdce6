"""``bide bench peers``' tool-call rows: bide's numbers are right, the verdicts follow them."""

from __future__ import annotations

import pytest
from bide.bench import tool_calls
from bide.engine.run import held
from extras import need
from test_bench import NEGATIVE  # what no bench text may print

K = 6


@pytest.fixture
def bide_row(tmp_path, monkeypatch) -> dict:
    # a loaded machine may hold a step past 2 ms (its outcome then commits alone): not here
    monkeypatch.setattr(held, "HOLD_BOUND", 60.0)
    return tool_calls.measure_bide(K, "fast", repeat=1, directory=str(tmp_path))


def test_a_tool_step_costs_two_commits_with_its_outcome_durable_at_return(bide_row) -> None:
    # per call: the prepare (the previous step's checkpoint rides in it) and the outcome;
    # plus the run's own first commit (created + leased) and its last (DONE), over K calls
    assert bide_row["commits_per_call"] == pytest.approx(2 + 2 / K)


def test_held_outcomes_make_a_tool_step_one_commit(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(held, "HOLD_BOUND", 60.0)
    row = tool_calls.measure_bide(K, "fast", repeat=1, directory=str(tmp_path),
                                  outcomes="with_next_commit")
    assert row["system"] == "bide fast held"
    # the prepare alone: the previous step's outcome and checkpoint ride in it
    assert row["commits_per_call"] == pytest.approx(1 + 2 / K)


def test_a_tool_call_stores_compact_records(bide_row: dict) -> None:
    assert bide_row["bytes_by_type"]["intent_prepared"] < 150 * K
    assert bide_row["bytes_by_type"]["intent_completed"] < 175 * K
    assert bide_row["intent_bytes_per_call"] <= 2 * tool_calls.ARG + 150


def test_a_tool_call_stores_fewer_record_bytes_than_dbos(tmp_path, monkeypatch) -> None:
    """Counted as the bench counts (the run's framed log records), at 100 B of arguments
    and 100 B of result: under DBOS's 288 B (499 B with long frames, every array default
    written and the result stored again in the checkpoint)."""
    monkeypatch.setattr(held, "HOLD_BOUND", 60.0)
    k = tool_calls.FULL_K
    row = tool_calls.measure_bide(k, "fast", repeat=1, directory=str(tmp_path))
    by_type = row["bytes_by_type"]
    assert by_type["intent_prepared"] <= 90 * k
    assert by_type["intent_completed"] <= 125 * k  # the result, and a byte of time at most
    assert by_type["checkpoint"] <= 70 * k  # the result named, not repeated
    assert row["bytes_per_call"] < 288


def test_langgraph_runs_the_same_calls(tmp_path) -> None:
    need("langgraph.graph")
    need("langgraph.checkpoint.sqlite")
    row = tool_calls.measure_langgraph(K, repeat=1, directory=str(tmp_path))
    assert row["calls"] == K and row["bytes_per_call"] > tool_calls.ARG
    assert row["ms_per_call"] > 0


def row(system: str, ms: float, size: float) -> dict:
    return {"system": system, "ms_per_call": ms, "bytes_per_call": size,
            "intent_bytes_per_call": size / 2, "commits_per_call": 2.0, "calls": K,
            "growth_per_call": 0, "bytes_per_payload_byte": size / 200}


def test_targets_are_met_or_not_by_the_numbers() -> None:
    met = tool_calls.targets([row("bide durable", 1.0, 400), row("langgraph sqlite-sync", 2.0, 900),
                              row("dbos sqlite", 3.0, 500)])
    assert [t["met"] for t in met] == [True, True, True]
    missed = tool_calls.targets([row("bide durable", 1.5, 600),
                                 row("langgraph sqlite-sync", 2.0, 900),
                                 row("dbos sqlite", 3.0, 300)])
    assert [t["met"] for t in missed] == [False, False, False]
    alone = tool_calls.targets([row("bide durable", 1.0, 400)])
    assert [t["met"] for t in alone] == [True, None, None]  # no peer: not measured, not met
    text = tool_calls.render({"rows": [row("bide durable", 1.0, 400)], "targets": alone,
                              "skipped": ["DBOS skipped: dbos is not installed"]})
    assert "not measured" in text and "DBOS skipped" in text


def test_back_to_back_rounds_decide_the_time_target() -> None:
    rows = [row("bide durable", 3.0, 400), row("langgraph sqlite-sync", 2.0, 900)]
    assert tool_calls.targets(rows)[1]["met"] is False  # the rows alone: 1.5x
    timed = tool_calls.targets(rows, [0.5, 0.9, 0.6])[1]
    assert timed["met"] is True and timed["measured"] == 0.6
    assert "median of 3 rounds" in timed["detail"]


def test_a_missed_time_target_prints_the_flushes_that_stop_it() -> None:
    rows = [row("bide durable", 1.2, 400), row("bide fast", 0.4, 400),
            row("langgraph sqlite-sync", 1.25, 900)]
    t = tool_calls.targets(rows)[1]
    assert t["met"] is False
    assert "the flushes alone take 0.800 ms a call" in t["bound"]
    assert "0.64x LangGraph's whole call, leaving 0.075 ms" in t["bound"]
    text = tool_calls.render({"rows": rows, "targets": tool_calls.targets(rows), "skipped": []})
    assert "    bound: the flushes alone" in text
    met = tool_calls.targets([row("bide durable", 0.8, 400), row("bide fast", 0.4, 400),
                              row("langgraph sqlite-sync", 1.25, 900)])[1]
    assert met["met"] is True and "bound" not in met


def test_the_flush_bound_never_prints_a_negative_time() -> None:
    over = [row("bide durable", 2.0, 400), row("bide fast", 0.4, 400),
            row("langgraph sqlite-sync", 1.25, 900)]  # flushes 1.6 ms > the 0.875 ms budget
    bound = tool_calls.targets(over)[1]["bound"]
    assert "more than the whole 0.7x budget (0.875 ms)" in bound and not NEGATIVE.search(bound)
    noisy = [row("bide durable", 1.2, 400), row("bide fast", 1.3, 400),
             row("langgraph sqlite-sync", 1.25, 900)]  # the fast run came out slower
    bound = tool_calls.targets(noisy)[1]["bound"]
    assert "within timing noise" in bound and not NEGATIVE.search(bound)
