"""A worker for async-tool crash tests: an async node awaiting one async tool.

usage: async_tool_app.py HOME EFFECTS KIND API start|resume|decide RUN_ID [DECISION]
KIND: plain (not idempotent, no reconciler) | reconciled (an async reconciler).
API: sync (engine.start/resume) | async (await engine.astart/aresume under asyncio.run).
Each real side effect appends "<tool> <idempotency key>" to EFFECTS, outside the store.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import bide
from bide.bench.kit.crashkit import record_effect

home, effects, kind, api, action, run_id = sys.argv[1:7]


async def effect(tool: str, key: str) -> None:
    await asyncio.sleep(0)
    record_effect(effects, f"{tool} {key}")
    if os.environ.get("DIE_IN_TOOL"):
        os.kill(os.getpid(), signal.SIGKILL)  # the effect happened, the call never returns


@bide.tool
async def send_email(to: str, *, idempotency_key: str) -> str:
    await effect("send_email", idempotency_key)
    return f"sent to {to}"


async def was_applied(idempotency_key: str, patch: str) -> bide.Outcome:
    await asyncio.sleep(0)
    done = os.path.exists(effects) and any(
        line.split()[1] == idempotency_key for line in open(effects).read().splitlines())
    return bide.Outcome.done({"sha": "abc"}) if done else bide.Outcome.not_done()


@bide.tool(reconcile=was_applied)
async def git_apply(patch: str, *, idempotency_key: str) -> dict:
    await effect("git_apply", idempotency_key)
    return {"sha": "abc"}


# the tool-outcome policy a crash test chose (tests/test_held_crash.py)
POLICY = bide.Policy(tool_outcomes=os.environ.get("BIDE_TEST_TOOL_OUTCOMES", "at_return"))

flow = bide.Flow("atools")


@flow.node(start=True)
async def act(state, ctx):
    result = await _call(ctx)
    if os.environ.get("SLEEP_AFTER_TOOL"):  # keep working: the outcome is flushed alone
        await asyncio.sleep(float(os.environ["SLEEP_AFTER_TOOL"]))
    if os.environ.get("KILL_AFTER_TOOL"):  # the call returned: the worker dies at once
        os.kill(os.getpid(), 9)
    return result


async def _call(ctx):
    if kind == "plain":
        return {"result": await ctx.atool(send_email, "ops@example.com")}
    return {"result": await ctx.atool(git_apply, "p-9")}


@flow.node(after=["act"])
async def after(state, ctx):
    return {"after": True}


async def advance(engine: bide.Engine) -> bide.Run:
    if action == "start":
        return await engine.astart("atools", run_id=run_id, policy=POLICY)
    if action == "decide":
        await engine.adecide(engine.get(run_id).waiting["approval_id"], sys.argv[7], by="alice")
    run = engine.get(run_id)  # a run that ended in the commit the crash came after is as it is
    return run if run.status == bide.Status.DONE else await engine.aresume(run_id)


with bide.open(home, durability=os.environ.get("BIDE_TEST_DURABILITY", "fast")) as engine:
    engine.register(flow)
    if api == "async":
        run = asyncio.run(advance(engine))
    elif action == "start":
        run = engine.start("atools", run_id=run_id, policy=POLICY)
    else:
        if action == "decide":
            engine.decide(engine.get(run_id).waiting["approval_id"], sys.argv[7], by="alice")
        run = engine.get(run_id)
        run = run if run.status == bide.Status.DONE else engine.resume(run_id)
    print(json.dumps({"status": run.status.value, "state": run.state, "waiting": run.waiting,
                      "error": run.error, "intents": engine.intents(run_id)}))
