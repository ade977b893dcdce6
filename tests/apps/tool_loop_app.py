"""A worker for held-checkpoint crash tests: one node looping STEPS times, one tool call
a step, so each step's checkpoint rides in the next step's prepare.

usage: tool_loop_app.py HOME EFFECTS KIND start|resume RUN_ID
KIND: plain | reconciled. Each real side effect appends "<step> <idempotency key>" to
EFFECTS, a file outside the store. The hold bound is an hour (``HOLD_FOREVER``), so
what rides in what does not depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import sys

import bide
from bide.bench.kit.crashkit import count_effects, record_effect
from bide.engine.run import held

home, effects, kind, action, run_id = sys.argv[1:6]
STEPS = 4
held.HOLD_BOUND = 3600.0


def happened(key: str) -> bool:
    return any(line.split()[1] == key for line in count_effects(effects))


def was_sent(idempotency_key: str, step: int) -> bide.Outcome:
    return bide.Outcome.done(f"sent {step}") if happened(idempotency_key) else \
        bide.Outcome.not_done()


@bide.tool(name="send")
def send_plain(step: int, *, idempotency_key: str) -> str:
    record_effect(effects, f"{step} {idempotency_key}")
    return f"sent {step}"


@bide.tool(reconcile=was_sent, name="send")
def send_reconciled(step: int, *, idempotency_key: str) -> str:
    record_effect(effects, f"{step} {idempotency_key}")
    return f"sent {step}"


# the tool-outcome policy a crash test chose (tests/test_held_crash.py)
POLICY = bide.Policy(tool_outcomes=os.environ.get("BIDE_TEST_TOOL_OUTCOMES", "at_return"))

flow = bide.Flow("loop")


@flow.node(start=True)
def step(state, ctx):
    i = state.get("i", 0)
    tool = send_plain if kind == "plain" else send_reconciled
    return {"i": i + 1, "sent": state.get("sent", []) + [ctx.tool(tool, i)]}


flow.route("step", lambda s: "step" if s["i"] < STEPS else bide.END)

with bide.open(home, durability="fast") as engine:
    engine.register(flow)
    if action == "start":
        run = engine.start("loop", run_id=run_id, policy=POLICY)
    else:
        run = engine.get(run_id)
        run = run if run.status == bide.Status.DONE else engine.resume(run_id)
    print(json.dumps({"status": run.status.value, "state": run.state, "waiting": run.waiting,
                      "intents": [i["status"] for i in engine.intents(run_id)]}))
