"""LangGraph on the same workloads: SqliteSaver (sync, async, exit) and DeltaChannel.

Only when ``langgraph`` and ``langgraph-checkpoint-sqlite`` import (the
``compare`` extra). The graphs mirror ``workloads``: same nodes, same payloads,
``operator.add`` (or ``DeltaChannel``) for the list and the counter.
Bytes committed = the blob columns SqliteSaver inserted (checkpoint, metadata,
write values); store growth = the SQLite file after a WAL checkpoint.
"""

from __future__ import annotations

import importlib
import operator
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from .kit.workloads import WIDTH, Workload, payload

SAVERS = ("sqlite-sync", "sqlite-async", "sqlite-exit", "delta-sync")
BIDE_VARIANTS = ("bide-saver-sync", "bide-saver-fast-sync")
# Where bide's own LangGraph saver lives (the old engine path is deprecated).
BIDE_SAVER_MODULES = ("bide.langgraph",)


def available() -> str | None:
    """None if the peers can run, else why not."""
    try:
        importlib.import_module("langgraph.graph")
        importlib.import_module("langgraph.checkpoint.sqlite")
    except ImportError as exc:
        return f"LangGraph peers skipped: {exc.name} is not installed (pip install 'bide[compare]')"
    return None


def _bide_saver() -> Any:
    for name in BIDE_SAVER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        saver = getattr(module, "BideSaver", None)
        if saver is not None:
            return saver
    return None


def variants() -> list[str]:
    names = list(SAVERS)
    try:
        from langgraph.channels import DeltaChannel  # noqa: F401
    except ImportError:
        names.remove("delta-sync")
    if _bide_saver() is not None:
        names.extend(BIDE_VARIANTS)
    return names


def _concat(state: list[Any], writes: Sequence[list[Any]]) -> list[Any]:
    out = list(state)
    for w in writes:
        out.extend(w)
    return out


def _sum(state: int, writes: list[int]) -> int:
    return (state or 0) + sum(writes)


def build(w: Workload, delta: bool) -> Any:
    """The workload as a LangGraph ``StateGraph`` (not compiled)."""
    from langgraph.graph import END, START, StateGraph

    if delta:
        from langgraph.channels import DeltaChannel

        items_t: Any = Annotated[list, DeltaChannel(_concat, snapshot_frequency=100)]
    else:
        items_t = Annotated[list, operator.add]

    # functional form: this module's annotations are strings, LangGraph needs the objects
    S = TypedDict(  # noqa: UP013
        "S", {"items": items_t, "count": Annotated[int, operator.add]})
    g = StateGraph(S)

    def appender(i: int) -> Any:
        item = payload(i, w.payload)
        return lambda state: {"items": [item], "count": 1}

    if w.kind == "linear":
        names = [f"n{i:04d}" for i in range(w.size)]
        for i, n in enumerate(names):
            g.add_node(n, appender(i))
        g.add_edge(START, names[0])
        for a, b in zip(names, names[1:], strict=False):
            g.add_edge(a, b)
        g.add_edge(names[-1], END)
    elif w.kind == "fanout4":
        layers = [[f"f{layer:04d}_{j}" for j in range(WIDTH)] for layer in range(w.size)]
        for layer, names in enumerate(layers):
            for j, n in enumerate(names):
                g.add_node(n, appender(layer * WIDTH + j))
                g.add_edge(START if layer == 0 else layers[layer - 1], n)
        for n in layers[-1]:
            g.add_edge(n, END)
    elif w.kind == "long":
        size, k = w.payload, w.size
        g.add_node("step", lambda state: {"items": [payload(state["count"], size)], "count": 1})
        g.add_edge(START, "step")
        g.add_conditional_edges("step", lambda state: END if state["count"] >= k else "step")
    else:
        raise ValueError(f"no LangGraph twin for workload {w.kind!r}")
    return g


def _config(w: Workload, thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": w.supersteps + 20}


def _expected(w: Workload) -> dict[str, Any]:
    return w.expected()


def baseline_seconds(w: Workload, repeat: int) -> float:
    graph = build(w, delta=False).compile()
    out = graph.invoke(w.initial(), _config(w, "t"))
    if dict(out) != _expected(w):
        raise AssertionError(f"LangGraph twin of {w.label} produced a wrong state")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        graph.invoke(w.initial(), _config(w, "t"))
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def measure(w: Workload, variant: str, *, repeat: int, baseline: float,
            directory: str | None = None) -> dict[str, Any]:
    """One LangGraph run of ``w`` with ``variant``; one row of results."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    durability = {"sqlite-async": "async", "sqlite-exit": "exit"}.get(variant, "sync")
    graph_def = build(w, delta=variant == "delta-sync")
    times = []
    with tempfile.TemporaryDirectory(dir=directory, prefix="bide-lg-") as d:
        path = Path(d) / "lg.sqlite"
        conn = sqlite3.connect(path, check_same_thread=False)
        if variant in BIDE_VARIANTS:
            saver = _bide_saver()(Path(d) / "bide", durability="fast" if "fast" in variant
                                  else "durable")
            sizes = lambda: _bide_sizes(saver)  # noqa: E731
        else:
            saver = SqliteSaver(conn)
            sizes = lambda: _sizes(conn, path)  # noqa: E731
        graph = graph_def.compile(checkpointer=saver)
        graph.invoke({"items": [], "count": 0}, _config(w, "warmup"), durability="exit")
        stored0, growth0 = sizes()
        for i in range(max(repeat, 1)):
            t0 = time.perf_counter()
            out = graph.invoke(w.initial(), _config(w, f"t{i}"), durability=durability)
            times.append(time.perf_counter() - t0)
            if i == 0:
                stored1, growth1 = sizes()
        if dict(out) != _expected(w):
            raise AssertionError(f"LangGraph {variant} run of {w.label} produced a wrong state")
        cfg = _config(w, "t0")
        graph.get_state(cfg)
        t0 = time.perf_counter()
        reads = 5
        for _ in range(reads):
            state = graph.get_state(cfg)
        read = (time.perf_counter() - t0) / reads
        state_ok = state.values == _expected(w)
        conn.close()
        if variant in BIDE_VARIANTS:
            saver.close()
    seconds = sorted(times)[len(times) // 2]
    steps = w.supersteps
    committed, growth = stored1 - stored0, growth1 - growth0
    return {
        "workload": w.kind, "spec": w.spec, "label": w.label, "peer": f"langgraph {variant}",
        "variant": variant, "supersteps": steps, "logical_bytes": w.logical_bytes,
        "bytes_committed": committed, "wa_committed": committed / w.logical_bytes,
        "store_growth": growth, "wa_growth": growth / w.logical_bytes,
        "ms_per_superstep": 1000 * seconds / steps,
        "baseline_ms_per_superstep": 1000 * baseline / steps,
        "overhead_ms_per_superstep": 1000 * (seconds - baseline) / steps,
        "overhead_ratio": seconds / baseline if baseline > 0 else None,
        "read_latest_ms": 1000 * read, "state_ok": bool(state_ok),
    }


def _bide_sizes(saver: Any) -> tuple[int, int]:
    """(bytes in the bide log, LMDB pages used × page size) under a BideSaver."""
    store = saver._shared.store
    with store.reader() as r:
        logged = sum(len(raw) for _, raw in r.log())
    return logged, store.info()["used_bytes"]


def _sizes(conn: sqlite3.Connection, path: Path) -> tuple[int, int]:
    """(blob bytes SqliteSaver stored so far, database file bytes after a WAL checkpoint)."""
    try:
        blobs = conn.execute(
            "select coalesce(sum(length(checkpoint) + length(metadata)), 0) from checkpoints"
        ).fetchone()[0] + conn.execute(
            "select coalesce(sum(length(value)), 0) from writes").fetchone()[0]
    except sqlite3.OperationalError:  # another saver: no such tables
        blobs = 0
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(blobs), int(pages * size)
