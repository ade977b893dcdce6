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
    from bide.engine.read import inspect

    assert inspect.UnknownVersion is bide.UnknownVersion


# -- issue 11 item 15: a ctx kept after its node returned ------------------------------
@bide.tool
def note(text: str) -> str:
    return text


def kept_ctx_flow(kept: list) -> bide.Flow:
    flow = bide.Flow("kept")

    @flow.node(start=True)
    def keeper(state, ctx):
        kept.append(ctx)
        return {"a": ctx.tool(note, "inside")}

    @flow.node(after=["keeper"])
    async def akeeper(state, ctx):
        kept.append(ctx)
        return {"b": 1}

    return flow


@pytest.mark.parametrize("use", [
    lambda ctx: ctx.tool(note, "late"),
    lambda ctx: ctx.approve("late"),
])
def test_a_ctx_used_after_its_node_returned_names_node_and_run(engine, use):
    kept: list = []
    engine.register(kept_ctx_flow(kept))
    run = engine.start("kept", run_id="r1")
    assert run.status == "DONE" and run.state == {"a": "inside", "b": 1}
    before = list(engine.records("r1"))
    for ctx, node in zip(kept, ["keeper", "akeeper"], strict=True):
        with pytest.raises(bide.ContextClosed) as info:
            use(ctx)
        assert f"node {node!r}" in str(info.value) and "run 'r1'" in str(info.value)
        assert info.value.node == node and info.value.run_id == "r1"
    assert list(engine.records("r1")) == before  # nothing written


def test_a_ctx_used_by_a_thread_after_a_failed_node_is_closed_too(engine):
    kept: list = []
    flow = bide.Flow("boom")

    @flow.node(start=True)
    def boom(state, ctx):
        kept.append(ctx)
        raise RuntimeError("boom")

    engine.register(flow)
    assert engine.start("boom", run_id="r1").status == "FAILED"
    with pytest.raises(bide.ContextClosed):
        kept[0].tool(note, "late")
