"""Tasks and ``ctx`` see a superstep through a small frozen scope, not the executor."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import bide
import pytest
from bide.engine.run import siblings, tasks
from bide.engine.run.step import StepScope
from bide.engine.upkeep import maintenance
from bide.formats import PendingWrite
from import_graph import imports, modules

GRAPH = imports(modules(Path(bide.__file__).resolve().parent, "bide"))


@pytest.mark.parametrize("module", ["tasks", "context", "step"])
def test_the_step_side_does_not_import_the_executor(module):
    """Not at run time, not for type checking (tests/import_graph.py reads every import)."""
    assert "bide.engine.run.executor" not in GRAPH[f"bide.engine.run.{module}"]


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


def test_a_parallel_superstep_leaves_the_last_output_for_the_checkpoint(engine, monkeypatch):
    """The countdown lives in the step, not on the execution: one task of three rides along
    (with no wait for siblings; with one, see the tests below)."""
    monkeypatch.setattr(tasks, "SIBLING_BOUND", 0.0)
    flow = bide.Flow("fan")
    for name in ("x", "y", "z"):
        flow.node(start=True, name=name)(lambda state, ctx, n=name: {n: 1})
    engine.register(flow)
    assert engine.start("fan", run_id="r-fan").status == "DONE"
    types = [t for _, t, _ in engine.records("r-fan")]
    assert types.count("pending_write") == 2


def test_siblings_that_finish_together_ride_in_one_checkpoint(engine, monkeypatch):
    monkeypatch.setattr(tasks, "SIBLING_BOUND", 60.0)  # no sibling misses it
    flow = bide.Flow("fan")
    for name in ("x", "y", "z", "w"):
        flow.node(start=True, name=name)(lambda state, ctx, n=name: {n: 1})
    flow.node(after=["x", "y", "z", "w"], name="end")(lambda state, ctx: {"end": 1})
    engine.register(flow)
    run = engine.start("fan", run_id="r-fan")
    assert run.status == "DONE" and run.state == {"x": 1, "y": 1, "z": 1, "w": 1, "end": 1}
    types = [t for _, t, _ in engine.records("r-fan")]
    assert types.count("pending_write") == 0
    assert maintenance.doctor(engine.store).ok


def test_a_slow_sibling_lets_the_others_commit_their_outputs_alone(engine, monkeypatch):
    """Finished outputs wait only the bound: a crash never loses more than that much work."""
    monkeypatch.setattr(tasks, "SIBLING_BOUND", 0.005)
    flow = bide.Flow("slow")

    def slow(state, ctx):
        deadline = time.monotonic() + 30
        while sum(t == "pending_write" for _, t, _ in engine.records("r-slow")) < 2:
            assert time.monotonic() < deadline, "the fast siblings never committed"
            time.sleep(0.005)
        return {"slow": 1}

    flow.node(start=True, name="slow")(slow)
    for name in ("x", "y"):
        flow.node(start=True, name=name)(lambda state, ctx, n=name: {n: 1})
    engine.register(flow)
    run = engine.start("slow", run_id="r-slow")
    assert run.status == "DONE" and run.state == {"x": 1, "y": 1, "slow": 1}
    types = [t for _, t, _ in engine.records("r-slow")]
    assert types.count("pending_write") == 2  # the slow one's output rode in the checkpoint
    assert maintenance.doctor(engine.store).ok


def test_held_outputs_that_are_not_adjacent_are_committed_before_the_checkpoint(
        engine, monkeypatch):
    """Replay applies outputs in task order: held x and z around a committed y cannot
    ride as one run of ops, so they are committed (together) as pending writes."""
    monkeypatch.setattr(tasks, "SIBLING_BOUND", 60.0)
    y_done = threading.Event()
    flow = bide.Flow("gap")

    def x(state, ctx):
        assert y_done.wait(30)
        return {"trail": ["x"]}

    def y(state, ctx):
        y_done.set()
        return {"trail": ["y"]}

    flow.reducer("trail", bide.append)
    flow.node(start=True, name="x")(x)
    flow.node(start=True, name="y")(y)
    flow.node(start=True, name="z")(lambda state, ctx: {"trail": ["z"]})
    real = siblings.Siblings.together  # what counts the finished tasks of a sync fan-out

    def y_alone(self, task):  # y misses the bound as if its siblings were slow
        if ":y:" in task:
            self.last(task)
            return False
        return real(self, task)

    monkeypatch.setattr(siblings.Siblings, "together", y_alone)
    engine.register(flow)
    run = engine.start("gap", run_id="r-gap")
    assert run.status == "DONE" and run.state["trail"] == ["x", "y", "z"]
    types = [t for _, t, _ in engine.records("r-gap")]
    assert types.count("pending_write") == 3
    assert maintenance.doctor(engine.store).ok


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
