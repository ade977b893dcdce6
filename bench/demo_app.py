"""The incident flow that ``bide demo`` runs (also ``--app bide.bench.demo_app:flow``).

Side effects are appended to the file named by ``$BIDE_DEMO_EFFECTS`` (the demo
sets ``<home>/demo-effects/<run>.log``), outside the store, so the demo can prove
from the world what ran once and what ran again.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import bide


def _effects() -> Path:
    return Path(os.environ.get("BIDE_DEMO_EFFECTS", "demo-effects.log"))


def effect(line: str) -> None:
    fd = os.open(_effects(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def applied(key: str) -> bool:
    path = _effects()
    return path.exists() and f"git_apply {key}" in path.read_text().splitlines()


@bide.tool(idempotent=True)
def fetch_logs(query: str, *, idempotency_key: str) -> list[str]:
    effect(f"fetch_logs {idempotency_key}")
    return [f"{query}: /var at 100%", "nginx: write failed (ENOSPC)"]


@bide.tool(idempotent=True)
def draft_patch(issue: str, *, idempotency_key: str) -> str:
    effect(f"draft_patch {idempotency_key}")
    return "p-9: rotate and compress /var/log/nginx"


def was_applied(idempotency_key: str, patch: str) -> bide.Outcome:
    """Ask the world (here: the effects file) whether the patch went in."""
    return bide.Outcome.done({"sha": "5e1f0c2"}) if applied(idempotency_key) else \
        bide.Outcome.not_done()


@bide.tool(reconcile=was_applied)
def git_apply(patch: str, *, idempotency_key: str) -> dict:
    effect(f"git_apply {idempotency_key}")
    return {"sha": "5e1f0c2"}


flow = bide.Flow("incident")
flow.reducer("logs", bide.append)


@flow.node(start=True)
def search_logs(state, ctx):
    effect("node search_logs")
    return {"logs": ctx.tool(fetch_logs, state["query"])}


@flow.node(start=True)
def prepare_patch(state, ctx):
    effect("node prepare_patch")
    patch = ctx.tool(draft_patch, state["query"])
    # Reviewing the draft is slow (an LLM call): search_logs's output does not wait for
    # it (siblings wait only 20 ms to share a commit) and is committed on its own.
    time.sleep(0.5)
    return {"patch": patch}


@flow.node(after=["search_logs", "prepare_patch"])
def apply_patch(state, ctx):
    effect("node apply_patch")
    if not ctx.approve("apply patch", payload={"patch": state["patch"]}):
        return {"applied": False}
    return {"applied": True, "commit": ctx.tool(git_apply, state["patch"])}


if __name__ == "__main__":  # python -m bide.bench.demo_app HOME start|resume RUN_ID
    home, action, run_id = sys.argv[1:4]
    effects = Path(home) / "demo-effects" / f"{run_id}.log"
    if "BIDE_DEMO_EFFECTS" not in os.environ:
        effects.parent.mkdir(parents=True, exist_ok=True)
        os.environ["BIDE_DEMO_EFFECTS"] = str(effects)
    with bide.open(home) as engine:
        engine.register(flow)
        if action == "start":
            engine.start("incident", input={"query": "disk full"}, run_id=run_id)
        else:
            engine.resume(run_id)
