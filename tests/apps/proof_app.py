"""The flow of the PostgreSQL proof runs (``--app proof_app:flow``), and a worker for them.

``prep`` → ``pay`` (asks for approval when the input says ``ask``, then calls
``charge``, a non-idempotent tool with a reconciler that looks at the world) →
``finish``. Every node execution and every real charge appends one line to
$PROOF_EFFECTS, a file outside the store; the reconciler reads that file, so a
charge whose outcome a kill left unknown is settled without calling it again.
$PROOF_SLOW (seconds) makes ``charge`` take that long *after* its effect, so a
kill lands between the effect and its durable outcome. $PROOF_HANG_AFTER=N makes
every charge after this process's N-th hang after its effect (the thread's run
keeps its lease), noting it in ``./hanging``: a test kills the process there.

usage: proof_app.py HOME EFFECTS start|resume|decide RUN_ID [ask] [DECISION]
(HOME a directory or a postgresql:// URL; prints the run as JSON).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

import bide
from bide.bench.kit.crashkit import count_effects, record_effect


def effect(line: str) -> None:
    record_effect(os.environ["PROOF_EFFECTS"], line)


def charged(idempotency_key: str, run_id: str) -> bide.Outcome:
    """The reconciler: the charge happened if the world has its line."""
    if count_effects(os.environ["PROOF_EFFECTS"])[f"tool charge {idempotency_key}"]:
        return bide.Outcome.done({"charged": idempotency_key})
    return bide.Outcome.not_done()


_made = itertools.count(1)


@bide.tool(reconcile=charged)
def charge(run_id: str, *, idempotency_key: str) -> dict:
    effect(f"tool charge {idempotency_key}")
    if next(_made) > int(os.environ.get("PROOF_HANG_AFTER", "1000000000")):
        record_effect("hanging", idempotency_key)
        time.sleep(3600)  # until the test kills this process
    time.sleep(float(os.environ.get("PROOF_SLOW", "0")))
    return {"charged": idempotency_key}


flow = bide.Flow("proof")


@flow.node(start=True)
def prep(state, ctx):
    effect(f"node prep {ctx.run_id}")
    return {"prep": True}


@flow.node(after=["prep"])
def pay(state, ctx):
    effect(f"node pay {ctx.run_id}")
    if state.get("ask") and not ctx.approve("pay", payload={"run": ctx.run_id}):
        return {"paid": None}
    return {"paid": ctx.tool(charge, ctx.run_id)["charged"]}


@flow.node(after=["pay"])
def finish(state, ctx):
    effect(f"node finish {ctx.run_id}")
    return {"done": True}


def main(home: str, effects: str, action: str, run_id: str, *rest: str) -> None:
    os.environ["PROOF_EFFECTS"] = effects
    with bide.open(home, durability="durable") as engine:
        engine.register(flow)
        if action == "start":
            run = engine.start("proof", input={"ask": "ask" in rest}, run_id=run_id)
        elif action == "resume":
            run = engine.resume(run_id)
        else:
            engine.decide(engine.get(run_id).waiting["approval_id"], rest[0], by="proof")
            run = engine.resume(run_id)
        print(json.dumps({"status": run.status.value, "state": run.state,
                          "waiting": run.waiting, "intents": engine.intents(run_id)}))


if __name__ == "__main__":
    main(*sys.argv[1:])
