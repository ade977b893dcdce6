"""A worker for map crash tests: plan -> one charge per item via Send -> summarize.

usage: map_app.py HOME EFFECTS start|resume RUN_ID POLICY_JSON [STORE_URL]
Each item's charge appends "charge <item> <idempotency key>" to EFFECTS, a file
outside the store; the tool reconciles by reading it, so a call whose outcome
was lost is found done, never repeated. The route plans other items each time
it runs (it counts its calls in EFFECTS.plans): a resume that re-planned a map
already under way would mix two plans, which the test would see.
"""

from __future__ import annotations

import json
import sys

import bide
from bide.bench.kit.crashkit import count_effects, record_effect

home, effects, action, run_id, policy_json = sys.argv[1:6]
store_url = sys.argv[6] if len(sys.argv) > 6 else None
ITEMS = 12


def charged(idempotency_key: str, item: str) -> bide.Outcome:
    done = any(line.endswith(" " + idempotency_key) for line in count_effects(effects))
    return bide.Outcome.done(f"charged {item}") if done else bide.Outcome.not_done()


@bide.tool(reconcile=charged)
def charge(item: str, *, idempotency_key: str) -> str:
    record_effect(effects, f"charge {item} {idempotency_key}")
    return f"charged {item}"


flow = bide.Flow("map")


@flow.node(start=True)
def plan(state, ctx):
    return {"planned": True}


@flow.node(concurrency=3)
def work(state, ctx):
    return {"results": [ctx.tool(charge, state["item"])]}


@flow.node(after=["work"])
def summarize(state, ctx):
    return {"total": len(state["results"])}


def route(state):
    record_effect(effects + ".plans", "plan")
    batch = sum(count_effects(effects + ".plans").values()) - 1
    return [bide.Send("work", {"item": f"p{batch}-{i}"}) for i in range(ITEMS)]


flow.route("plan", route)
flow.reducer("results", bide.append)

target = store_url if store_url else home
with bide.open(target, durability="fast", **({"local": home} if store_url else {})) as engine:
    engine.register(flow)
    if action == "start":
        run = engine.start("map", run_id=run_id, policy=bide.Policy(**json.loads(policy_json)))
    else:  # killed after its last commit, the run may be DONE already
        done = engine.get(run_id).status == bide.Status.DONE
        run = engine.get(run_id) if done else engine.resume(run_id)
    print(json.dumps({"status": run.status.value, "state": run.state, "waiting": run.waiting,
                      "error": run.error}))
