"""A map over 1,000 items: stored bytes and memory grow linearly with the items."""

from __future__ import annotations

import tracemalloc

import bide


def scale_flow() -> bide.Flow:
    flow = bide.Flow("scale")

    @flow.node(start=True)
    def plan(state, ctx):
        return {"items": list(range(state["n"]))}

    @flow.node()
    def work(state, ctx):
        return {"results": [{"item": state["i"], "text": f"result of item {state['i']:06d}"}]}

    @flow.node(after=["work"])
    def count(state, ctx):
        return {"total": len(state["results"])}

    flow.route("plan", lambda s: [bide.Send("work", {"i": i}) for i in s["items"]])
    flow.reducer("results", bide.append)
    return flow


def stored_bytes(engine, run_id: str) -> int:
    with engine.store.reader() as r:
        return sum(len(r.raw(seq) or b"") for seq, _ in r.run_entries(run_id))


def measure(engine, n: int) -> tuple[int, int]:
    tracemalloc.start()
    try:
        run = engine.start("scale", input={"n": n}, run_id=f"r-{n}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert run.status == bide.Status.DONE and run.state["total"] == n
    assert [r["item"] for r in run.state["results"]] == list(range(n))
    return stored_bytes(engine, f"r-{n}"), peak


def test_bytes_and_memory_of_a_map_are_linear_in_its_items(engine):
    engine.register(scale_flow())
    measure(engine, 10)  # warm up imports and caches before measuring memory
    small_bytes, small_peak = measure(engine, 100)
    big_bytes, big_peak = measure(engine, 1000)
    bytes_ratio, peak_ratio = big_bytes / small_bytes, big_peak / small_peak
    # linear: 10x the items, about 10x the bytes (quadratic would be ~100x)
    print(f"map bytes 100 -> 1000 items: {small_bytes} -> {big_bytes} ({bytes_ratio:.1f}x); "
          f"peak memory {small_peak} -> {big_peak} ({peak_ratio:.1f}x)")
    assert 8 <= bytes_ratio <= 12, (small_bytes, big_bytes)
    assert peak_ratio <= 15, (small_peak, big_peak)
