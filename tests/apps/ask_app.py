"""A flow that asks a person for typed values (``ctx.ask``), for the ask tests.

Every node execution and every effect is one line in $BIDE_TEST_EFFECTS (outside
the store). Run as a worker: ``ask_app.py HOME ACTION [ARGS]`` with ACTION one of
``start RUN``, ``resume RUN``, ``answer RUN VALUE_JSON`` (records the answer to
what the run waits for), ``inbox`` (processes the inbox once, as a watcher does).
HOME is a directory or a postgresql:// URL (its local directory: $ASK_APP_LOCAL).
Prints the run (or the files) as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Literal

import bide
import msgspec
from bide.bench.kit.crashkit import record_effect


class Order(msgspec.Struct):
    """The typed answer: msgspec gives the node this, not a dict."""

    item: Literal["tea", "coffee"]
    cups: int


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, line)


def brewed(idempotency_key: str, item: str, cups: int) -> bide.Outcome:
    """Did a brew happen before the worker died? The effects file knows."""
    path = os.environ.get("BIDE_TEST_EFFECTS")
    done = bool(path) and os.path.exists(path) and \
        f"brew {item} x{cups}" in open(path).read().splitlines()
    return bide.Outcome.done(f"{cups} {item}") if done else bide.Outcome.not_done()


@bide.tool(reconcile=brewed)
def brew(item: str, cups: int, *, idempotency_key: str) -> str:
    effect(f"brew {item} x{cups}")
    return f"{cups} {item}"


flow = bide.Flow("barista")


@flow.node(start=True)
def take_order(state, ctx):
    effect(f"node take_order {ctx.run_id}")
    order = ctx.ask("what to brew?", schema=Order, payload={"menu": ["tea", "coffee"]})
    assert isinstance(order, Order), type(order)
    effect(f"answered {order.item} x{order.cups}")
    name = ctx.ask("for whom?", schema=str)
    return {"order": msgspec.to_builtins(order), "for": name,
            "brewed": ctx.tool(brew, order.item, order.cups)}


def main(home: str, action: str, *args: str) -> None:
    local = os.environ.get("ASK_APP_LOCAL") if home.startswith("postgresql://") else None
    with bide.open(home, durability="fast", local=local) as engine:
        engine.register(flow)
        if action == "inbox":
            from bide.engine.human.inbox import Inbox

            results = Inbox(engine).process()
            print(json.dumps([{"name": r.name, "accepted": r.accepted, "reason": r.reason}
                              for r in results]))
            return
        run_id = args[0]
        if action == "start":
            run = engine.start("barista", run_id=run_id)
        elif action == "resume":  # a run a killed worker finished is shown as it is
            run = engine.get(run_id)
            run = run if run.status == bide.Status.DONE else engine.resume(run_id)
        else:
            engine.answer(engine.get(run_id).waiting["approval_id"], json.loads(args[1]),
                          by="ann")
            run = engine.get(run_id)
        print(json.dumps({"status": run.status.value, "waiting": run.waiting,
                          "state": run.state if run.status == bide.Status.DONE else None}))


if __name__ == "__main__":
    main(*sys.argv[1:])
