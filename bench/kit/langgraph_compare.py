"""Bytes stored and time per step of LangGraph checkpointers, measured in one run.

    python -m bide.bench.kit.langgraph_compare [--steps 100] [--kb 1] [--repeat 5]

The graph: one node that loops ``--steps`` times, each step appending ``--kb``
KB to a list channel (``operator.add``), invoked with ``durability="sync"`` (each
checkpoint is stored before the next step runs). Savers: ``BideSaver`` (durable
and fast), ``SqliteSaver`` (langgraph-checkpoint-sqlite: a file in WAL mode,
synchronous=FULL) and ``LMDBSaver`` (langgraph-checkpoint-lmdb), the last two only
if importable. Every store is durable (fsync per commit) except ``BideSaver fast``.

Reported per saver (median of ``--repeat`` fresh runs):

- ``file B/step``: what the store occupies on disk after the run, / steps. LMDB:
  pages in use; SQLite: the database file after a WAL checkpoint.
- ``data B/step``: the bytes of the stored values themselves (records, rows).
- ``written B/step``: bytes this process wrote to files during the run
  (``/proc/self/io`` wchar; page and journal overhead included; Linux only).
- ``ms/step``: wall time of the invoke / steps (the graph alone: "no saver").
  Savers take turns, run by run, so a noisy moment on the machine hits all alike.

Needs ``pip install bide[langgraph]``; add ``langgraph-checkpoint-sqlite`` and
``langgraph-checkpoint-lmdb`` for the peers.
"""

from __future__ import annotations

import argparse
import operator
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import StateGraph

Saver = Any
Factory = Callable[[Path], Any]  # a context manager yielding (saver, measure)


class State(TypedDict):
    items: Annotated[list, operator.add]
    n: int


def build_graph(steps: int, kb: int) -> StateGraph:
    from langgraph.graph import END, START, StateGraph  # the langgraph extra, when measured

    payload = "x" * (kb * 1024)
    graph = StateGraph(State)
    graph.add_node("step", lambda s: {"items": [payload], "n": s["n"] + 1})
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return graph


# -- savers: each yields (saver or None, measure() -> (file bytes, data bytes)) ------
@contextmanager
def no_saver(path: Path) -> Iterator[tuple[Saver, Callable[[], tuple[int, int]]]]:
    yield None, lambda: (0, 0)


def bide(durability: str) -> Factory:
    @contextmanager
    def factory(path: Path) -> Iterator[tuple[Saver, Callable[[], tuple[int, int]]]]:
        from bide.engine.langgraph import BideSaver  # bide.langgraph, which mypy cannot see

        with BideSaver.from_home(path / "home", durability=durability) as saver:
            def measure() -> tuple[int, int]:
                store = saver.threads.store
                with store.reader() as r:
                    data = sum(h.bytes for h in r.heads())
                return store.info()["used_bytes"], data

            yield saver, measure

    return factory


@contextmanager
def sqlite(path: Path) -> Iterator[tuple[Saver, Callable[[], tuple[int, int]]]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = path / "checkpoints.sqlite"
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)

        def measure() -> tuple[int, int]:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (data,) = conn.execute(
                "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) "
                "FROM checkpoints) + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes)"
            ).fetchone()
            return db.stat().st_size, data

        yield saver, measure
    finally:
        conn.close()


@contextmanager
def lmdb_package(path: Path) -> Iterator[tuple[Saver, Callable[[], tuple[int, int]]]]:
    import lmdb
    from langgraph_checkpoint_lmdb import LMDBSaver

    # its default 10 MiB map fills during this run and it never grows it
    env = lmdb.open(str(path / "lmdb"), max_dbs=4, map_size=1 << 30)
    try:
        saver = LMDBSaver(env)

        def measure() -> tuple[int, int]:
            data = 0
            with env.begin() as txn:
                for name in (b"checkpoints", b"writes"):
                    for _, value in txn.cursor(db=env.open_db(name, txn=txn)):
                        data += len(value)
            info, stat = env.info(), env.stat()
            return (info["last_pgno"] + 1) * stat["psize"], data

        yield saver, measure
    finally:
        env.close()


def available() -> dict[str, Factory]:
    savers: dict[str, Factory] = {"no saver": no_saver, "BideSaver durable": bide("durable"),
                                  "BideSaver fast": bide("fast")}
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401

        savers["SqliteSaver"] = sqlite
    except ImportError:
        print("(langgraph-checkpoint-sqlite not installed: SqliteSaver skipped)")
    try:
        import langgraph_checkpoint_lmdb  # noqa: F401

        savers["langgraph-checkpoint-lmdb"] = lmdb_package
    except ImportError:
        print("(langgraph-checkpoint-lmdb not installed: LMDBSaver skipped)")
    return savers


def written() -> int:
    """Bytes this process has written to files so far (0 where /proc is missing)."""
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("wchar"))
    except OSError:
        return 0


def run_once(factory: Factory, steps: int, kb: int) -> tuple[float, int, int, int]:
    """``(seconds, file bytes, data bytes, bytes written)`` of one fresh run."""
    with tempfile.TemporaryDirectory() as tmp, factory(Path(tmp)) as (saver, measure):
        graph = build_graph(steps, kb).compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": "bench"},
                                  "recursion_limit": steps + 10}
        # durability needs a saver
        sync: dict[str, Any] = {} if saver is None else {"durability": "sync"}
        before, start = written(), time.perf_counter()
        out = graph.invoke({"items": [], "n": 0}, config, **sync)
        elapsed, wrote = time.perf_counter() - start, written() - before
        assert out["n"] == steps and len(out["items"]) == steps
        if saver is not None:  # what was stored reads back
            again = graph.get_state({"configurable": {"thread_id": "bench"}}).values
            assert again["n"] == steps and len(again["items"]) == steps
        file_bytes, data_bytes = measure()
        return elapsed, file_bytes, data_bytes, wrote


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--kb", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    savers = available()
    print(f"{args.steps} steps, {args.kb} KB appended per step, durability='sync', "
          f"median of {args.repeat}; cpus={os.cpu_count()}")
    runs: dict[str, list[tuple[float, int, int, int]]] = {name: [] for name in savers}
    for _ in range(args.repeat):  # round robin, so a noisy moment hits every saver alike
        for name, factory in savers.items():
            runs[name].append(run_once(factory, args.steps, args.kb))
    rows = []
    for name, done in runs.items():
        secs, file_b, data_b, wrote = (statistics.median(r[i] for r in done) for i in range(4))
        rows.append((name, file_b / args.steps, data_b / args.steps, wrote / args.steps,
                     secs * 1000 / args.steps))
    payload = args.kb * 1024
    print("\n| saver | file B/step | data B/step | data / payload | written B/step | ms/step |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, file_b, data_b, wrote, ms in rows:
        ratio = f"{data_b / payload:.1f}x" if data_b else "-"
        print(f"| {name} | {file_b:,.0f} | {data_b:,.0f} | {ratio} | {wrote:,.0f} | {ms:.2f} |")


if __name__ == "__main__":
    main()
