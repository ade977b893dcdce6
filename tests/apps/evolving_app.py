"""Two deployments of one flow: ``OLD`` has node ``legacy``, ``NEW`` renamed it.

Both serve the flow ``count`` too, so a watcher has healthy runs beside the broken one.
"""

from __future__ import annotations

import bide


def _count() -> bide.Flow:
    flow = bide.Flow("count")

    @flow.node(start=True)
    def tick(state, ctx):
        return {"n": state.get("n", 0) + 1}

    flow.route("tick", lambda s: "tick" if s["n"] < 3 else bide.END)
    return flow


def _evolve(node: str) -> bide.Flow:
    flow = bide.Flow("evolve")
    flow.node(lambda state, ctx: {"done_by": node}, name=node, start=True)
    return flow


OLD = [_evolve("legacy"), _count()]
NEW = [_evolve("renamed"), _count()]
