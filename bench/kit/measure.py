"""Measure one (workload, policy): bytes, growth, commits, time, reads, and the floor.

Write amplification comes in two figures: bytes committed (sum of encoded
record sizes, ``Engine.records``) and store growth (LMDB pages used × page
size, before/after), each over the workload's logical bytes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ... import Status
from ...engine.api.runtime import Engine
from ...engine.api.runtime import open as open_home
from ...engine.storage.store import WriteEvent
from . import floor
from .memory import run_in_memory
from .policies import BenchPolicy
from .workloads import Workload, payload

FLUSHES_PER_DURABLE_COMMIT = 2  # LMDB: fdatasync of the data pages, then an O_DSYNC meta write
WARMUP = Workload("linear", 3, 100)


def warmup_flow() -> Any:
    """A tiny flow under its own name: creates the store's tables and warms the code."""
    flow = WARMUP.flow()
    flow.name = "bench-warmup"
    return flow


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@contextmanager
def instrumented(engine: Engine) -> Iterator[dict[str, list[Any]]]:
    """Count write transactions and capture which log seqs each commit wrote."""
    seen: dict[str, list[Any]] = {"writes": [], "groups": []}

    def count(event: WriteEvent) -> None:
        seen["writes"].append(1)  # every write transaction, refused ones included
        if event.kind == "commit" and not event.refused:
            seen["groups"].append(list(event.seqs))

    stop = engine.store.on_commit(count)
    try:
        yield seen
    finally:
        stop()


def baseline_seconds(w: Workload, repeat: int) -> float:
    """Median wall time of the flow with persistence off."""
    flow = w.flow()
    state, steps = run_in_memory(flow, w.initial())
    if steps != w.supersteps or state != w.expected():
        raise AssertionError(f"in-memory run of {w.label} did not produce the expected state")
    return median_time(lambda: run_in_memory(flow, w.initial()), repeat)


def measure(w: Workload, p: BenchPolicy, home: Path, *, repeat: int,
            baseline: float) -> dict[str, Any]:
    """Run ``w`` under ``p`` in a fresh home ``repeat`` times; one row of results."""
    flow = w.flow()
    with open_home(home, durability=p.durability) as engine:
        engine.register(flow, warmup_flow())
        engine.start("bench-warmup", WARMUP.initial(), run_id="warmup", policy=p.policy)
        used0 = engine.store.info()["used_bytes"]
        with instrumented(engine) as seen:
            t0 = time.perf_counter()
            run = engine.start(flow.name, w.initial(), run_id="r-0", policy=p.policy)
            first = time.perf_counter() - t0
        growth = engine.store.info()["used_bytes"] - used0
        if run.status != Status.DONE or run.state != w.expected():
            raise AssertionError(f"{w.label} under {p.name} ended {run.status} with a wrong state")
        times = [first] + [_timed_run(engine, flow.name, w, p, i) for i in range(1, repeat)]
        by_type: dict[str, int] = {}
        for _, rtype, size in engine.records("r-0"):
            by_type[rtype] = by_type.get(rtype, 0) + size
        fulls = [c.bytes for c in engine.checkpoints("r-0") if c.full]
        by_type["checkpoint(full)"] = sum(fulls)
        read = median_time(lambda: engine.state("r-0"), 7 if repeat > 1 else 3)
        with engine.store.reader() as r:
            groups = [[r.raw(s) or b"" for s in g] for g in seen["groups"]]
            warm = [[r.raw(s) or b"" for s, _ in r.run_entries("warmup")]]
    return _row(w, p, times, baseline, by_type, growth, len(seen["writes"]), read, groups, warm)


def _timed_run(engine: Engine, name: str, w: Workload, p: BenchPolicy, i: int) -> float:
    t0 = time.perf_counter()
    engine.start(name, w.initial(), run_id=f"r-{i}", policy=p.policy)
    return time.perf_counter() - t0


def _row(w: Workload, p: BenchPolicy, times: list[float], baseline: float,
         by_type: dict[str, int], growth: int, writes: int, read: float,
         groups: list[list[bytes]], warm: list[list[bytes]]) -> dict[str, Any]:
    durable = p.durability == "durable"
    steps = w.supersteps
    seconds = statistics.median(times)
    fulls = by_type.pop("checkpoint(full)")
    committed = sum(by_type.values())
    same = floor.replay(groups, durable=durable, warmup=warm)
    per_step = [[payload(i, w.payload).encode() for i in range(w.width)]] * steps
    raw = floor.replay(per_step, durable=durable, warmup=warm)
    overhead = seconds - baseline
    return {
        "workload": w.kind, "spec": w.spec, "label": w.label, "size": w.size,
        "payload": w.payload, "supersteps": steps, "tasks": w.tasks,
        "policy": p.name, "durability": p.durability, "policy_options": p.policy.to_dict(),
        "logical_bytes": w.logical_bytes,
        "bytes_committed": committed, "bytes_by_type": by_type, "bytes_full_checkpoints": fulls,
        "wa_committed": committed / w.logical_bytes,
        "store_growth": growth, "wa_growth": growth / w.logical_bytes,
        "commits": writes, "commits_per_superstep": writes / steps,
        "flushes_per_superstep": writes * (FLUSHES_PER_DURABLE_COMMIT if durable else 0) / steps,
        "ms_per_superstep": 1000 * seconds / steps,
        "baseline_ms_per_superstep": 1000 * baseline / steps,
        "overhead_ms_per_superstep": 1000 * overhead / steps,
        "overhead_ratio": seconds / baseline if baseline > 0 else None,
        "read_latest_ms": 1000 * read,
        "floor_ms_per_superstep": 1000 * same.seconds / steps,
        "floor_commits": same.commits,
        "overhead_vs_floor": overhead / same.seconds if same.seconds > 0 else None,
        "floor_growth": same.growth,
        "growth_vs_floor": growth / same.growth if same.growth else None,
        "payload_floor_growth": raw.growth,
        "payload_floor_wa": raw.growth / w.logical_bytes,
        "growth_vs_payload_floor": growth / raw.growth if raw.growth else None,
    }
