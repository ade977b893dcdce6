"""Flows for the PostgreSQL wake-up tests (``--app wake_app:flows``).

Every node execution and tool effect is appended to $BIDE_TEST_EFFECTS;
``ship`` hangs in a process started with $BIDE_TEST_HANG (the worker to kill).
"""

from __future__ import annotations

import os
import time

import bide
from bide.bench.kit.crashkit import record_effect


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, line)


@bide.tool
def charge(amount: int, *, idempotency_key: str) -> dict:
    effect(f"tool charge {idempotency_key}")
    return {"charged": amount}


job = bide.Flow("job")


@job.node(start=True)
def pay(state, ctx):
    effect(f"node pay {ctx.run_id}")
    return {"paid": ctx.tool(charge, 5)}


@job.node(after=["pay"])
def ship(state, ctx):
    effect(f"node ship {ctx.run_id} {os.getpid()}")
    if os.environ.get("BIDE_TEST_HANG"):
        time.sleep(300)  # killed in here; the test's deadline is far shorter
    return {"shipped": True}


ask = bide.Flow("ask")


@ask.node(start=True)
def asking(state, ctx):
    ok = ctx.approve("go")
    effect(f"resumed {ctx.run_id}")
    return {"ok": ok}


flows = [job, ask]
