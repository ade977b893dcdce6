"""What a ``bide bench`` run does, in order: granularity, crashes, peers.

Timed measurements run one at a time; the crash runs (subprocesses, not
timed) may use two workers.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lmdb

from . import concurrency, layout, peers, tool_calls
from .kit import crash, measure, pg_databases, workloads
from .kit.policies import POLICIES, BenchPolicy
from .kit.workloads import Workload

WHAT = ("granularity", "peers", "layout", "postgres", "all")
WITH_POSTGRES = ("peers", "postgres", "all")  # the PostgreSQL rows run in these


class Plan:
    """The cases of one run and how many progress units each is worth."""

    def __init__(self, what: str, quick: bool, *, kills: int | None = None,
                 policies: tuple[BenchPolicy, ...] = POLICIES, pg: str | None = None,
                 no_pg: bool = False) -> None:
        if what not in WHAT:
            raise ValueError(f"what must be one of {WHAT}, not {what!r}")
        self.what, self.quick = what, quick
        self.pg_url = pg
        self.pg_skip = (None if what not in WITH_POSTGRES or no_pg
                        else pg_databases.unavailable(pg))
        self._pg = what in WITH_POSTGRES and not no_pg
        self.policies = policies
        self.repeat = 1 if quick else 3
        self.kills = kills if kills is not None else (2 if quick else 20)
        by_kind = workloads.for_run(quick)
        self.granularity = [w for ws in by_kind.values() for w in ws]
        self.crash = workloads.for_crash(quick)
        self.peer_workloads = [w for w in self.granularity
                               if w.kind in ("linear", "fanout4", "long")]
        self.peer_skip = peers.available() if what in ("peers", "all") else None

    @property
    def does_granularity(self) -> bool:
        return self.what in ("granularity", "all")

    @property
    def does_peers(self) -> bool:
        return self.what in ("peers", "all") and self.peer_skip is None

    def peer_variants(self) -> list[str]:
        return peers.variants() if self.does_peers else []

    @property
    def does_layout(self) -> bool:
        return self.what in ("layout", "all")

    @property
    def timed_workloads(self) -> list[Workload]:
        return self.granularity if self.does_granularity else self.peer_workloads

    @property
    def timed_policies(self) -> tuple[BenchPolicy, ...]:
        """All policies; for ``peers`` alone, the two that the peers are compared with."""
        if self.does_granularity:
            return self.policies
        return tuple(p for p in self.policies if p.name in ("default", "fast"))

    @property
    def units(self) -> int:
        n = 0
        if self.does_granularity or self.does_peers:
            n += len(self.timed_workloads) * len(self.timed_policies)
        if self.does_granularity:
            n += len(self.crash) * len(self.policies) * self.kills
        n += len(self.peer_workloads) * len(self.peer_variants())
        if self.does_tool_calls:
            n += 1
        if self.does_postgres:
            n += 2
        return n + (layout.units(self.quick) if self.does_layout else 0)

    @property
    def does_postgres(self) -> bool:
        """The peers on one PostgreSQL server, and 1/2/4 workers on one PostgreSQL home."""
        return self._pg and self.pg_skip is None

    @property
    def does_tool_calls(self) -> bool:
        """K sequential tool calls against LangGraph and DBOS (each skipped if missing)."""
        return self.what in ("peers", "all")


def run(plan: Plan, *, home: str | Path | None = None, seed: int = 0, jobs: int = 2,
        tick: Callable[[int], None] = lambda n: None) -> dict[str, Any]:
    """Run the plan in a temporary directory (under ``home`` if given); results as a dict."""
    started = time.perf_counter()
    lock = threading.Lock()
    unlocked_tick = tick

    def locked_tick(n: int) -> None:  # the crash workers tick from two threads
        with lock:
            unlocked_tick(n)

    tick = locked_tick

    root_ctx = tempfile.TemporaryDirectory(prefix="bide-bench-", dir=home)
    root = Path(root_ctx.name)
    out: dict[str, Any] = {"meta": _meta(plan, seed), "granularity": [], "redo": [], "peers": []}
    try:
        if plan.does_granularity or plan.does_peers:
            out["granularity"], out["peers"] = _timed(plan, root / "granularity", tick)
        if plan.does_granularity:
            out["redo"] = _crashes(plan, root / "crash", seed, jobs, out["granularity"], tick)
        if plan.does_granularity:
            out["concurrency"] = concurrency.run(root / "concurrency", quick=plan.quick)
        if plan.does_tool_calls:
            out["tool_calls"] = tool_calls.run(plan.quick, directory=str(root))
            tick(1)
        if plan.does_postgres:
            out.update(_postgres(plan, root, tick))
        elif plan.pg_skip:
            out["meta"]["postgres_skipped"] = plan.pg_skip
        if plan.does_layout:
            out["layout"] = layout.run(plan.quick, root / "layout", tick)
        if plan.peer_skip and plan.what != "granularity":
            out["meta"]["peers_skipped"] = plan.peer_skip
    finally:
        root_ctx.cleanup()
    out["meta"]["seconds"] = time.perf_counter() - started
    out["meta"]["loadavg_end"] = os.getloadavg()
    return out


def _meta(plan: Plan, seed: int) -> dict[str, Any]:
    from .. import __version__

    meta = {"what": plan.what, "quick": plan.quick, "seed": seed, "repeat": plan.repeat,
            "kills_per_case": plan.kills, "bide": __version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "cpus": os.cpu_count(), "lmdb": lmdb.version(),
            "py_lmdb": lmdb.__version__, "commit": _commit(), "loadavg_start": os.getloadavg(),
            "policies": {p.name: {"durability": p.durability, **p.policy.to_dict(),
                                  "about": p.about} for p in plan.policies}}
    if plan.does_peers:
        from importlib.metadata import version

        meta["langgraph"] = version("langgraph")
        meta["langgraph_checkpoint_sqlite"] = version("langgraph-checkpoint-sqlite")
    if plan.does_postgres:
        meta.update(_versions("psycopg", "langgraph-checkpoint-postgres", "dbos"))
    return meta


def _versions(*packages: str) -> dict[str, str]:
    """Installed versions of ``packages`` (the ones installed), keyed with underscores."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in packages:
        try:
            out[name.replace("-", "_")] = version(name)
        except PackageNotFoundError:  # an optional peer that is not installed
            continue
    return out


def _postgres(plan: Plan, root: Path, tick: Callable[[int], None]) -> dict[str, Any]:
    """The PostgreSQL rows: peers on one server, then worker processes on one home."""
    from . import pg_throughput
    from . import postgres as pg_peers

    with pg_databases.databases(plan.pg_url) as dbs:
        peer = pg_peers.run(dbs, plan.quick, directory=str(root))
        tick(1)
        workers = pg_throughput.run(dbs, plan.quick)
        tick(1)
    return {"postgres": peer, "pg_throughput": workers}


def _commit() -> str | None:
    """The git commit of the code measured (with ``+dirty`` if it has local changes)."""
    import subprocess

    here = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git here: not a checkout
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _timed(plan: Plan, root: Path, tick: Callable[[int], None]
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """bide's policies, then LangGraph, workload by workload: close in time, so a
    change in the machine's load between them is as small as it can be."""
    rows, peer_rows = [], []
    for w in plan.timed_workloads:
        baseline = measure.baseline_seconds(w, max(plan.repeat, 5))
        for p in plan.timed_policies:
            home = root / f"{w.kind}-{w.size}-{w.payload}-{p.name}"
            rows.append(measure.measure(w, p, home, repeat=plan.repeat, baseline=baseline))
            _remove_home(home)
            tick(1)
        if w in plan.peer_workloads and plan.does_peers:
            peer_rows.extend(_peers(plan, w, tick))
    return rows, peer_rows


def _remove_home(home: Path) -> None:
    import shutil

    shutil.rmtree(home, ignore_errors=True)


def _crashes(plan: Plan, root: Path, seed: int, jobs: int, rows: list[dict[str, Any]],
             tick: Callable[[int], None]) -> list[dict[str, Any]]:
    spans = {(r["spec"], r["policy"]): r["ms_per_superstep"] * r["supersteps"] / 1000
             for r in rows}
    cases = [(w, p) for w in plan.crash for p in plan.policies]

    def one(case: tuple[Workload, BenchPolicy]) -> dict[str, Any]:
        w, p = case
        where = root / f"{w.kind}-{p.name}"
        # quick: the in-process run time; full: calibrated in a cold worker process
        span = spans.get((w.spec, p.name)) if plan.quick else None
        result = crash.crash_policy(w, p, where, kills=plan.kills, seed=seed, span=span,
                                    tick=lambda: tick(1))
        _remove_home(where)
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, cases))


def _peers(plan: Plan, w: Workload, tick: Callable[[int], None]) -> list[dict[str, Any]]:
    rows = []
    baseline = peers.baseline_seconds(w, max(plan.repeat, 5))
    for variant in plan.peer_variants():
        rows.append(peers.measure(w, variant, repeat=plan.repeat, baseline=baseline))
        tick(1)
    return rows
