"""A worker for intent-log crash tests: one node making one call of one kind of tool.

usage: tool_app.py HOME EFFECTS KIND start|resume|decide RUN_ID [DECISION [RESULT-JSON]]
KIND: plain | idempotent | reconciled. Each real side effect appends
"<tool> <idempotency key>" to EFFECTS, a file outside the store.
"""

from __future__ import annotations

import json
import os
import sys
import time

import bide
from bide.bench.kit.crashkit import record_effect

home, effects, kind, action, run_id = sys.argv[1:6]


def effect(tool: str, key: str) -> None:
    record_effect(effects, f"{tool} {key}")
    if os.environ.get("DIE_IN_TOOL"):
        os.kill(os.getpid(), 9)  # "during the call": the effect happened, the call never returns


def happened(key: str) -> bool:
    if not os.path.exists(effects):
        return False
    return any(line.split()[1] == key for line in open(effects).read().splitlines())


@bide.tool
def send_email(to: str, body: str, *, idempotency_key: str) -> str:
    effect("send_email", idempotency_key)
    return f"sent to {to}"


@bide.tool(idempotent=True)
def create_ticket(title: str, *, idempotency_key: str) -> dict:
    effect("create_ticket", idempotency_key)
    return {"ticket": "T-1", "title": title}


def was_applied(idempotency_key: str, patch: str) -> bide.Outcome:
    return bide.Outcome.done({"sha": "abc"}) if happened(idempotency_key) else \
        bide.Outcome.not_done()


@bide.tool(reconcile=was_applied, name="git_apply")
def git_apply(patch: str, *, idempotency_key: str) -> dict:
    effect("git_apply", idempotency_key)
    return {"sha": "abc"}


CALLS = {
    "plain": lambda ctx: ctx.tool(send_email, "ops@example.com", body="disk full"),
    "idempotent": lambda ctx: ctx.tool(create_ticket, "disk full"),
    "reconciled": lambda ctx: ctx.tool(git_apply, "p-9"),
}

# the tool-outcome policy a crash test chose (tests/test_held_crash.py)
POLICY = bide.Policy(tool_outcomes=os.environ.get("BIDE_TEST_TOOL_OUTCOMES", "at_return"))

flow = bide.Flow("tools")


@flow.node(start=True)
def act(state, ctx):
    result = CALLS[kind](ctx)
    if os.environ.get("SLEEP_AFTER_TOOL"):  # keep working: the outcome is flushed alone
        time.sleep(float(os.environ["SLEEP_AFTER_TOOL"]))
    if os.environ.get("KILL_AFTER_TOOL"):  # the call returned: the worker dies at once
        os.kill(os.getpid(), 9)
    return {"result": result}


@flow.node(after=["act"])
def after(state, ctx):
    return {"after": True}


with bide.open(home, durability=os.environ.get("BIDE_TEST_DURABILITY", "fast")) as engine:
    engine.register(flow)
    if action == "start":
        run = engine.start("tools", run_id=run_id, policy=POLICY)
    elif action == "resume":  # a run that ended in the commit the crash came after is as it is
        run = engine.get(run_id)
        run = run if run.status == bide.Status.DONE else engine.resume(run_id)
    else:
        decision = sys.argv[6]
        result = json.loads(sys.argv[7]) if len(sys.argv) > 7 else None
        engine.decide(engine.get(run_id).waiting["approval_id"], decision, by="alice",
                      reason="checked by hand", result=result)
        run = engine.resume(run_id)
    print(json.dumps({"status": run.status.value, "state": run.state, "waiting": run.waiting,
                      "error": run.error, "intents": engine.intents(run_id)}))
