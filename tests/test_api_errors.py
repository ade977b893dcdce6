"""Regressions from issue 11: API arguments and misuse get one clear BideError each."""

from __future__ import annotations

import bide
import pytest


def two_step_flow() -> bide.Flow:
    flow = bide.Flow("two")

    @flow.node(start=True)
    def first(state, ctx):
        return {"a": 1}

    @flow.node(after=["first"])
    def second(state, ctx):
        return {"b": 2}

    return flow


# -- issue 11 item 16: status names and versions ---------------------------------------
@pytest.mark.parametrize("status", ["done", "DONE", "Done", " done ", bide.Status.DONE])
def test_runs_accepts_a_status_in_any_case(engine, status):
    engine.register(two_step_flow())
    engine.start("two", run_id="r1")
    assert [r.run_id for r in engine.runs(status=status)] == ["r1"]
    assert engine.runs(status="failed") == []


@pytest.mark.parametrize("status", ["bogus", "", "DONEE", 3])
def test_runs_refuses_an_unknown_status_naming_the_valid_ones(engine, status):
    engine.register(two_step_flow())
    engine.start("two", run_id="r1")
    with pytest.raises(bide.UnknownStatus) as info:
        engine.runs(status=status)
    assert isinstance(info.value, ValueError) and isinstance(info.value, bide.BideError)
    assert repr(status) in str(info.value) and "WAITING_APPROVAL" in str(info.value)


def test_state_at_a_missing_version_is_unknown_version(engine):
    engine.register(two_step_flow())
    engine.start("two", run_id="r1")
    assert engine.state("r1", version=1) == {"a": 1}
    with pytest.raises(bide.UnknownVersion) as info:
        engine.state("r1", version=99)
    assert isinstance(info.value, bide.RunError)
    assert "version 99" in str(info.value) and "0, 1, 2" in str(info.value)
    with pytest.raises(bide.UnknownRun):
        engine.state("nope", version=1)


def test_the_cli_and_the_api_raise_the_same_unknown_version(engine):
    from bide.engine import inspect

    assert inspect.UnknownVersion is bide.UnknownVersion
