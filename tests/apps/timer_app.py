"""Flows that sleep on durable timers (``ctx.sleep``), for the timer tests.

Every node execution and every effect is one line in $BIDE_TEST_EFFECTS (outside
the store). Run as a worker: ``timer_app.py HOME start RUN SECONDS`` or
``timer_app.py HOME resume RUN``; HOME is a directory or a postgresql:// URL (its
local directory: $TIMER_APP_LOCAL). Prints the run as JSON.
"""

from __future__ import annotations

import json
import os
import sys

import bide
from bide.bench.kit.crashkit import record_effect


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, line)


def pinged(idempotency_key: str, what: str) -> bide.Outcome:
    """Did the ping happen before the worker died? The effects file knows."""
    path = os.environ.get("BIDE_TEST_EFFECTS")
    done = bool(path) and os.path.exists(path) and \
        f"ping {what}" in open(path).read().splitlines()
    return bide.Outcome.done(what) if done else bide.Outcome.not_done()


@bide.tool(reconcile=pinged)
def ping(what: str) -> str:
    effect(f"ping {what}")
    return what


flow = bide.Flow("nap")


@flow.node(start=True)
def nap(state, ctx):
    effect(f"node nap {ctx.run_id}")
    ctx.tool(ping, "before")  # an effect before the sleep: recorded, never repeated
    ctx.sleep(state["seconds"])
    effect(f"woke {ctx.run_id}")
    return {"woke_at": ctx.tool(ping, "after")}


@flow.node(after="nap")
def done(state, ctx):
    effect(f"node done {ctx.run_id}")
    return {"finished": True}


def main(home: str, action: str, run_id: str, *args: str) -> None:
    local = os.environ.get("TIMER_APP_LOCAL") if home.startswith("postgresql://") else None
    with bide.open(home, durability="fast", local=local) as engine:
        engine.register(flow)
        if action == "start":
            run = engine.start("nap", {"seconds": float(args[0])}, run_id=run_id)
        else:  # a run a killed worker finished is shown as it is
            run = engine.get(run_id)
            run = run if run.status == bide.Status.DONE else engine.resume(run_id)
        print(json.dumps({"status": run.status.value, "waiting": run.waiting,
                          "state": run.state if run.status == bide.Status.DONE else None}))


if __name__ == "__main__":
    main(*sys.argv[1:])
