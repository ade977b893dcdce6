"""Flows that wait for a person, for the approvals page's browser test
(tests/test_serve_page.py): ``bide serve --app page_app:FLOWS``.

Every effect is one line in $BIDE_TEST_EFFECTS (outside the store), so the test
sees that an approved deploy shipped exactly once.
"""

from __future__ import annotations

import os
import time

import bide
import msgspec
from bide.bench.kit.crashkit import record_effect


class Order(msgspec.Struct):
    """The typed answer the question asks for."""

    cups: int
    item: str = "tea"


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, line)


@bide.tool
def ship(version: str) -> str:
    effect(f"ship {version}")
    return f"shipped {version}"


deploy = bide.Flow("deploy")


@deploy.node(start=True)
def release(state, ctx):
    payload = {"version": state["version"], "note": state.get("note", "")}
    if not ctx.approve(state.get("action", "deploy to production"), payload=payload,
                       expires_in=3600):
        return {"shipped": None}
    return {"shipped": ctx.tool(ship, state["version"])}


barista = bide.Flow("barista")


@barista.node(start=True)
def take_order(state, ctx):
    order = ctx.ask("how many cups?", schema=Order, payload={"menu": ["tea", "coffee"]})
    effect(f"brew {order.item} x{order.cups}")
    return {"cups": order.cups, "item": order.item}


@bide.tool
def charge(amount: int) -> dict:
    effect(f"charge {amount}")
    return {"charged": amount}


pay = bide.Flow("pay")


@pay.node(start=True)
def bill(state, ctx):
    return {"receipt": ctx.tool(charge, state.get("amount", 5))}


busy = bide.Flow("busy")  # commits a step every few ms, for a while: a home never quiet


@busy.node(start=True)
def tick(state, ctx):
    time.sleep(0.03)
    return {"n": state.get("n", 0) + 1}


busy.route("tick", lambda s: "tick" if s["n"] < s["until"] else bide.END)

FLOWS = [deploy, barista, pay, busy]
