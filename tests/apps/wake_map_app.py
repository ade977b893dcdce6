"""A map of three items that each pause for approval, for ``bide watch --app wake_map_app:flow``.

Each item's node body appends "start <item>" to $BIDE_TEST_EFFECTS when it starts and
"ship <item>" once approved: counters outside the store.
"""

from __future__ import annotations

import os

import bide
from bide.bench.kit.crashkit import record_effect

ITEMS = 3
flow = bide.Flow("wake_map")


def effect(line: str) -> None:
    record_effect(os.environ["BIDE_TEST_EFFECTS"], line)


@flow.node(start=True)
def plan(state, ctx):
    return {}


@flow.node()
def item(state, ctx):
    i = state["i"]
    effect(f"start {i}")
    ctx.approve("ship", {"item": i})
    effect(f"ship {i}")
    return {"shipped": [i]}


flow.route("plan", lambda s: [bide.Send("item", {"i": i}) for i in range(ITEMS)])
flow.reducer("shipped", bide.append)
