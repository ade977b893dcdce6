"""The incident flow used by approval/watcher tests (``--app incident_app:flow``).

Every node execution and every tool effect is appended to $BIDE_TEST_EFFECTS.
"""

from __future__ import annotations

import os
import time

import bide
from bide.bench.kit.crashkit import record_effect


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if not path:
        return
    record_effect(path, line)


@bide.tool(idempotent=True)
def fetch_logs(query: str, *, idempotency_key: str) -> list[str]:
    effect(f"tool fetch_logs {idempotency_key}")
    return [f"{query}: /var is 100% full"]


@bide.tool
def git_apply(patch: str, *, idempotency_key: str) -> dict:
    effect(f"tool git_apply {idempotency_key}")
    return {"sha": "5e1f"}


flow = bide.Flow("incident")
flow.reducer("logs", bide.append)


@flow.node(start=True)
def search_logs(state, ctx):
    effect(f"node search_logs {ctx.run_id}")
    return {"logs": ctx.tool(fetch_logs, state.get("query", "disk"))}


@flow.node(start=True)
def prepare_patch(state, ctx):
    effect(f"node prepare_patch {ctx.run_id}")
    return {"patch": "p-9"}


@flow.node(after=["search_logs", "prepare_patch"])
def apply_patch(state, ctx):
    effect(f"node apply_patch {ctx.run_id}")
    if float(os.environ.get("BIDE_TEST_SLOW", "0")):
        time.sleep(float(os.environ["BIDE_TEST_SLOW"]))
    if not ctx.approve("apply patch", payload={"patch": state["patch"]}):
        return {"applied": False}
    return {"applied": True, "result": ctx.tool(git_apply, state["patch"])}
