"""Pages a commit writes: raw-LMDB models of where a superstep's keys could live, and bide.

    python -m bide.bench.kit.layout_model [--steps K]

Device bytes (``bench/physical.py``) are noisy on a shared disk; the pages a
commit copies are not. With a read transaction held open from before the
measure, LMDB can reuse no page freed during it, so every page a commit
writes (copy-on-write leaves and branches, the free list's own pages) is a new
one at the end of the file: ``last_pgno`` after minus before, over the
commits, is the pages per commit (the meta page, one per commit, aside).

The models replay one default superstep's writes (a ~230 B log record, a run
log entry, the run's head, three latest-state entries) per commit, placed as
each candidate layout would place them, beside the floor: one 100 B append
per commit into one named database. ``bide_pages`` measures the engine
itself on the same chain. Measured (K = 200): the floor 4.6 pages; the
format-4 layout (log, run log, heads in three named databases) 8.2; heads in
the run log's database 7.3; all in one named database 6.6-6.8 (that
database's leaf and LMDB's main database, which holds every named
database's record, are both written); all in the main database 5.3 (1.15x).
``lmdb_layout.TREE`` is the last.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb

from ...engine.api.runtime import open as open_home
from .measure import WARMUP, warmup_flow
from .policies import get
from .workloads import Workload

_Q = struct.Struct(">Q")
_RUN = b"run-000001\x00"
_OTHER_TABLES = ("meta", "leases", "intents", "approvals", "attention")  # opened, not written
Put = tuple[str, bytes, bytes]  # (table, key, value)


def _step(i: int) -> list[Put]:
    """One default superstep's writes as logical (table, key, value)."""
    return [("log", _Q.pack(i), b"r" * 230), ("runlog", _RUN + _Q.pack(i), b"c" * 15),
            ("state", _RUN + b"\xff\x00\x05items\xff\xff\xff\xff", b"t" * (108 + 102 * (i % 5))),
            ("state", _RUN + b"\xff\x00\x05count", b"c" * 6), ("state", _RUN + b"\xff", b"d" * 33),
            ("runs", _RUN + b"\xfe", b"h" * 339)]


# candidate -> table -> (database: None is LMDB's main one, key prefix)
LAYOUTS: dict[str, dict[str, tuple[str | None, bytes]]] = {
    "format 4: log, run log, heads in 3 named databases": {
        "log": ("log", b""), "runlog": ("runlog", b""), "state": ("runlog", b""),
        "runs": ("runs", b"")},
    "heads in the run log's database (2 named)": {
        "log": ("log", b""), "runlog": ("runlog", b""), "state": ("runlog", b""),
        "runs": ("runlog", b"")},
    "one named database, the log under a high prefix": {
        t: ("one", b"\xff\xff" if t == "log" else b"") for t in ("log", "runlog", "state", "runs")},
    "the main database, the log under a high prefix (TREE)": {
        t: (None, b"\xff\xff" if t == "log" else b"") for t in ("log", "runlog", "state", "runs")},
}


@contextmanager
def _pinned(env: lmdb.Environment) -> Iterator[Callable[[], int]]:
    """Hold a snapshot (no page freed meanwhile is reused); yields pages written so far."""
    reader = env.begin()
    start = env.info()["last_pgno"]
    try:
        yield lambda: int(env.info()["last_pgno"] - start)
    finally:
        reader.abort()


def model_pages(layout: dict[str, tuple[str | None, bytes]] | None, steps: int,
                root: Path) -> float:
    """Pages per commit of ``steps`` supersteps placed by ``layout`` (None: the floor)."""
    with tempfile.TemporaryDirectory(dir=root, prefix="model-") as d:
        env = lmdb.open(d, map_size=1 << 30, max_dbs=12, sync=False, metasync=False)
        try:
            for name in _OTHER_TABLES:
                env.open_db(name.encode())
            names = {"t0"} if layout is None else {db for db, _ in layout.values() if db}
            dbs: dict[str | None, Any] = {n: env.open_db(n.encode()) for n in names}
            dbs[None] = None

            def commit(i: int) -> None:
                with env.begin(write=True) as txn:
                    if layout is None:
                        txn.put(_Q.pack(i), b"x" * 100, db=dbs["t0"], append=True)
                        return
                    for table, key, value in _step(i):
                        db, prefix = layout[table]
                        txn.put(prefix + key, value, db=dbs[db], append=prefix == b"\xff\xff")

            for i in range(20):  # pages and free lists in use, as in a home
                commit(i)
            with _pinned(env) as pages:
                for i in range(20, 20 + steps):
                    commit(i)
                return pages() / steps
        finally:
            env.close()


def bide_pages(steps: int, root: Path) -> float:
    """Pages per superstep of bide's default policy on a chain of ``steps`` (B = 100 B).

    ``fast`` durability: which pages a commit writes does not depend on fsync.
    """
    w, p = Workload("linear", steps, 100), get("default")
    with tempfile.TemporaryDirectory(dir=root, prefix="pages-") as d:
        with open_home(Path(d) / "home", durability="fast") as engine:
            engine.register(w.flow(), warmup_flow())
            engine.start("bench-warmup", WARMUP.initial(), run_id="warmup", policy=p.policy)
            with _pinned(engine.store.env) as pages:  # type: ignore[attr-defined]
                engine.start(w.flow().name, w.initial(), run_id="r", policy=p.policy)
                return pages() / steps


def run(steps: int, root: Path) -> dict[str, Any]:
    floor = model_pages(None, steps, root)
    models = {name: model_pages(layout, steps, root) for name, layout in LAYOUTS.items()}
    mine = bide_pages(steps, root)
    return {"steps": steps, "floor": floor, "models": models, "bide": mine,
            "ratio": mine / floor}


def render(section: dict[str, Any]) -> str:
    floor = section["floor"]
    lines = [f"Pages written per commit (K = {section['steps']}, a snapshot held open):",
             f"  {'raw LMDB: one 100 B append into one named database (floor)':<62} "
             f"{floor:5.2f}"]
    for name, pages in section["models"].items():
        lines.append(f"  {'model: ' + name:<62} {pages:5.2f}  {pages / floor:4.2f}x")
    lines.append(f"  {'bide: default superstep':<62} {section['bide']:5.2f}  "
                 f"{section['ratio']:4.2f}x")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bide-layout-model-") as d:
        print(render(run(args.steps, Path(d))))


if __name__ == "__main__":
    main()
