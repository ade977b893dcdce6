"""A checkpoint names a tool call's recorded result instead of storing it again
(engine/storage/call_refs.py): every reader resolves it, retention keeps what it needs, and
doctor names a reference that leads nowhere. Runs on every store (``--store``)."""

from __future__ import annotations

from typing import Any

import bide
from bide.engine.storage import call_refs
from bide.engine.storage.call_refs import CALL
from bide.formats import Checkpoint, IntentCompleted

K = 5
RESULT = "r" * 100


@bide.tool
def send(i: int) -> str:
    return f"{i:03d}:{RESULT}"


@bide.tool
def fetch(i: int) -> dict:
    return {"i": i, "text": RESULT}


def loop(name: str, returned: Any) -> bide.Flow:
    """K tool steps; each keeps ``returned(ctx, i)`` and a counter in state."""
    flow = bide.Flow(name)

    @flow.node(start=True)
    def step(state, ctx):
        i = state["count"]
        return {"last": returned(ctx, i), "count": i + 1}

    flow.route("step", lambda state: bide.END if state["count"] >= K else "step")
    return flow


def checkpoints(engine: bide.Engine, run_id: str) -> list[Checkpoint]:
    with engine.store.reader() as r:
        found = [r.record(seq) for seq, rtype in r.run_entries(run_id) if rtype == "checkpoint"]
    return [cp for cp in found if isinstance(cp, Checkpoint)]


def kinds(engine: bide.Engine, run_id: str) -> list[str]:
    return [op[1] for cp in checkpoints(engine, run_id) for op in cp.deferred if op[0] == "last"]


def test_a_tool_steps_checkpoint_names_the_call_and_every_reader_resolves_it(engine):
    engine.register(loop("refs", lambda ctx, i: ctx.tool(send, i)))
    run = engine.start("refs", {"count": 0}, run_id="r0")
    want = {"count": K, "last": f"{K - 1:03d}:{RESULT}"}
    assert run.state == want
    assert kinds(engine, "r0") == [CALL] * K
    assert engine.state("r0") == want  # the latest-state index
    for version in range(1, K + 1):  # older versions replay the log
        assert engine.state("r0", version)["last"] == f"{version - 1:03d}:{RESULT}"
    assert engine.doctor().ok
    assert engine.doctor(rebuild=True).ok and engine.state("r0") == want


def test_a_checkpoint_every_few_steps_reads_back_at_every_version(engine):
    engine.register(loop("refs", lambda ctx, i: ctx.tool(send, i)))
    engine.start("refs", {"count": 0}, run_id="r3", policy=bide.Policy(checkpoint_every=3))
    assert CALL in kinds(engine, "r3")  # the last step's output, before each checkpoint
    assert engine.state("r3") == {"count": K, "last": f"{K - 1:03d}:{RESULT}"}
    versions = [cp.version for cp in checkpoints(engine, "r3") if cp.version > 0]
    assert len(versions) < K  # not one per step
    for version in versions:  # each replays from the log
        assert engine.state("r3", version)["last"] == f"{version - 1:03d}:{RESULT}"
    assert engine.doctor(rebuild=True).ok


def test_a_call_of_the_superstep_before_drops_its_number_an_older_one_keeps_it():
    ops = [("a", CALL, ["6:step:0", 1]), ("b", CALL, ["4:step:0", 0]), ("c", "set", "x")]
    short = call_refs.shorten(ops, 7)
    assert short == [("a", CALL, [1, "step:0"]), ("b", CALL, ["4:step:0", 0]), ("c", "set", "x")]
    results = {("6:step:0", 1): "six", ("4:step:0", 0): "four"}
    resolved = call_refs.resolve(short, "r", 7, lambda run, task, i: results[task, i])
    assert list(resolved) == [("a", "set", "six"), ("b", "set", "four"), ("c", "set", "x")]


def test_a_result_the_node_changed_or_a_dict_is_stored_as_it_is(engine):
    engine.register(loop("upper", lambda ctx, i: ctx.tool(send, i).upper()))
    engine.register(loop("dicts", lambda ctx, i: ctx.tool(fetch, i)))
    engine.start("upper", {"count": 0}, run_id="u")
    engine.start("dicts", {"count": 0}, run_id="d")
    assert kinds(engine, "u") == kinds(engine, "d") == ["set"] * K
    assert engine.state("d")["last"] == {"i": K - 1, "text": RESULT}


def test_prune_and_fork_keep_what_a_reference_needs(engine):
    engine.register(loop("refs", lambda ctx, i: ctx.tool(send, i)))
    engine.start("refs", {"count": 0}, run_id="r0")
    engine.prune(keep=1)
    assert engine.state("r0") == {"count": K, "last": f"{K - 1:03d}:{RESULT}"}
    assert engine.doctor().ok
    fork = engine.fork("r0", K)
    assert engine.state(fork) == engine.state("r0")


def test_a_reference_to_a_call_that_is_gone_is_named_by_doctor(engine):
    engine.register(loop("refs", lambda ctx, i: ctx.tool(send, i)))
    engine.start("refs", {"count": 0}, run_id="r0")

    def last_completion(r) -> list[int]:
        done = [seq for seq, rtype in r.run_entries("r0") if rtype == IntentCompleted.TYPE]
        return done[-1:]

    engine.store.delete(last_completion)  # what only damage does: retention keeps intents
    report = engine.doctor()
    assert not report.ok
    assert any(p.kind == "dangling" and f"{K - 1}:step:0#0" in p.detail
               for p in report.problems), report.problems
