"""``bide bench peers`` on PostgreSQL: bide, LangGraph's PostgresSaver and DBOS, one server.

The workload is ``tool_calls``' loop: K steps, each one call of ``send`` (100 B
of arguments, 100 B of result), the last result and a counter kept in state.
Each system runs it in a fresh database of its own on the same server, one
after the other, in the same run:

- bide on PostgreSQL, ``durable`` (``synchronous_commit=on``) and ``fast``
  (``off``), through ``ctx.tool`` and the intent log;
- bide on LMDB, durable, as the reference of what the move costs (its bytes are
  LMDB's: log records and pages, no WAL);
- LangGraph + ``PostgresSaver`` (langgraph-checkpoint-postgres), the same
  function in a node, ``durability="sync"``;
- DBOS with its system database on the same server, a ``@DBOS.step`` per call
  (in a process of its own: DBOS is a process-wide singleton).

Per step: wall time; the durable cost (over the same loop with no persistence:
bide's flow in memory, the graph without a checkpointer, DBOS's plain function
calls); rows, table and WAL bytes (``pg_footprint``). Every ratio is against
bide on PostgreSQL, durable, measured in the same run. A peer that is not
installed is skipped and says so.
"""

from __future__ import annotations

import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine.api.runtime import open as open_home
from . import tool_calls
from .kit import noise
from .kit.memory import run_in_memory
from .kit.pg_databases import Databases
from .kit.verdicts import target_line
from .tool_calls import arg, send

BASE = "bide postgres durable"  # every ratio is against this row
LANGGRAPH = "langgraph postgres sync"
DBOS = "dbos postgres"
DBOS_TIMEOUT = 600
TARGET_COST = 1.0  # bide's durable cost per step <= each peer's on the same server


def langgraph_skip() -> str | None:
    try:
        importlib.import_module("langgraph.graph")
        importlib.import_module("langgraph.checkpoint.postgres")
    except ImportError as exc:
        return (f"LangGraph PostgresSaver skipped: {exc.name} is not installed "
                "(pip install 'bide[compare]')")
    return None


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=10)


def _measured(url: str, repeat: int, once: Callable[[int], None]) -> tuple[float, dict[str, int]]:
    """``once(n)`` ``repeat`` times: median seconds, and the bytes the first run added."""
    from .kit.pg_footprint import footprint

    times, added = [], {}
    with _connect(url) as conn:
        for n in range(repeat):
            before = footprint(conn) if n == 0 else None
            t0 = time.perf_counter()
            once(n)
            times.append(time.perf_counter() - t0)
            if before is not None:
                added = footprint(conn).minus(before, conn)
    return statistics.median(times), added


def _row(system: str, k: int, seconds: float, baseline: float, added: dict[str, Any]
         ) -> dict[str, Any]:
    def per(key: str) -> float | None:
        return None if added.get(key) is None else added[key] / k

    return {"system": system, "steps": k, "ms_per_step": 1000 * seconds / k,
            "baseline_ms_per_step": 1000 * baseline / k,
            "durable_ms_per_step": 1000 * (seconds - baseline) / k,
            "row_bytes_per_step": per("rows"), "table_bytes_per_step": per("tables"),
            "wal_bytes_per_step": per("wal")}


# -- bide ---------------------------------------------------------------------------------
def bide_baseline(k: int, repeat: int) -> float:
    flow = tool_calls.bide_flow(k)
    times = []
    for _ in range(max(repeat, 3)):
        t0 = time.perf_counter()
        state, _ = run_in_memory(flow, {"count": 0})
        times.append(time.perf_counter() - t0)
    if state != {"count": k, "last": send(k - 1, "")}:
        raise AssertionError(f"the in-memory tool loop ended with {state!r}")
    return statistics.median(times)


def measure_bide(url: str, k: int, durability: str, *, repeat: int, baseline: float,
                 directory: str | None = None) -> dict[str, Any]:
    commits: list[Any] = []
    with tempfile.TemporaryDirectory(dir=directory, prefix="bide-pg-local-") as d, \
            open_home(url, durability=durability, local=Path(d)) as engine:
        engine.register(tool_calls.bide_flow(k))
        engine.start("bench-tools", {"count": 0}, run_id="warmup")

        def once(n: int) -> None:
            stop = engine.store.on_commit(commits.append) if n == 0 else (lambda: None)
            try:
                run = engine.start("bench-tools", {"count": 0}, run_id=f"r{n}")
            finally:
                stop()
            if run.state != {"count": k, "last": send(k - 1, "")}:
                raise AssertionError(f"bide on PostgreSQL ended with {run.state!r}")

        seconds, added = _measured(url, repeat, once)
        records = sum(size for _, _, size in engine.records("r0"))
    row = _row(f"bide postgres {durability}", k, seconds, baseline, added)
    row["record_bytes_per_step"] = records / k
    row["commits_per_step"] = sum(1 for e in commits if e.kind == "commit") / k
    return row


def measure_bide_lmdb(k: int, *, repeat: int, baseline: float, directory: str | None
                      ) -> dict[str, Any]:
    """bide on LMDB in the same run: what moving to PostgreSQL costs (no WAL, LMDB pages)."""
    got = tool_calls.measure_bide(k, "durable", repeat=repeat, directory=directory)
    seconds = got["ms_per_call"] * k / 1000
    row = _row("bide lmdb durable", k, seconds, baseline,
               {"rows": got["bytes_per_call"] * k, "tables": got["growth_per_call"] * k})
    row["record_bytes_per_step"] = got["bytes_per_call"]
    row["commits_per_step"] = got["commits_per_call"]
    return row


# -- LangGraph + PostgresSaver ----------------------------------------------------------
def _graph(k: int) -> Any:
    from typing import TypedDict

    from langgraph.graph import END as LG_END
    from langgraph.graph import START, StateGraph

    S = TypedDict("S", {"count": int, "last": str})  # noqa: UP013 - runtime annotations
    g = StateGraph(S)
    g.add_node("step", lambda state: {"last": send(state["count"], arg(state["count"])),
                                      "count": state["count"] + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda state: LG_END if state["count"] >= k else "step")
    return g


def measure_langgraph(url: str, k: int, *, repeat: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    g = _graph(k)
    want = {"count": k, "last": send(k - 1, "")}

    def config(thread: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread}, "recursion_limit": k + 20}

    bare = g.compile()
    baseline = statistics.median(_timed(lambda: bare.invoke({"count": 0, "last": ""},
                                                            config("b")), max(repeat, 3)))
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        graph = g.compile(checkpointer=saver)
        graph.invoke({"count": 0, "last": ""}, config("warmup"), durability="sync")

        def once(n: int) -> None:
            out = graph.invoke({"count": 0, "last": ""}, config(f"t{n}"), durability="sync")
            if out != want:
                raise AssertionError(f"LangGraph on PostgreSQL ended with {out!r}")

        seconds, added = _measured(url, repeat, once)
    return _row(LANGGRAPH, k, seconds, baseline, added)


def _timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


# -- DBOS ---------------------------------------------------------------------------------
def measure_dbos(url: str, k: int, *, repeat: int) -> dict[str, Any]:
    """DBOS in a process of its own: it is a process-wide singleton with its own threads."""
    cmd = [sys.executable, "-m", "bide.bench.postgres", "dbos", url, str(k), str(repeat)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=DBOS_TIMEOUT)
    if out.returncode != 0:
        raise RuntimeError(f"the DBOS PostgreSQL bench failed: {out.stderr.strip()[-2000:]}")
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def _measure_dbos_here(url: str, k: int, repeat: int) -> dict[str, Any]:
    from dbos import DBOS as Dbos

    baseline = statistics.median(_timed(lambda: [send(i, arg(i)) for i in range(k)],
                                        max(repeat, 3)))
    Dbos(config={"name": "bide-bench", "system_database_url": url, "log_level": "ERROR"})
    workflow = tool_calls._dbos_workflow()
    Dbos.launch()
    try:
        workflow(k)

        def once(n: int) -> None:
            out = workflow(k)
            if out != send(k - 1, ""):
                raise AssertionError(f"DBOS on PostgreSQL ended with {out!r}")

        seconds, added = _measured(url, repeat, once)
    finally:
        Dbos.destroy(destroy_registry=True)
    return _row(DBOS, k, seconds, baseline, added)


# -- the section ------------------------------------------------------------------------
def run(dbs: Databases, quick: bool, *, directory: str | None = None, k: int | None = None,
        repeat: int | None = None) -> dict[str, Any]:
    """Every system on the same K steps, each in a fresh database; rows, skips, targets."""
    k = k or (tool_calls.QUICK_K if quick else tool_calls.FULL_K)
    repeat = repeat or (3 if quick else 5)
    baseline = bide_baseline(k, repeat)
    rows = [measure_bide(dbs.fresh("bide"), k, "durable", repeat=repeat, baseline=baseline,
                         directory=directory),
            measure_bide(dbs.fresh("bide_fast"), k, "fast", repeat=repeat, baseline=baseline,
                         directory=directory),
            measure_bide_lmdb(k, repeat=repeat, baseline=baseline, directory=directory)]
    skipped = []
    lg_skip, dbos_skip = langgraph_skip(), tool_calls.dbos_skip()
    if lg_skip:
        skipped.append(lg_skip)
    else:
        rows.append(measure_langgraph(dbs.fresh("langgraph"), k, repeat=repeat))
    if dbos_skip:
        skipped.append(dbos_skip)
    else:
        rows.append(measure_dbos(dbs.fresh("dbos"), k, repeat=repeat))
    with_ratios(rows)
    return {"rows": rows, "skipped": skipped, "targets": targets(rows),
            "server": dbs.settings()}


RATIOS = ("durable_ms_per_step", "row_bytes_per_step", "table_bytes_per_step",
          "wal_bytes_per_step")


def with_ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's figures over bide-on-PostgreSQL-durable's (``x_<figure>``)."""
    base = next(r for r in rows if r["system"] == BASE)
    for r in rows:
        for key in RATIOS:
            mine, theirs = r.get(key), base.get(key)
            r[f"x_{key}"] = mine / theirs if mine is not None and theirs else None


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the PostgreSQL rows claim, met or not (None: the peer was not measured)."""
    by = {r["system"]: r for r in rows}
    bide = by[BASE]
    peers = [by[p] for p in (LANGGRAPH, DBOS) if p in by]
    out = []
    for peer in (LANGGRAPH, DBOS):
        other = by.get(peer)
        ratio = (bide["durable_ms_per_step"] / other["durable_ms_per_step"]
                 if other and other["durable_ms_per_step"] > 0 else None)
        out.append(_target(f"bide durable cost per step on PostgreSQL vs {peer}",
                           f"<= {TARGET_COST:g}x", ratio,
                           None if ratio is None else ratio <= TARGET_COST,
                           f"{bide['durable_ms_per_step']:.2f} ms vs "
                           f"{other['durable_ms_per_step']:.2f} ms" if other else
                           "not installed"))
    for key, what in (("table_bytes_per_step", "table bytes"), ("wal_bytes_per_step", "WAL")):
        fewer = all(bide[key] < p[key] for p in peers)
        out.append(_target(f"fewer {what} per step on PostgreSQL than LangGraph and DBOS",
                           "< both", bide[key], fewer if len(peers) == 2 else None,
                           "; ".join(f"{p['system']}: {p[key]:.0f} B" for p in peers)
                           or "no peer installed"))
    return out


def _target(name: str, limit: str, measured: float | None, met: bool | None, detail: str
            ) -> dict[str, Any]:
    return {"target": name, "limit": limit, "measured": measured, "met": met, "detail": detail}


def _num(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def render(section: dict[str, Any]) -> str:
    rows = section["rows"]
    lines = [f"On PostgreSQL ({section['server'].get('server')}, PostgreSQL "
             f"{section['server'].get('server_version')}): {rows[0]['steps']} sequential tool "
             f"steps, each system in its own database; x = over {BASE}",
             f"{'system':<26}{'ms/step':>8}{'durable':>8}{'x':>6}{'rows B':>8}{'x':>6}"
             f"{'table B':>9}{'x':>6}{'WAL B':>8}{'x':>6}"]
    for r in rows:
        lines.append(
            f"{r['system']:<26}{r['ms_per_step']:>8.2f}{noise.text(r['durable_ms_per_step']):>8}"
            f"{_num(r['x_durable_ms_per_step'], 2):>6}{_num(r['row_bytes_per_step']):>8}"
            f"{_num(r['x_row_bytes_per_step'], 2):>6}{_num(r['table_bytes_per_step']):>9}"
            f"{_num(r['x_table_bytes_per_step'], 2):>6}{_num(r['wal_bytes_per_step']):>8}"
            f"{_num(r['x_wal_bytes_per_step'], 2):>6}")
    lines.extend(target_line(t, detail=True) for t in section["targets"])
    lines.extend(f"  {s}" for s in section["skipped"])
    return "\n".join(lines)


if __name__ == "__main__":  # the DBOS row, measured in a process of its own
    _, _, url_arg, k_arg, repeat_arg = sys.argv
    print(json.dumps(_measure_dbos_here(url_arg, int(k_arg), int(repeat_arg))))
