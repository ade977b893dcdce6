"""Redo after a crash: SIGKILL a worker at seeded random moments, resume in a new process.

For each kill: a worker process starts the run and says ``ready``; the parent
sleeps a seeded random fraction of the calibrated run time and SIGKILLs it; a
new process resumes the run to the end (deciding any reconciliation the way a
human with access to the tool's own records would). Counters in files outside
the store say which node executions were redone and whether any tool effect
happened twice.

The resuming process advances its clock past the dead worker's lease instead
of waiting the lease out (30 s): that is what a watcher does once it expires.

Run as ``python -m bide.bench.kit.crash worker|resume HOME SPEC POLICY RUN_ID COUNTERS``.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import Decision, Status
from .crashkit import start_worker
from .policies import BenchPolicy, get
from .workloads import Counters, Workload

LEASE_SKIP = 3600.0  # seconds the resumer's clock runs ahead of the dead worker's


@dataclass(frozen=True)
class KillResult:
    delay: float
    killed: bool  # False: the worker had already finished when the kill came
    redone: int  # node executions, after the kill, of tasks that had started before it
    redone_tasks: int  # distinct tasks among them (a reconciliation re-runs a node twice)
    redone_finished: int  # ... of which had returned before the kill (finished work lost)
    supersteps_redone: int  # distinct supersteps among the redone tasks
    repeated_effects: int  # tool effects that happened more than once
    asked_human: int  # reconciliations a human had to decide
    state_ok: bool
    load_ms: float | None  # a new process loading the latest checkpoint + pending writes


# -- the two subprocesses -------------------------------------------------------------------

def _worker(home: str, w: Workload, p: BenchPolicy, run_id: str, counters_dir: str) -> None:
    from ...engine.api.runtime import open as open_home

    counters = Counters(counters_dir, "crash")
    flow = w.flow(counters)
    with open_home(home, durability=p.durability) as engine:
        engine.register(flow)
        print("ready", flush=True)
        t0 = time.perf_counter()
        engine.start(flow.name, w.initial(), run_id=run_id, policy=p.policy)
        print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)


def _resume(home: str, w: Workload, p: BenchPolicy, run_id: str, counters_dir: str) -> None:
    from ...engine.api.runtime import open as open_home
    from ...engine.base.errors import UnknownRun

    counters = Counters(counters_dir, "resume")
    flow = w.flow(counters)
    asked = 0
    with open_home(home, durability=p.durability,
                   clock=lambda: time.time() + LEASE_SKIP) as engine:
        engine.register(flow)
        load = None
        try:
            run = engine.get(run_id)
        except UnknownRun:  # killed before the run was created: start it
            run = engine.start(flow.name, w.initial(), run_id=run_id, policy=p.policy)
        else:
            if run.status != Status.DONE:  # killed after the last commit: nothing to do
                t0 = time.perf_counter()
                engine._cursor(run.head)  # what resume loads: checkpoint + pending writes
                load = time.perf_counter() - t0
                run = engine.resume(run_id)
        while run.status == Status.NEEDS_RECONCILIATION and asked < 100:
            asked += 1
            _decide_like_a_human(engine, run, counters_dir)
            run = engine.resume(run_id)
        ok = run.status == Status.DONE and run.state == w.expected()
        print(json.dumps({"status": str(run.status), "state_ok": ok, "asked": asked,
                          "load_seconds": load}), flush=True)


def _decide_like_a_human(engine: Any, run: Any, counters_dir: str) -> None:
    """Look the idempotency key up in the tool's own records: done → mark_done, else retry."""
    waiting = run.waiting or {}
    intent = next(i for i in engine.intents(run.run_id) if i["key"] == waiting.get("intent"))
    effects = Counters.read_effects(counters_dir)
    turns = effects.get(intent["idempotency_key"])
    if turns:
        engine.decide(waiting["approval_id"], Decision.MARK_DONE, by="bench",
                      result={"ok": turns[0]})
    else:
        engine.decide(waiting["approval_id"], Decision.RETRY, by="bench")


def main(argv: list[str]) -> None:
    role, home, spec, policy, run_id, counters_dir = argv
    target = {"worker": _worker, "resume": _resume}[role]
    target(home, Workload.parse(spec), get(policy), run_id, counters_dir)


# -- the parent ---------------------------------------------------------------------------

def _spawn(role: str, home: Path, w: Workload, p: BenchPolicy, run_id: str,
           counters: Path) -> subprocess.Popen[str]:
    return start_worker("-m", "bide.bench.kit.crash", role, str(home), w.spec, p.name, run_id,
                        str(counters))


def _finish(proc: subprocess.Popen[str], what: str) -> list[str]:
    out, err = proc.communicate(timeout=300)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{what} exited {proc.returncode}:\n{err[-2000:]}")
    return out.splitlines()


def calibrate(w: Workload, p: BenchPolicy, root: Path) -> float:
    """Seconds the run takes in a worker process (from ``ready`` to done)."""
    home, counters = root / "calibrate" / "home", root / "calibrate" / "counters"
    lines = _finish(_spawn("worker", home, w, p, "r-cal", counters), "calibration worker")
    return float(json.loads(lines[-1])["seconds"])


def kill_once(w: Workload, p: BenchPolicy, root: Path, i: int, delay: float) -> KillResult:
    home, counters = root / f"k{i}" / "home", root / f"k{i}" / "counters"
    run_id = f"r-{i}"
    proc = _spawn("worker", home, w, p, run_id, counters)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        _finish(proc, "worker")
        raise RuntimeError(f"worker did not start: {line!r}")
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    _finish(proc, "worker")
    killed = proc.returncode == -signal.SIGKILL
    lines = _finish(_spawn("resume", home, w, p, run_id, counters), "resumer")
    if not lines:
        raise RuntimeError(f"resumer of {w.label} under {p.name} printed nothing")
    report = json.loads(lines[-1])
    return _count(counters, delay, killed, report)


def _count(counters: Path, delay: float, killed: bool, report: dict[str, Any]) -> KillResult:
    started_c, ended_c = Counters.read_execs(counters, "crash")
    started_r, _ = Counters.read_execs(counters, "resume")
    before = set(started_c)
    redone = [t for t in started_r if t in before]
    effects = Counters.read_effects(counters)
    return KillResult(
        delay=delay, killed=killed, redone=len(redone), redone_tasks=len(set(redone)),
        redone_finished=len({t for t in redone if t in ended_c}),
        supersteps_redone=len({t.split(":", 1)[0] for t in redone}),
        repeated_effects=sum(len(v) - 1 for v in effects.values()),
        asked_human=int(report["asked"]), state_ok=bool(report["state_ok"]),
        load_ms=None if report["load_seconds"] is None else 1000 * report["load_seconds"],
    )


def crash_policy(w: Workload, p: BenchPolicy, root: Path, *, kills: int, seed: int,
                 span: float | None = None, tick: Any = None) -> dict[str, Any]:
    """Kill ``kills`` times at seeded random moments in ``[0, span)``; aggregate the redo.

    ``span`` is the run's wall time; measured in a worker process when not given.
    """
    root.mkdir(parents=True, exist_ok=True)
    if span is None:
        span = calibrate(w, p, root)
    rng = random.Random(f"{seed}:{w.spec}:{p.name}")
    results = []
    for i in range(kills):
        results.append(kill_once(w, p, root, i, rng.uniform(0, span)))
        if tick is not None:
            tick()
    return summarize(w, p, span, results)


def summarize(w: Workload, p: BenchPolicy, span: float, results: list[KillResult]
              ) -> dict[str, Any]:
    n = len(results)
    return {
        "workload": w.kind, "spec": w.spec, "label": w.label, "policy": p.name,
        "width": w.width, "supersteps": w.supersteps, "run_seconds": span,
        "kills": n, "kills_mid_run": sum(r.killed for r in results),
        "redo_mean": sum(r.redone for r in results) / n,
        "redo_max": max(r.redone for r in results),
        "redo_tasks_max": max(r.redone_tasks for r in results),
        "redo_finished_mean": sum(r.redone_finished for r in results) / n,
        "redo_finished_max": max(r.redone_finished for r in results),
        "redo_supersteps_max": max(r.supersteps_redone for r in results),
        "kills_redo_beyond_one_superstep": sum(
            r.supersteps_redone > 1 or r.redone_tasks > w.width for r in results),
        "repeated_effects": sum(r.repeated_effects for r in results),
        "asked_human": sum(r.asked_human for r in results),
        "state_ok": all(r.state_ok for r in results),
        "resume_load_ms_median": _median([r.load_ms for r in results if r.load_ms is not None]),
        "kills_detail": [r.__dict__ for r in results],
    }


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


if __name__ == "__main__":
    main(sys.argv[1:])
