"""The flows ``bide serve --app serve_app:flows`` serves in the server process tests.

``shipping`` asks a person before its tool ships; every shipment is one line in
$BIDE_TEST_EFFECTS (outside the store), so a test sees a shipment that happened
twice. $BIDE_TEST_SLOW: seconds between the approval and the shipment.
"""

from __future__ import annotations

import os
import time

import bide
from bide.bench.kit.crashkit import record_effect


@bide.tool
def ship(to: str, *, idempotency_key: str) -> str:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, f"ship {to}")
    return f"shipped to {to}"


shipping = bide.Flow("shipping")


@shipping.node(start=True)
def gate(state, ctx):
    if not ctx.approve("ship", payload={"to": state["to"]}):
        return {"result": "rejected"}
    time.sleep(float(os.environ.get("BIDE_TEST_SLOW", "0")))  # a window to kill the server in
    return {"result": ctx.tool(ship, state["to"])}


flows = [shipping]
