"""``bide bench map``: what a map of N items costs, against a chain of N steps.

Both produce the same N results (one list item each) with one durable commit
per item at least; the map runs them as N Send tasks of one superstep (at most
``concurrency`` at once, each output a pending write), the chain as N supersteps
of one node (a checkpoint each). Per item: wall time and stored bytes, and the
map's cost as a ratio of the chain's, both measured in the same run. A third
row runs the map with work in each item (a sleep), where bounded concurrency is
what saves the time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import bide

ITEMS = 100
ITEM_SLEEP = 0.005  # seconds of "work" per item in the row that shows concurrency


def map_flow(sleep: float = 0.0) -> bide.Flow:
    flow = bide.Flow("bench-map")

    @flow.node(start=True)
    def plan(state: Any, ctx: Any) -> Any:
        return {"items": list(range(state["n"]))}

    @flow.node()
    def item(state: Any, ctx: Any) -> Any:
        if sleep:
            time.sleep(sleep)
        return {"results": [_result(state["i"])]}

    @flow.node(after=["item"])
    def gather(state: Any, ctx: Any) -> Any:
        return {"total": len(state["results"])}

    flow.route("plan", lambda s: [bide.Send("item", {"i": i}) for i in s["items"]])
    flow.reducer("results", bide.append)
    return flow


def chain_flow(sleep: float = 0.0) -> bide.Flow:
    flow = bide.Flow("bench-chain")

    @flow.node(start=True)
    def step(state: Any, ctx: Any) -> Any:
        if sleep:
            time.sleep(sleep)
        i = state.get("i", 0)
        return {"i": i + 1, "results": [_result(i)]}

    flow.route("step", lambda s: "step" if s["i"] < s["n"] else bide.END)
    flow.reducer("results", bide.append)
    return flow


def _result(i: int) -> dict[str, Any]:
    return {"item": i, "text": f"result of item {i:06d}"}


def _one(home: Path, flow: bide.Flow, n: int, durability: str) -> dict[str, float]:
    with bide.open(home, durability=durability) as engine:
        engine.register(flow)
        t0 = time.perf_counter()
        run = engine.start(flow.name, input={"n": n})
        seconds = time.perf_counter() - t0
        assert run.status == bide.Status.DONE and len(run.state["results"]) == n
        with engine.store.reader() as r:
            entries = list(r.run_entries(run.run_id))
            stored = sum(len(r.raw(seq) or b"") for seq, _ in entries)
    return {"ms_per_item": seconds * 1000 / n, "bytes_per_item": stored / n,
            "records_per_item": len(entries) / n}


def measure(root: Path, n: int, durability: str, repeat: int, sleep: float = 0.0
            ) -> dict[str, Any]:
    """Map and chain of ``n`` items, alternated ``repeat`` times; medians and ratios."""
    rows: dict[str, list[dict[str, float]]] = {"map": [], "chain": []}
    for k in range(repeat):
        for name, flow in (("map", map_flow(sleep)), ("chain", chain_flow(sleep))):
            rows[name].append(_one(root / f"{name}-{sleep}-{durability}-{k}", flow, n,
                                   durability))
    med = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
           for name, runs in rows.items()}
    return {"items": n, "durability": durability, "item_sleep_ms": sleep * 1000,
            "map": med["map"], "chain": med["chain"],
            "time_ratio": med["map"]["ms_per_item"] / med["chain"]["ms_per_item"],
            "bytes_ratio": med["map"]["bytes_per_item"] / med["chain"]["bytes_per_item"]}


def run(*, quick: bool = False, home: Path | None = None) -> dict[str, Any]:
    """Every row: durable and fast with no work per item, and durable with work per item."""
    n, repeat = (20, 1) if quick else (ITEMS, 3)
    root = Path(home) if home is not None else Path(tempfile.mkdtemp(prefix="bide-bench-map-"))
    return {"rows": [measure(root, n, "durable", repeat), measure(root, n, "fast", repeat),
                     measure(root, n, "durable", repeat, sleep=ITEM_SLEEP)]}


def render(out: dict[str, Any]) -> str:
    lines = ["Map of N items (bide.Send, 8 at once) against a chain of N steps, per item",
             f"{'items':>6} {'durability':>10} {'work ms':>8} {'map ms':>8} {'chain ms':>9} "
             f"{'time x':>7} {'map B':>7} {'chain B':>8} {'bytes x':>8}"]
    for r in out["rows"]:
        m, c = r["map"], r["chain"]
        lines.append(f"{r['items']:>6} {r['durability']:>10} {r['item_sleep_ms']:>8.1f} "
                     f"{m['ms_per_item']:>8.2f} {c['ms_per_item']:>9.2f} {r['time_ratio']:>7.2f} "
                     f"{m['bytes_per_item']:>7.0f} {c['bytes_per_item']:>8.0f} "
                     f"{r['bytes_ratio']:>8.2f}")
    return "\n".join(lines)
