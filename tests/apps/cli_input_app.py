"""What ``--app`` may and may not name, and a flow whose state holds non-finite floats.

Importable as ``cli_input_app`` with ``tests/apps`` on ``sys.path`` (tests/test_cli_input.py).
"""

from __future__ import annotations

import bide

CALLS: list[str] = []  # what --app called: it must stay empty


def effect() -> list[bide.Flow]:
    """Looks like an app factory; calling it is a side effect the user did not ask for."""
    CALLS.append("effect")
    return [odd]


class Factory:
    def __call__(self) -> list[bide.Flow]:
        CALLS.append("Factory()")
        return [odd]


NUMBER = 42
MIXED = [bide.Flow("lonely"), "not a flow"]
EMPTY: list[bide.Flow] = []

NAN, INF = float("nan"), float("inf")


@bide.tool
def measure(sample: str) -> dict:
    return {"sample": sample, "ratio": NAN, "ceiling": INF}


odd = bide.Flow("odd")


@odd.node(start=True)
def compute(state, ctx):
    return {"nan": NAN, "inf": INF, "ninf": -INF, "deep": {"xs": [NAN, 1.5, -INF]},
            "reading": ctx.tool(measure, "s-1")}


@odd.node(after="compute")
def confirm(state, ctx):
    return {"ok": ctx.approve("accept readings", {"limit": INF, "seen": [NAN]})}


FLOWS = (odd,)

factory = Factory()  # a callable instance: calling it would be a side effect too
