"""Throughput of one PostgreSQL home under 1, 2 and 4 worker processes.

Each worker is a process of its own (as a worker on another host would be: its
own engine, its own connections) running its share of many short durable runs
(``long`` chains, B = 100) one after another, with run ids of its own. The
workers open the home and warm up, wait at a barrier (a line on stdin), run,
and report when they started and ended (``time.monotonic``, one clock for the
whole machine). Steps/s = every superstep of every worker / (last end - first
start); the ratio is to one worker in the same run. Every case gets a fresh
database; the same total number of runs is split among the workers, and the
cases take turns round by round, so a change in the machine's load hits all.

Each worker also counts the commits it made and the transactions its store
retried after the server refused them (``PostgresStore.retries``: serialization
failures, deadlocks): runs share no rows, so every retry is a conflict between
different runs.

What it shows: commits of different runs on one PostgreSQL home do not queue
behind one lock, so more workers complete more steps per second until the
CPU (workers and server share the machine's cores) or the WAL flush is the
bound.
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .kit import quick_size
from .kit.pg_databases import Databases
from .kit.workloads import Workload

WORKERS = (1, 2, 4)
READY_DEADLINE = 60.0  # seconds for a worker to start, open the home and warm up
RUN_DEADLINE = 600.0
TARGET_FOUR = 2.0  # 4 workers >= 2x one worker's steps/s on one home


def _spawn(url: str, worker: int, runs: int, steps: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bide.bench.pg_throughput", url, str(worker), str(runs),
           str(steps)]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _await_ready(procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + READY_DEADLINE
    for p in procs:
        assert p.stdout is not None
        left = deadline - time.monotonic()
        ready, _, _ = select.select([p.stdout], [], [], max(left, 0))
        line = p.stdout.readline() if ready else ""
        if line.strip() != "ready":
            raise RuntimeError(f"a throughput worker did not get ready within "
                               f"{READY_DEADLINE:g}s: {line!r} {_stderr(p)}")


def _stderr(p: subprocess.Popen[str]) -> str:
    if p.poll() is None:
        return ""
    assert p.stderr is not None
    return p.stderr.read()[-2000:]


def workers_case(url: str, workers: int, runs: int, steps: int) -> dict[str, Any]:
    """``runs`` runs of ``steps`` supersteps split among ``workers`` processes."""
    share = [runs // workers + (1 if i < runs % workers else 0) for i in range(workers)]
    procs = [_spawn(url, i, n, steps) for i, n in enumerate(share)]
    try:
        _await_ready(procs)
        for p in procs:  # the barrier: every worker is warm before any starts
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=RUN_DEADLINE)
            if p.returncode != 0:
                raise RuntimeError(f"a throughput worker failed ({p.returncode}): {err[-2000:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    commits = sum(r["commits"] for r in reports)
    return {"workers": workers, "runs": runs, "supersteps": runs * steps, "seconds": seconds,
            "steps_per_s": runs * steps / seconds, "commits": commits,
            "retries_per_commit": sum(r["retries"] for r in reports) / max(commits, 1)}


def run(dbs: Databases, quick: bool, *, runs: int | None = None, steps: int | None = None,
        repeat: int | None = None) -> dict[str, Any]:
    """One row per worker count: medians over ``repeat`` rounds, ratios to one worker."""
    runs = runs or (8 if quick else 48)
    steps = steps or (5 if quick else 10)
    repeat = repeat or (1 if quick else 3)
    samples: dict[int, list[dict[str, Any]]] = {n: [] for n in WORKERS}
    for i in range(repeat):
        for n in WORKERS:
            samples[n].append(workers_case(dbs.fresh(f"w{n}_{i}"), n, runs, steps))
    rows = []
    for n in WORKERS:
        row = dict(samples[n][0])
        for key in ("seconds", "steps_per_s", "retries_per_commit"):
            row[key] = statistics.median(s[key] for s in samples[n])
        rows.append(row)
    for row in rows:
        row["ratio"] = row["steps_per_s"] / rows[0]["steps_per_s"]
    return {"rows": rows, "steps_per_run": steps, "repeat": repeat, "cpus": os.cpu_count(),
            "targets": quick_size.mark(targets(rows), quick)}


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    four = next(r for r in rows if r["workers"] == WORKERS[-1])
    return [{"target": f"{WORKERS[-1]} worker processes vs one on one PostgreSQL home "
                       "(steps/s)", "limit": f">= {TARGET_FOUR:g}x", "measured": four["ratio"],
             "met": four["ratio"] >= TARGET_FOUR,
             "detail": "; ".join(f"{r['workers']}: {r['steps_per_s']:.0f} steps/s"
                                 for r in rows)}]


def render(section: dict[str, Any]) -> str:
    lines = [f"Worker processes on one PostgreSQL home (durable, runs of "
             f"{section['steps_per_run']} supersteps, median of {section['repeat']}, "
             f"{section['cpus']} cpus shared with the server)",
             "workers  supersteps/s  x one worker  conflicts retried / commit",
             *(f"{r['workers']:>7}  {r['steps_per_s']:>12.0f}  {r['ratio']:>12.2f}  "
               f"{r['retries_per_commit']:>26.2f}" for r in section["rows"])]
    for t in section["targets"]:
        verdict = t.get("na") or ("met" if t["met"] else "NOT met")
        lines.append(f"  {t['target']} ({t['limit']}): {t['measured']:.2f} -> {verdict}")
    return "\n".join(lines)


def _worker(url: str, worker: int, runs: int, steps: int) -> dict[str, Any]:
    """One worker process: warm up, wait for the go, run, say when it started and ended."""
    from ..engine.api.runtime import open as open_home
    from ..engine.base.vocabulary import Status
    from ..engine.postgres.store import PostgresStore
    from ..engine.storage.store import WriteEvent

    w = Workload("long", steps, 100)
    flow = w.flow()
    commits = [0]

    def count(event: WriteEvent) -> None:
        if event.kind == "commit" and not event.refused:
            commits[0] += 1

    with tempfile.TemporaryDirectory(prefix="bide-pg-worker-") as d, \
            open_home(url, durability="durable", local=Path(d)) as engine:
        engine.register(flow)
        engine.start(flow.name, w.initial(), run_id=f"w{worker}-warmup")
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("no go from the bench")
        store = engine.store
        assert isinstance(store, PostgresStore)
        retried = store.retries  # transactions the server refused, run again
        stop = store.on_commit(count)
        start = time.monotonic()
        for j in range(runs):
            done = engine.start(flow.name, w.initial(), run_id=f"w{worker}-{j}")
            if done.status != Status.DONE or done.state != w.expected():
                raise AssertionError(f"run w{worker}-{j} ended {done.status}")
        end = time.monotonic()
        stop()
    return {"start": start, "end": end, "runs": runs, "commits": commits[0],
            "retries": store.retries - retried}


if __name__ == "__main__":
    _, url_arg, worker_arg, runs_arg, steps_arg = sys.argv
    print(json.dumps(_worker(url_arg, int(worker_arg), int(runs_arg), int(steps_arg))),
          flush=True)
