"""Physical writes: the bytes this process sends to the device, not only the bytes it logs.

    python -m bide.bench.physical [--quick]

Flash wears by what reaches the disk: whole pages, copy-on-write parents, meta
pages, journals. Linux counts it per process as ``write_bytes`` in
``/proc/self/io`` (charged when a page turns dirty, or at the write of a
synchronous one); a measure brackets a run between two ``os.sync()`` so the
count covers everything the run dirtied and nothing from before. Pages
dirtied again before the kernel wrote them back count once: ``fast``
(no fsync) rows are what a quiet disk would see, not a worst case.

Rows, each per superstep (or per commit) and per payload byte:
- bide's policies on a chain (``linear``) at B = 100 B, and the default at 1 KB and 10 KB;
- the raw-LMDB floor: one 100 B append per durable commit into 1, 3 or 6 named
  databases (the unnamed main database too);
- LangGraph + SqliteSaver (``sync``) on the same chain, its WAL checkpointed
  into the database file inside the measure (the device writes both).

``device_writes`` is the hook other measurements reuse (group commit,
concurrency): wrap any block and read ``.bytes``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from ..engine.api.runtime import open as open_home
from ..engine.base.vocabulary import Status
from .kit import layout_model
from .kit.measure import WARMUP, instrumented, warmup_flow
from .kit.policies import POLICIES, BenchPolicy, get
from .kit.workloads import Workload

_IO = Path("/proc/self/io")
_KEY = struct.Struct(">Q")


def available() -> str | None:
    """None if this system reports per-process device writes, else why not."""
    try:
        _written()
    except (OSError, ValueError, KeyError) as exc:
        return f"physical bytes not measured: /proc/self/io is not readable here ({exc})"
    return None


def _written() -> int:
    fields = dict(line.split(": ", 1) for line in _IO.read_text().splitlines())
    return int(fields["write_bytes"])


@dataclass
class Writes:
    bytes: int = 0


@contextmanager
def device_writes() -> Iterator[Writes]:
    """Bytes this process wrote to the device inside the block (after a sync on each side)."""
    box = Writes()
    os.sync()
    before = _written()
    try:
        yield box
    finally:
        os.sync()
        box.bytes = _written() - before


# -- bide -------------------------------------------------------------------------------
def bide_row(w: Workload, p: BenchPolicy, root: Path) -> dict[str, Any]:
    """One run of ``w`` under ``p`` in a fresh home, its device bytes per superstep."""
    flow = w.flow()
    with open_home(root / f"{w.kind}-{w.payload}-{p.name}", durability=p.durability) as engine:
        engine.register(flow, warmup_flow())
        engine.start("bench-warmup", WARMUP.initial(), run_id="warmup", policy=p.policy)
        with instrumented(engine) as seen, device_writes() as dev:
            run = engine.start(flow.name, w.initial(), run_id="r", policy=p.policy)
        if run.status != Status.DONE or run.state != w.expected():
            raise AssertionError(f"{w.label} under {p.name} ended {run.status} with a wrong state")
    commits = len(seen["writes"])
    return _row("bide", f"{p.name} ({p.durability})", w.label, w.supersteps, commits,
                dev.bytes, w.logical_bytes, policy=p.name, payload=w.payload)


# -- the raw-LMDB floor ------------------------------------------------------------------
def lmdb_floor_row(databases: int, commits: int, root: Path, *, value_bytes: int = 100,
                   named: bool = True) -> dict[str, Any]:
    """``commits`` durable transactions, each appending one value to every database."""
    value = b"x" * value_bytes
    with tempfile.TemporaryDirectory(dir=root, prefix="floor-") as d:
        env = lmdb.open(d, map_size=1 << 30, max_dbs=max(databases, 1) + 1, readahead=False)
        try:
            dbs = ([env.open_db(f"t{i}".encode()) for i in range(databases)] if named
                   else [None])
            _floor_commits(env, dbs, value, 0, 20)  # pages and free lists in use, as in a home
            with device_writes() as dev:
                _floor_commits(env, dbs, value, 20, commits)
        finally:
            env.close()
    what = f"{databases} named database{'s' if databases > 1 else ''}" if named else \
        "the main database"
    return _row("raw LMDB", f"one {value_bytes} B append per commit into {what}",
                f"{commits} commits", commits, commits, dev.bytes, commits * value_bytes,
                databases=databases if named else 0)


def _floor_commits(env: lmdb.Environment, dbs: list[Any], value: bytes, start: int,
                   n: int) -> None:
    for seq in range(start, start + n):
        with env.begin(write=True) as txn:
            for db in dbs:
                txn.put(_KEY.pack(seq), value, db=db, append=True)


# -- LangGraph + SqliteSaver -------------------------------------------------------------
def sqlite_row(w: Workload, root: Path) -> dict[str, Any] | None:
    """LangGraph's twin of ``w`` with SqliteSaver, durability ``sync`` (None: not installed)."""
    from . import peers

    if peers.available() is not None:
        return None
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory(dir=root, prefix="lg-") as d:
        conn = sqlite3.connect(Path(d) / "lg.sqlite", check_same_thread=False)
        try:
            graph = peers.build(w, delta=False).compile(checkpointer=SqliteSaver(conn))
            graph.invoke(w.initial(), peers._config(w, "warmup"), durability="exit")
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = conn.execute("PRAGMA synchronous").fetchone()[0]
            with device_writes() as dev:
                out = graph.invoke(w.initial(), peers._config(w, "t"), durability="sync")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    if dict(out) != w.expected():
        raise AssertionError(f"LangGraph's twin of {w.label} produced a wrong state")
    return _row("LangGraph + SqliteSaver", f"sync (journal {mode}, synchronous={sync})",
                w.label, w.supersteps, w.supersteps, dev.bytes, w.logical_bytes)


def _row(system: str, variant: str, workload: str, supersteps: int, commits: int,
         written: int, logical: int, **extra: Any) -> dict[str, Any]:
    return {"system": system, "variant": variant, "workload": workload,
            "supersteps": supersteps, "commits": commits, "device_bytes": written,
            "bytes_per_superstep": written / supersteps,
            "bytes_per_commit": written / commits if commits else None,
            "per_payload_byte": written / logical, **extra}


# -- the whole measurement ---------------------------------------------------------------
def run(quick: bool, root: Path, tick: Callable[[int], None] = lambda n: None
        ) -> dict[str, Any]:
    """Every row, and the default policy's bytes per superstep over the one-database floor."""
    why = available()
    if why is not None:
        return {"skipped": why, "rows": []}
    k = 50 if quick else 200
    chain = [Workload("linear", k, 100)]
    rows: list[dict[str, Any]] = []
    for p in POLICIES:
        rows.append(bide_row(chain[0], p, root))
        tick(1)
    for size in (1000, 10000):
        rows.append(bide_row(Workload("linear", k, size), get("default"), root))
        tick(1)
    for n in (1, 3, 6):
        rows.append(lmdb_floor_row(n, k, root))
        tick(1)
    rows.append(lmdb_floor_row(1, k, root, named=False))
    peer = sqlite_row(chain[0], root)
    if peer is not None:
        rows.append(peer)
    tick(1)
    floor_pages, pages = layout_model.model_pages(None, k, root), layout_model.bide_pages(k, root)
    return {"rows": rows, "ratio_to_floor": ratio_to_floor(rows),
            "pages": {"floor": floor_pages, "bide": pages, "ratio": pages / floor_pages}}


def units() -> int:
    return len(POLICIES) + 2 + 3 + 1


def ratio_to_floor(rows: list[dict[str, Any]]) -> float | None:
    """The default durable superstep's device bytes over the one-named-database floor's commit."""
    mine = [r for r in rows if r.get("policy") == "default" and r.get("payload") == 100]
    floor = [r for r in rows if r["system"] == "raw LMDB" and r.get("databases") == 1]
    if not mine or not floor:
        return None
    return float(mine[0]["bytes_per_superstep"] / floor[0]["bytes_per_commit"])


def render(section: dict[str, Any]) -> str:
    if section.get("skipped"):
        return section["skipped"]
    lines = ["Physical writes (bytes sent to the device, /proc/self/io write_bytes):",
             f"  {'system':<24} {'variant':<58} {'workload':<22} {'per step':>9} "
             f"{'per commit':>10} {'x payload':>9}"]
    for r in section["rows"]:
        per_commit = f"{r['bytes_per_commit'] / 1024:.1f} KB" if r["bytes_per_commit"] else "-"
        lines.append(f"  {r['system']:<24} {r['variant']:<58} {r['workload']:<22} "
                     f"{r['bytes_per_superstep'] / 1024:>6.1f} KB {per_commit:>10} "
                     f"{r['per_payload_byte']:>8.1f}x")
    ratio = section.get("ratio_to_floor")
    if ratio is not None:
        lines.append(f"  default durable superstep / raw LMDB one-database commit: {ratio:.2f}x "
                     "(target <= 1.2x)")
    pages = section.get("pages")
    if pages:
        lines.append(f"  pages written per commit (counted, bench/kit/layout_model.py): default "
                     f"superstep {pages['bide']:.2f}, floor {pages['floor']:.2f}: "
                     f"{pages['ratio']:.2f}x")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bide-physical-") as d:
        print(render(run(args.quick, Path(d))))


if __name__ == "__main__":
    main()
