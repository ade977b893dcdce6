"""Flows for the follow tests (``--app follow_app:flows``).

``steps`` runs three nodes, each appending to $BIDE_TEST_EFFECTS (outside the
store); ``gated`` waits in its node until the file $BIDE_TEST_GATE exists (so a
test decides when the run goes on); ``asks`` pauses for an approval; ``breaks``
fails; ``naps`` sleeps an hour on a durable timer.
"""

from __future__ import annotations

import os
import time

import bide
from bide.bench.kit.crashkit import record_effect


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, line)


steps = bide.Flow("steps")


@steps.node(start=True)
def plan(state, ctx):
    effect(f"plan {ctx.run_id}")
    return {"queries": [f"{state.get('topic', 'x')} {i}" for i in range(2)]}


@steps.node(after=["plan"])
def search(state, ctx):
    effect(f"search {ctx.run_id}")
    return {"found": [q.upper() for q in state["queries"]]}


@steps.node(after=["search"])
def summarize(state, ctx):
    effect(f"summarize {ctx.run_id}")
    return {"summary": "; ".join(state["found"])}


gated = bide.Flow("gated")


@gated.node(start=True)
def first(state, ctx):
    effect(f"first {ctx.run_id}")
    return {"first": True}


@gated.node(after=["first"])
def wait_gate(state, ctx):
    gate = os.environ.get("BIDE_TEST_GATE")
    deadline = time.monotonic() + 60
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    effect(f"wait_gate {ctx.run_id}")
    return {"gated": True}


@gated.node(after=["wait_gate"])
def last(state, ctx):
    effect(f"last {ctx.run_id}")
    return {"last": True}


asks = bide.Flow("asks")


@asks.node(start=True)
def ask_first(state, ctx):
    return {"ok": ctx.approve("go ahead", payload={"why": "a test"})}


@asks.node(after=["ask_first"])
def after_ask(state, ctx):
    effect(f"after_ask {ctx.run_id}")
    return {"done": True}


breaks = bide.Flow("breaks")


@breaks.node(start=True)
def broken(state, ctx):
    raise RuntimeError("this node always fails")


naps = bide.Flow("naps")


@naps.node(start=True)
def nap(state, ctx):
    ctx.sleep(3600)  # a durable timer: the run sleeps, its worker is released
    effect(f"woke {ctx.run_id}")
    return {"woke": True}


flows = [steps, gated, asks, breaks, naps]
