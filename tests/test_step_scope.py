"""Tasks and ``ctx`` see a superstep through a small frozen scope, not the executor."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import bide
import pytest
from bide.engine.step import StepScope
from bide.formats import PendingWrite

ENGINE = Path(bide.__file__).parent / "engine"


def imported(module: str) -> set[str]:
    """The engine modules ``module`` imports, at run time or for type checking."""
    tree = ast.parse((ENGINE / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
    return out


@pytest.mark.parametrize("module", ["tasks", "context", "step"])
def test_the_step_side_does_not_import_the_executor(module):
    assert "executor" not in imported(module)


def test_the_scope_is_frozen(engine):
    seen = []
    flow = bide.Flow("peek")

    @flow.node(start=True)
    def first(state, ctx):
        seen.append(ctx._scope)
        return {"a": 1}

    @flow.node(after=["first"])
    def second(state, ctx):
        seen.append(ctx._scope)
        return {"b": 2}

    engine.register(flow)
    assert engine.start("peek", run_id="r").status == "DONE"
    one, two = seen
    assert (one.superstep, one.version, dict(one.state)) == (0, 0, {})
    assert (two.superstep, two.version, dict(two.state)) == (1, 1, {"a": 1})
    assert one.run_id == two.run_id == "r" and one.token == two.token == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.superstep = 5  # type: ignore[misc]


def test_ctx_reports_what_the_scope_says(engine):
    got = []
    flow = bide.Flow("ids")

    @flow.node(start=True)
    def a(state, ctx):
        return {"n": 1}

    @flow.node(after=["a"])
    def b(state, ctx):
        got.append((ctx.run_id, ctx.superstep, ctx.state_version, ctx.task_id, ctx.attempt))
        return {}

    engine.register(flow)
    engine.start("ids", run_id="r-ids")
    assert got == [("r-ids", 1, 1, "1:b:0", 0)]


def test_a_parallel_superstep_leaves_the_last_output_for_the_checkpoint(engine):
    """The countdown lives in the step, not on the execution: one task of three rides along."""
    flow = bide.Flow("fan")
    for name in ("x", "y", "z"):
        flow.node(start=True, name=name)(lambda state, ctx, n=name: {n: 1})
    engine.register(flow)
    assert engine.start("fan", run_id="r-fan").status == "DONE"
    types = [t for _, t, _ in engine.records("r-fan")]
    assert types.count("pending_write") == 2


def test_a_step_scope_commits_under_its_fencing_token(engine):
    flow = bide.Flow("one")
    flow.node(start=True, name="only")(lambda state, ctx: {"done": True})
    engine.register(flow)
    engine.start("one", run_id="r")  # DONE: its lease is released, token 1 no longer holds it
    scope = StepScope(store=engine.store, flow=flow, policy=bide.Policy(), run_id="r", token=1,
                      superstep=1, version=1, state={}, clock=lambda: 0.0)
    before = list(engine.records("r"))
    with pytest.raises(bide.StaleLease):
        scope.commit([PendingWrite(run_id="r", task="1:only:0", superstep=1, node="only")])
    assert list(engine.records("r")) == before
