"""What a child run costs: a map of N items whose each item starts a child run
(``ctx.child``), against the same map doing the same work in the item itself, in one
run on one LMDB home each (durability fast, no watcher: the children run in the
caller's worker). Prints the time and records per item of each, and their ratio.

    python -m bide.bench.children [N]
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Any

import bide

kid = bide.Flow("bench-kid")


@kid.node(start=True)
def work(state: Any, ctx: Any) -> Any:
    return {"v": state["n"] * 2}


def parent(via_child: bool, n: int) -> bide.Flow:
    flow = bide.Flow("bench-parent")

    @flow.node(start=True)
    def plan(state: Any, ctx: Any) -> Any:
        return {}

    @flow.node()
    def one(state: Any, ctx: Any) -> Any:
        if via_child:
            return {"vs": [ctx.child("bench-kid", {"n": state["n"]})["v"]]}
        return {"vs": [state["n"] * 2]}

    @flow.node(after=["one"])
    def total(state: Any, ctx: Any) -> Any:
        return {"total": sum(state["vs"])}

    flow.route("plan", lambda s: [bide.Send("one", {"n": i}) for i in range(n)])
    flow.reducer("vs", bide.append)
    return flow


def measure(via_child: bool, n: int) -> tuple[float, int]:
    """Seconds for the whole run, and records written (the parent's and its children's)."""
    with tempfile.TemporaryDirectory() as home, bide.open(home, durability="fast") as eng:
        eng.register(kid, parent(via_child, n))
        t0 = time.perf_counter()
        run = eng.start("bench-parent", run_id="p")
        took = time.perf_counter() - t0
        assert run.status == bide.Status.DONE and run.state["total"] == n * (n - 1)
        records = sum(1 for r in eng.runs() for _ in eng.records(r.run_id))
    return took, records


def main(n: int = 100) -> None:
    plain, child = measure(False, n), measure(True, n)
    for name, (took, records) in (("plain Send items", plain), ("a child run each", child)):
        print(f"{name:17} N={n}: {took * 1000:7.1f} ms  {took / n * 1000:5.2f} ms/item  "
              f"{records / n:5.1f} records/item")
    print(f"ratio: {child[0] / plain[0]:.1f}x the time of the plain map")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
