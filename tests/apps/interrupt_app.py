"""A worker for Ctrl-C tests: a run whose node is interrupted by SIGINT while it works.

usage: interrupt_app.py HOME EFFECTS MODE start|resume RUN_ID
MODE: single (one node runs in the main thread) | parallel (two nodes in threads) |
async (an async node) | astart (an async node under asyncio.run(engine.astart(...))).
The tool ``send`` appends a line to EFFECTS, outside the store.
``start`` writes EFFECTS.ready when the slow node runs, prints the run after
KeyboardInterrupt, then waits for a line on stdin before exiting, so the test can
resume the run from another process while this one (and its lease) still lives.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import bide

home, effects, mode, action, run_id = sys.argv[1:6]


@bide.tool
def send(text: str, *, idempotency_key: str) -> str:
    with open(effects, "a") as fh:
        fh.write(f"send {idempotency_key}\n")
    return f"sent {text}"


def slow_part() -> None:
    if action == "start":
        open(effects + ".ready", "w").close()
        deadline = time.monotonic() + (1.5 if mode == "parallel" else 30)
        while time.monotonic() < deadline:
            time.sleep(0.05)


flow = bide.Flow("ctrlc")


@flow.node(start=True)
def act(state, ctx):
    return {"sent": ctx.tool(send, "once")}


if mode in ("async", "astart"):
    @flow.node(after=["act"])
    async def slow(state, ctx):
        if action == "start":
            open(effects + ".ready", "w").close()
            await asyncio.sleep(30)
        return {"slow": True}
else:
    @flow.node(after=["act"])
    def slow(state, ctx):
        slow_part()
        return {"slow": True}

if mode == "parallel":
    @flow.node(after=["act"])
    def also_slow(state, ctx):
        slow_part()
        return {"also": True}


def report(engine: bide.Engine) -> None:
    run = engine.get(run_id)
    print(json.dumps({"status": run.status.value, "state": run.state, "reason": run.reason,
                      "lease_owner": run.head.lease_owner}), flush=True)


with bide.open(home, durability="fast", lease_ttl=60) as engine:
    engine.register(flow)
    if action == "start":
        try:
            if mode == "astart":
                asyncio.run(engine.astart("ctrlc", run_id=run_id))
            else:
                engine.start("ctrlc", run_id=run_id)
        except KeyboardInterrupt:
            report(engine)
            sys.stdin.readline()  # stay alive (the lease owner) until the test is done
            sys.exit(130)
        print(json.dumps({"error": "not interrupted"}), flush=True)
        sys.exit(1)
    engine.resume(run_id)
    report(engine)
