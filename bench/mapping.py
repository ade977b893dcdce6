"""``bide bench map``: what a map of N items costs, against a chain of N steps.

Both produce the same N results (one list item each) with one durable commit
per item at least; the map runs them as N Send tasks of one superstep (at most
``concurrency`` at once, each output a pending write), the chain as N supersteps
of one node (a checkpoint each). Per item: wall time and stored bytes, and the
map's cost as a ratio of the chain's, both measured in the same run. A third
row runs the map with work in each item (a sleep), where bounded concurrency is
what saves the time.

The paused rows run a map whose every item pauses once for an approval, approved
one at a time through the API and resumed after each (N resumes, each running
the approved item alone; the others would only pause again: engine/run/waits.py):
time, bytes and node runs per item at N and 3N items. Later
checkpoints of the map refer to its planned Sends instead of storing them
again, so bytes per item stay flat as N grows.
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


def pausing_flow(runs: list[int] | None = None) -> bide.Flow:
    """``runs``: gets a 1 each time an item's node body starts."""
    flow = bide.Flow("bench-map-paused")

    @flow.node(start=True)
    def plan(state: Any, ctx: Any) -> Any:
        return {"items": list(range(state["n"]))}

    @flow.node()
    def item(state: Any, ctx: Any) -> Any:
        if runs is not None:
            runs.append(1)
        ctx.approve("ship", {"item": state["i"]})
        return {"results": [_result(state["i"])]}

    flow.route("plan", lambda s: [bide.Send("item", {"i": i}) for i in s["items"]])
    flow.reducer("results", bide.append)
    return flow


def paused(home: Path, n: int, durability: str) -> dict[str, Any]:
    """A map of ``n`` items that each pause once, approved and resumed one at a time."""
    runs: list[int] = []
    with bide.open(home, durability=durability) as engine:
        engine.register(pausing_flow(runs))
        t0 = time.perf_counter()
        run = engine.start("bench-map-paused", input={"n": n})
        resumes = 0
        while run.status == bide.Status.WAITING_APPROVAL and resumes <= n:
            engine.decide(run.waiting["approval_id"], bide.Decision.APPROVE, by="bench")
            run = engine.resume(run.run_id)
            resumes += 1
        seconds = time.perf_counter() - t0
        assert run.status == bide.Status.DONE and len(run.state["results"]) == n
        with engine.store.reader() as r:
            entries = list(r.run_entries(run.run_id))
            stored = sum(len(r.raw(seq) or b"") for seq, _ in entries)
    return {"items": n, "durability": durability, "resumes": resumes,
            "ms_per_item": seconds * 1000 / n, "bytes_per_item": stored / n,
            "records_per_item": len(entries) / n, "runs_per_item": len(runs) / n}


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
                     measure(root, n, "durable", repeat, sleep=ITEM_SLEEP)],
            "paused": [paused(root / f"paused-{size}", size, "durable") for size in (n, 3 * n)]}


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
    lines += ["", "Map of N items that each pause once for an approval, approved and resumed "
              "one at a time, per item",
              f"{'items':>6} {'durability':>10} {'resumes':>8} {'ms':>8} {'bytes':>7} "
              f"{'records':>8} {'runs':>6}"]
    for p in out.get("paused", []):
        lines.append(f"{p['items']:>6} {p['durability']:>10} {p['resumes']:>8} "
                     f"{p['ms_per_item']:>8.2f} {p['bytes_per_item']:>7.0f} "
                     f"{p['records_per_item']:>8.1f} {p['runs_per_item']:>6.1f}")
    return "\n".join(lines)
