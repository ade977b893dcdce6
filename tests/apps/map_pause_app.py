"""A worker for crash tests of a map whose items pause: each item asks, then charges.

usage: map_pause_app.py HOME EFFECTS start|next RUN_ID [STORE_URL]
``start`` runs until the first pause. ``next`` approves the decision the run waits
for (if it waits for one) and resumes it: one step "between two pauses". Each
item's charge appends "charge <item> <idempotency key>" to EFFECTS, outside the
store; the tool reconciles by reading it, so a lost outcome is never repeated.
"""

from __future__ import annotations

import json
import sys

import bide
from bide.bench.kit.crashkit import count_effects, record_effect

home, effects, action, run_id = sys.argv[1:5]
store_url = sys.argv[5] if len(sys.argv) > 5 else None
ITEMS = 3


def charged(idempotency_key: str, item: str) -> bide.Outcome:
    done = any(line.endswith(" " + idempotency_key) for line in count_effects(effects))
    return bide.Outcome.done(f"charged {item}") if done else bide.Outcome.not_done()


@bide.tool(reconcile=charged)
def charge(item: str, *, idempotency_key: str) -> str:
    record_effect(effects, f"charge {item} {idempotency_key}")
    return f"charged {item}"


flow = bide.Flow("paying")


@flow.node(start=True)
def plan(state, ctx):
    return {}


@flow.node(concurrency=2)
def pay(state, ctx):
    if not ctx.approve("pay", {"item": state["item"]}):
        return {"results": [f"refused {state['item']}"]}
    return {"results": [ctx.tool(charge, state["item"])]}


flow.route("plan", lambda s: [bide.Send("pay", {"item": f"i{i}"}) for i in range(ITEMS)])
flow.reducer("results", bide.append)

target = store_url if store_url else home
with bide.open(target, durability="fast", **({"local": home} if store_url else {})) as engine:
    engine.register(flow)
    if action == "start":
        run = engine.start("paying", run_id=run_id)
    else:
        run = engine.get(run_id)
        if run.status == bide.Status.WAITING_APPROVAL:  # a no-op if already approved
            engine.decide(run.waiting["approval_id"], bide.Decision.APPROVE, by="ops")
        if run.status != bide.Status.DONE:
            run = engine.resume(run_id)
    print(json.dumps({"status": run.status.value, "state": run.state, "waiting": run.waiting}))
