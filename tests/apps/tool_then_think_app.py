"""A worker for the held-checkpoint redo test: a tool step, then a step that calls no tool.

usage: tool_then_think_app.py HOME EFFECTS start|resume RUN_ID
The tool appends "send <key>" to EFFECTS (outside the store); ``think`` appends
"think" and, on its first run, dies by SIGKILL 20 ms into its work. HOLD_BOUND
(seconds, env) replaces engine/run/held.py's: a long one stands for a next step whose
first commit comes before the flusher (a fast LLM step), deterministically.
"""

from __future__ import annotations

import json
import os
import sys
import time

import bide
from bide.bench.kit.crashkit import record_effect
from bide.engine.run import held

home, effects, action, run_id = sys.argv[1:5]
if os.environ.get("HOLD_BOUND"):
    held.HOLD_BOUND = float(os.environ["HOLD_BOUND"])


@bide.tool
def send(turn: int, *, idempotency_key: str) -> str:
    record_effect(effects, f"send {idempotency_key}")
    return f"sent {turn}"


# the tool-outcome policy a crash test chose (tests/test_held_crash.py)
POLICY = bide.Policy(tool_outcomes=os.environ.get("BIDE_TEST_TOOL_OUTCOMES", "at_return"))

flow = bide.Flow("tool-then-think")


@flow.node(start=True)
def act(state, ctx):
    return {"sent": ctx.tool(send, 1)}


@flow.node(after=["act"])
def think(state, ctx):
    first = not os.path.exists(effects) or "think" not in open(effects).read()
    record_effect(effects, "think")
    time.sleep(0.02)
    if first and action == "start":
        os.kill(os.getpid(), 9)
    return {"thought": True}


with bide.open(home, durability="fast") as engine:
    engine.register(flow)
    if action == "start":
        run = engine.start("tool-then-think", {}, run_id=run_id, policy=POLICY)
    else:
        run = engine.resume(run_id)
    print(json.dumps({"status": str(run.status), "state": run.state}))
