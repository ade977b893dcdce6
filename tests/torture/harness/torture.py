"""The torture suite: crash at every fault point, kill at random moments, count what broke.

Two long-lived worker processes (``python -m bide.tests.torture.harness.torture --worker``)
take trials from the parent. A worker imports bide once and never opens a
store itself; each phase of a trial runs in a child it forks (so a child
starts in milliseconds, opens the store after the fork as DESIGN.md asks, and
dies by a real SIGKILL or ``os._exit``):

1. the crash child drives the workload with one fault armed
   (``BIDE_FAULT``-style ``point:occurrence:mode``) and dies there, or the
   worker SIGKILLs it after a seeded random delay;
2. the finish child, with no fault, reads what the store holds, drives the
   run to its end (resume, approvals through the inbox and a watcher,
   reconciliation decided by looking at the world) and reports.

The worker then checks the invariants against a fault-free run of the same
workload and returns counts. ``Tally`` adds them up into the published table.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bide.bench.kit.crashkit import count_effects, in_fork, record_effect
from bide.engine.base.faults import FAULT_POINTS

from . import workloads as w  # imported once by each worker, before it forks: a warm parent

MODES = ("kill", "exit")
DURABILITIES = ("durable", "fast")
SHM = Path("/dev/shm")


def scratch_dir() -> Path | None:
    """Where trials run by default: tmpfs when there is one, else the system's temp folder.

    A trial kills processes, never the machine, so what it checks lives in the page cache
    either way; on tmpfs the durable trials' fsyncs cost nothing (2.6x faster per trial).
    """
    return SHM if SHM.is_dir() and os.access(SHM, os.W_OK | os.X_OK) else None


# -- children ---------------------------------------------------------------------------------
def _arm(trial: Path, spec: str | None, switches: str, *, log_commits: bool = True) -> None:
    """In a child: trace every point hit, arm the fault, log every commit's seqs."""
    from bide.engine.base import faults
    from bide.engine.storage.store import WriteEvent, observe

    os.environ["BIDE_FAULT_TRACE"] = str(trial / "trace")
    faults.configure(spec, switches=switches)
    if not log_commits:
        return
    commits = trial / "commits"

    def logged(event: WriteEvent) -> None:
        if event.kind == "commit" and event.seqs:  # durable now: must survive any crash
            record_effect(commits, "\n".join(str(s) for s in event.seqs))

    observe(logged)


def _crash_child(trial: Path, workload: str, durability: str, spec: str | None,
                 switches: str) -> Callable[[], Any]:
    def run() -> Any:
        _arm(trial, spec, switches)
        return w.drive(trial / "home", workload, durability, w.World(trial / "effects"))

    return run


def _finish_child(trial: Path, workload: str, durability: str,
                  switches: str) -> Callable[[], Any]:
    def run() -> Any:
        _arm(trial, None, switches, log_commits=False)
        home = trial / "home"
        before = w.facts(home, workload, durability)
        drove = w.drive(home, workload, durability, w.World(trial / "effects"))
        return {"before": before, "drove": drove, "final": w.final(home, workload, durability)}

    return run


# -- the worker's side of a trial ---------------------------------------------------------------
_refs: dict[tuple[str, str], dict[str, Any]] = {}


def reference(base: Path, workload: str, durability: str) -> dict[str, Any]:
    """A fault-free run: final state, effects, how often each fault point is hit, duration."""
    key = (workload, durability)
    w.warm(workload)
    if key not in _refs:
        trial = Path(tempfile.mkdtemp(prefix=f"ref-{workload}-", dir=base))
        t0 = time.monotonic()
        kind, value = in_fork(trial, "ref", _crash_child(trial, workload, durability, None, ""))
        took = time.monotonic() - t0
        if kind != "ok":
            raise RuntimeError(f"the fault-free {workload} run failed: {value}")
        kind, fin = in_fork(trial, "final", _final_child(trial, workload, durability))
        if kind != "ok":
            raise RuntimeError(f"reading the fault-free {workload} run failed: {fin}")
        _refs[key] = {"effects": _effects(trial), "final": fin, "took": took,
                      "points": Counter((trial / "trace").read_text().split())}
        shutil.rmtree(trial, ignore_errors=True)
    return _refs[key]


def _final_child(trial: Path, workload: str, durability: str) -> Callable[[], Any]:
    def run() -> Any:
        return w.final(trial / "home", workload, durability)

    return run


def _effects(trial: Path) -> Counter[str]:
    return count_effects(trial / "effects")


def trial(job: dict[str, Any]) -> dict[str, Any]:
    """One crash and its recovery, checked. ``job`` names the fault or the random delay."""
    base = Path(job["base"])
    workload, durability, switches = job["workload"], job["durability"], job.get("switches", "")
    ref = reference(base, workload, durability)
    tdir = Path(tempfile.mkdtemp(prefix="t-", dir=base))
    spec = job.get("fault")
    delay = None
    if spec is None:  # a random kill: a seeded moment within the fault-free run's duration
        # within the fault-free run's duration (measured once, maybe under other load, so
        # aim inside it: a kill after the run ended injects nothing)
        delay = random.Random(job["seed"]).uniform(0.0, ref["took"] * 0.8)
    kind, value = in_fork(tdir, "crash", _crash_child(tdir, workload, durability, spec,
                                                       switches), kill_after=delay)
    out: dict[str, Any] = {"job": job, "injected": kind == "killed", "violations": []}
    if kind == "error":
        out["violations"].append(f"the crashed worker raised instead of dying: {value}")
    if kind == "killed":
        trace = (tdir / "trace").read_text().split() if (tdir / "trace").exists() else []
        out["point"] = spec.split(":")[0] if spec else (trace[-1] if trace else "start")
        kind, value = in_fork(tdir, "finish", _finish_child(tdir, workload, durability,
                                                             switches))
        if kind != "ok":
            out["violations"].append(f"recovery failed: {value}")
            out["watcher_crashes"] = int("Watcher" in str(value) or "watcher" in str(value))
        else:
            out.update(check(workload, ref, value, _effects(tdir), _commits(tdir)))
    if out["violations"] and job.get("keep", True):
        out["dir"] = str(tdir)
    else:
        shutil.rmtree(tdir, ignore_errors=True)
    return out


def _commits(trial: Path) -> list[int]:
    path = trial / "commits"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def check(workload: str, ref: dict[str, Any], got: dict[str, Any], effects: Counter[str],
          commits: list[int]) -> dict[str, Any]:
    """The invariants, against the fault-free reference. Returns counts and violations."""
    before, drove, fin = got["before"], got["drove"], got["final"]
    bad: list[str] = []
    present = set(before["seqs"])
    if workload == "maintain":  # prune removes records on purpose; seqs never go backwards
        lost = [s for s in commits if s > before["last_seq"]]
    else:
        lost = [s for s in commits if s not in present]
    if lost:
        bad.append(f"lost commits: seqs {lost[:5]} were committed but are gone")
    if fin["status"] != "DONE" or fin["state"] != ref["final"]["state"]:
        bad.append(f"final {fin['status']} state {fin['state']} != reference "
                   f"{ref['final']['state']}")
    if fin["doctor"]:
        bad.append(f"doctor: {fin['doctor'][:3]}")
    refx = ref["effects"]
    if workload == "langgraph":  # its keys come from LangGraph's task ids: new every run
        bad += w.one_key_per_call(effects)
        effects, refx = w.by_tool(effects), w.by_tool(refx)
    for task in before["committed"]:
        if effects[task] != refx[task]:
            bad.append(f"{task} was committed before the crash yet ran {effects[task]} times "
                       f"(reference {refx[task]})")
    nodes = {k for k in set(effects) | set(refx) if k.startswith("node:")}
    pauses = drove.get("unknown_surfaced", 0)  # a node that paused runs again once decided
    for line in sorted(nodes):
        if not refx[line] <= effects[line] <= refx[line] + 1 + pauses:
            bad.append(f"{line} ran {effects[line]} times (reference {refx[line]})")
    dup = 0
    for line, n in effects.items():
        tool = line[5:].split()[0] if line.startswith("tool:") else None
        if tool in w.NON_IDEMPOTENT and n > 1:
            dup += n - 1
            bad.append(f"non-idempotent {line} happened {n} times")
        if tool in w.RECONCILED and n != refx[line]:
            bad.append(f"reconciled {line} happened {n} times (reference {refx[line]})")
    for tool in w.IDEMPOTENT:
        keys, want = ({k for k in d if k.startswith(f"tool:{tool} ")} for d in (effects, refx))
        if keys != want:
            bad.append(f"idempotent {tool} was called with keys {sorted(keys)}, not {sorted(want)}")
    doubtful = [t for t in before["unknown"] if t in w.NON_IDEMPOTENT]
    if doubtful and not drove.get("unknown_surfaced"):
        bad.append(f"{doubtful} had an unknown outcome but the run never asked for a decision")
    return {"violations": bad, "lost_commits": len(lost), "duplicated_effects": dup,
            "unknown_surfaced": drove.get("unknown_surfaced", 0),
            "resumed": drove.get("resumed", 0) + drove.get("watched", 0)}


def worker_main() -> None:
    """The worker loop (``python -m bide.tests.torture.harness.torture --worker``): one JSON
    job per line in, one result per line out."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            if job.get("kind") == "reference":
                ref = reference(Path(job["base"]), job["workload"], job["durability"])
                result = {"workload": job["workload"], "points": ref["points"],
                          "took": ref["took"]}
            elif job.get("kind") == "corpus":
                from .corpus import run_corpus

                result = run_corpus(Path(job["base"]), job.get("count"))
            else:
                result = trial(job)
        except Exception:  # noqa: BLE001 - a harness failure is reported, not fatal
            result = {"job": job, "injected": False, "violations": [traceback.format_exc()],
                      "harness_error": True}
        out.write(json.dumps(result, default=str) + "\n")


# -- the parent: a pool of workers -----------------------------------------------------------
class Pool:
    """``jobs`` long-lived worker processes; ``map`` yields results as they finish."""

    def __init__(self, jobs: int = 2, env: dict[str, str] | None = None) -> None:
        root = Path(__file__).resolve().parents[4]  # the folder that holds the bide checkout
        full = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
        full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), full.get("PYTHONPATH")]))
        full.update(env or {})
        self.procs = [subprocess.Popen([sys.executable, "-m", "bide.tests.torture.harness.torture",
                                        "--worker"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       env=full) for _ in range(jobs)]

    def map(self, jobs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        import queue

        todo: queue.Queue[dict[str, Any] | None] = queue.Queue()
        done: queue.Queue[dict[str, Any]] = queue.Queue()
        n = 0
        for job in jobs:
            todo.put(job)
            n += 1

        def serve(proc: subprocess.Popen[str]) -> None:
            while True:
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    return
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(json.dumps(job) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                done.put(json.loads(line) if line else {
                    "job": job, "injected": False, "harness_error": True,
                    "violations": ["a torture worker died"]})
                if not line:
                    return

        threads = [threading.Thread(target=serve, args=(p,), daemon=True) for p in self.procs]
        for t in threads:
            t.start()
        for _ in range(n):
            yield done.get()

    def close(self) -> None:
        for p in self.procs:
            if p.stdin:
                p.stdin.close()
        for p in self.procs:
            p.wait(timeout=30)
            if p.stdout:
                p.stdout.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- plans and the table ---------------------------------------------------------------------
def matrix_jobs(base: Path, points: dict[str, Counter[str]], *, occurrences: int | None,
                workloads: Iterable[str], durabilities: Iterable[str] = DURABILITIES,
                modes: Iterable[str] = MODES, only: Iterable[str] | None = None,
                switches: str = "", repeat: int = 1) -> list[dict[str, Any]]:
    """Every fault point × occurrence 1..K (as often as the fault-free run hits it) × mode ×
    workload × durability. ``points[workload]`` is the fault-free trace count."""
    jobs = []
    for _ in range(repeat):
        for workload in workloads:
            for point, hits in sorted(points[workload].items()):
                if only is not None and point not in only:
                    continue
                if point not in w.MATRIX_POINTS.get(workload, (point,)):
                    continue
                for k in range(1, min(hits, occurrences or hits) + 1):
                    for mode in modes:
                        for durability in durabilities:
                            jobs.append({"base": str(base), "workload": workload,
                                         "durability": durability, "switches": switches,
                                         "fault": f"{point}:{k}:{mode}"})
    return jobs


def random_jobs(base: Path, n: int, seed: int, workload: str = "long") -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"base": str(base), "workload": workload, "durability": rng.choice(DURABILITIES),
             "seed": rng.randrange(2 ** 32), "trial": i} for i in range(n)]


@dataclass
class Tally:
    """The published counts."""

    points_covered: set[str] = field(default_factory=set)
    crashes: int = 0
    not_reached: int = 0
    resumed: int = 0
    lost_commits: int = 0
    duplicated_effects: int = 0
    unknown_surfaced: int = 0
    hostile_rejected: int = 0
    hostile_total: int = 0
    watcher_crashes: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)

    def add(self, r: dict[str, Any]) -> None:
        if r.get("injected"):
            self.crashes += 1
            if r.get("point") in FAULT_POINTS:
                self.points_covered.add(r["point"])
        elif "fault" in r.get("job", {}) and not r.get("violations"):
            self.not_reached += 1
        self.resumed += r.get("resumed", 0)
        self.lost_commits += r.get("lost_commits", 0)
        self.duplicated_effects += r.get("duplicated_effects", 0)
        self.unknown_surfaced += r.get("unknown_surfaced", 0)
        self.watcher_crashes += r.get("watcher_crashes", 0)
        if r.get("violations"):
            self.failures.append(r)

    def rows(self, total_points: int) -> list[tuple[str, str]]:
        return [
            ("fault points covered", f"{len(self.points_covered)}/{total_points}"),
            ("crashes injected", f"{self.crashes:,}"),
            ("runs resumed", f"{self.resumed:,}"),
            ("lost commits", str(self.lost_commits)),
            ("duplicated non-idempotent effects", str(self.duplicated_effects)),
            ("unknown outcomes surfaced", f"{self.unknown_surfaced:,}"),
            ("hostile files rejected", f"{self.hostile_rejected}/{self.hostile_total}"),
            ("watcher crashes", str(self.watcher_crashes)),
            ("trials with a violation", str(len(self.failures))),
        ]

    def table(self, total_points: int) -> str:
        rows = self.rows(total_points)
        width = max(len(k) for k, _ in rows)
        lines = [f"| {'what':<{width}} | count |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
        return "\n".join(lines)


@dataclass
class Plan:
    """How big a torture run is. ``nightly()`` is the ≥100,000-crash size.

    One matrix round is ~724 trials (every occurrence of every point); 30 rounds and
    20,000 random kills made only ~42,000 crashes, so the nightly size is 60 rounds
    (~43,000 crashes) plus 75,000 random kills (~87% land before the run ends): ~108,000.
    """

    occurrences: int | None = 12
    repeat: int = 1
    random_trials: int = 450
    corpus: bool = True
    seed: int = 0
    jobs: int = 2
    workloads: tuple[str, ...] = field(default_factory=lambda: w.WORKLOADS if w.langgraph_here()
                                       else tuple(x for x in w.WORKLOADS if x != "langgraph"))

    @classmethod
    def nightly(cls, seed: int = 0) -> Plan:
        return cls(occurrences=None, repeat=60, random_trials=75_000, seed=seed)


def run(plan: Plan, base: Path, *, progress: Callable[[int, int], None] | None = None,
        on_result: Callable[[dict[str, Any]], None] | None = None) -> Tally:
    """Run the matrix, the random trials and the corpus; return the tally."""
    from .corpus import corpus_size

    tally = Tally()
    with Pool(plan.jobs) as pool:
        ref_jobs = [{"kind": "reference", "base": str(base), "workload": w,
                     "durability": "fast"} for w in plan.workloads]
        refs = {r["workload"]: Counter(r["points"]) for r in pool.map(ref_jobs)}
        jobs = matrix_jobs(base, refs, occurrences=plan.occurrences, workloads=plan.workloads,
                           repeat=plan.repeat)
        jobs += random_jobs(base, plan.random_trials, plan.seed)
        if plan.corpus:
            jobs.append({"kind": "corpus", "base": str(base)})
        total = len(jobs)
        for i, res in enumerate(pool.map(jobs), 1):
            if "hostile_total" in res:
                tally.hostile_total += res["hostile_total"]
                tally.hostile_rejected += res["hostile_rejected"]
                tally.watcher_crashes += res["watcher_crashes"]
                if res["violations"]:
                    tally.failures.append(res)
            else:
                tally.add(res)
            if on_result:
                on_result(res)
            if progress:
                progress(i, total)
    assert corpus_size() > 0
    return tally


def main(*, trials: int | None, seed: int, occurrences: int | None, repeat: int | None,
         nightly: bool, jobs: int, base: Path | None) -> int:
    """What ``bide torture`` does (its options are in ``bide/bench/torture.py``); the exit code."""
    import click

    plan = Plan.nightly(seed) if nightly else Plan(seed=seed)
    if trials is not None:
        plan.random_trials = trials
    if occurrences is not None:
        plan.occurrences = occurrences or None
    if repeat is not None:
        plan.repeat = repeat
    plan.jobs = jobs
    work = Path(tempfile.mkdtemp(prefix="bide-torture-", dir=base or scratch_dir()))
    t0 = time.monotonic()
    with click.progressbar(length=1, label="torture", file=sys.stderr) as bar:
        def progress(i: int, total: int) -> None:
            bar.length = total
            bar.update(1)

        tally = run(plan, work, progress=progress)
    click.echo(tally.table(len(FAULT_POINTS)))
    took = time.monotonic() - t0
    click.echo(f"({took:.0f}s, {tally.crashes / max(took, 1e-9):.1f} crashes/s, seed {seed}, "
               f"{plan.jobs} workers, in {work})", err=True)
    for f in tally.failures[:20]:
        click.echo(f"FAILED seed={seed} {f.get('job')} at {f.get('point')}: "
                   f"{f['violations'][:3]} (kept in {f.get('dir')})", err=True)
    if not tally.failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
