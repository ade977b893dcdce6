"""A worker process for crash tests: fan-out, join, a loop; every execution is counted.

usage: chain_app.py HOME COUNTER start|resume RUN_ID [durability] [policy-json]
Each node appends its name to COUNTER (a file outside the store) before returning.
CHAIN_SIBLING_BOUND (seconds, default 0) is how long a finished sibling's output
waits for the others: 0 commits each output but the last alone, a large bound
holds them all for the checkpoint; either way the commit boundaries are fixed.
"""

from __future__ import annotations

import json
import os
import sys

import bide
import bide.engine.run.tasks
from bide.bench.kit.crashkit import record_effect

home, counter, action, run_id = sys.argv[1:5]
durability = sys.argv[5] if len(sys.argv) > 5 else "fast"
bide.engine.run.tasks.SIBLING_BOUND = float(os.environ.get("CHAIN_SIBLING_BOUND", "0"))
policy = bide.Policy(**json.loads(sys.argv[6])) if len(sys.argv) > 6 else None


def effect(name: str) -> None:
    record_effect(counter, name)


flow = bide.Flow("chain")
flow.reducer("trail", bide.append)


def make(name: str, *, start: bool = False, after: tuple[str, ...] = ()) -> None:
    def node(state, ctx):
        effect(f"{name}@{ctx.superstep}")
        return {"trail": [name], name: state.get("n", 0)}

    flow.node(node, name=name, start=start, after=after)


make("a", start=True)
make("b", start=True)
make("c", start=True)
make("join", after=("a", "b", "c"))


@flow.node(after=("join",))
def loop(state, ctx):
    effect(f"loop@{ctx.superstep}")
    return {"n": state.get("n", 0) + 1, "trail": ["loop"]}


flow.route("loop", lambda s: "loop" if s["n"] < 4 else bide.END)

with bide.open(home, durability=durability) as engine:
    engine.register(flow)
    if action == "start":
        run = engine.start("chain", input={"n": 0}, run_id=run_id, policy=policy)
    elif action == "get":
        run = engine.get(run_id)
    else:
        run = engine.resume(run_id)
    print(json.dumps({"status": run.status.value, "state": run.state}))
