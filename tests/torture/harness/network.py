"""Network faults between workers and PostgreSQL: partitions, cuts, lost COMMIT replies,
latency, server restarts and crashes, clock skew, with real worker processes.

Each worker process (``tests/apps/net_app.py``) reaches the server through a proxy of
its own (``bench/kit/pg_proxy.py``), so a fault can hit one worker and not another.
Every tool's effect is a line in a file outside the store; each scenario ends by
reading the world, not only what bide says:

- **duplicated**: a non-idempotent call whose effect is in the world more than once,
  or effects of one call made by two workers (``notify`` applies a key once, as a real
  idempotent system does; its repeats are not effects);
- **lost**: a commit a worker was told had landed (``acked-<pid>``) that is not in the
  log;
- **finished**: runs DONE by the deadline; ``doctor``: the store checks clean.

``partition_after_prepare`` is the fault that once repeated effects: a worker cut off
right after its prepare's COMMIT reached the server, for longer than its lease, while
another worker takes the run over, settles the call and makes it. ``mixed_load`` runs
many runs on several workers under a stream of every fault at once. ``bide torture
--network`` runs both at length; the tests run them short (tests/test_pg_partitions.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bide.bench.kit.crashkit import worker_env
from bide.bench.kit.pg_proxy import Proxy

APP = Path(__file__).resolve().parents[2] / "apps" / "net_app.py"
STOP = 20.0  # seconds a worker gets to stop after SIGTERM before it is killed
NON_IDEMPOTENT = ("charge_card", "charge_unreconciled")


@dataclass
class Report:
    """What one pass of a scenario did and found."""

    scenario: str
    faults: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    finished: int = 0
    effects: int = 0
    duplicated: int = 0
    lost: int = 0
    doctor_ok: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return (self.finished == self.runs and self.duplicated == 0 and self.lost == 0
                and self.doctor_ok)

    def line(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()) if v)
        return (f"{self.scenario}: faults [{faults}]; runs {self.finished}/{self.runs} "
                f"finished; effects {self.effects}; duplicated {self.duplicated}; lost "
                f"{self.lost}; doctor {'clean' if self.doctor_ok else 'NOT clean'}; "
                f"{self.seconds:.1f}s")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the pieces ----------------------------------------------------------------------------
class Workers:
    """Worker processes of one scenario, each behind its own proxy; all stopped at the end."""

    def __init__(self, cluster: Any, db: str, workdir: Path, ttl: float) -> None:
        self.cluster, self.db, self.workdir, self.ttl = cluster, db, workdir, ttl
        self.procs: list[subprocess.Popen[str]] = []
        self.proxies: list[Proxy] = []

    def proxy(self) -> Proxy:
        p = Proxy(str(self.cluster.socket / ".s.PGSQL.5432"), name=f"proxy{len(self.proxies)}")
        self.proxies.append(p)
        return p

    def spawn(self, proxy: Proxy, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.Popen[str]:
        extra = {"BIDE_TEST_LEASE_TTL": str(self.ttl), **(env or {})}
        log = open(self.workdir / f"worker{len(self.procs)}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, str(APP), proxy.url(self.db),
                                 str(self.workdir), *args], env=worker_env(None, extra),
                                stdout=log, stderr=subprocess.STDOUT, text=True)
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for p in self.proxies:
            p.close()

    def faults(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for p in self.proxies:
            total.update({k: v for k, v in asdict(p.faults).items() if k != "connections"})
        return total


@contextmanager
def home(cluster: Any) -> Iterator[tuple[str, Any]]:
    """A fresh database made a bide home, and an engine on it reached directly (the
    harness's own view: deciding as a person would, reading the result)."""
    import bide

    db = cluster.create_database()
    engine = bide.open(cluster.url(db), durability="durable")
    try:
        yield db, engine
    finally:
        engine.close()
        cluster.drop_database(db)


def wait_until(check: Callable[[], bool], seconds: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


def submit(url: str, workdir: Path, flow: str, count: int) -> None:
    """Submit ``flow-0`` .. ``flow-<count-1>`` (the app has the flows; the harness does not)."""
    subprocess.run([sys.executable, str(APP), url, str(workdir), "submit", flow, str(count)],
                   env=worker_env(), check=True, timeout=60, capture_output=True)


def status_of(engine: Any, run_id: str) -> str | None:
    """The run's status, None while it does not exist yet."""
    from bide.engine.base.errors import UnknownRun

    try:
        return str(engine.get(run_id).status)
    except UnknownRun:
        return None


def effects_of(workdir: Path) -> list[list[str]]:
    path = workdir / "effects"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def duplicated(effects: list[list[str]]) -> int:
    """Calls applied more than once, or applied by two workers: any repeat is one."""
    by_call = Counter((tool, key) for tool, key, *_ in effects)
    return sum(n - 1 for n in by_call.values() if n > 1)


def lost_acks(workdir: Path, engine: Any) -> int:
    """Acknowledged commits (any worker's) whose records are not in the log."""
    acked = {int(s) for f in workdir.glob("acked-*") for line in f.read_text().splitlines()
             for s in line.split()}
    with engine.store.reader() as r:
        return sum(1 for seq in sorted(acked) if r.raw(seq) is None)


def doctor_clean(engine: Any) -> bool:
    return bool(engine.doctor().ok)


def decide_as_a_person(engine: Any, workdir: Path) -> int:
    """Settle every call in doubt as a careful person would: look at the world, then
    ``mark_done`` what happened and ``retry`` what did not. Returns how many."""
    from bide import Status

    done = 0
    applied = {(tool, key) for tool, key, *_ in effects_of(workdir)}
    for run in engine.runs(status=Status.NEEDS_RECONCILIATION):
        waiting = run.waiting or {}
        aid = waiting.get("approval_id")
        if aid is None:
            continue
        intent = next((i for i in engine.intents(run.run_id)
                       if i["key"] == waiting.get("intent")), None)
        if intent is None:
            continue
        happened = (intent["tool"], intent["idempotency_key"]) in applied
        try:
            engine.decide(aid, "mark_done" if happened else "retry", by="person",
                          reason="looked at the world", result={"charged": 10} if happened
                          else None)
            done += 1
        except Exception:  # noqa: BLE001 - decided meanwhile (another pass): look again later
            pass
    return done


def finish(report: Report, engine: Any, workdir: Path, run_ids: list[str]) -> Report:
    from bide import Status

    report.finished = sum(1 for r in run_ids if engine.get(r).status == Status.DONE)
    effects = effects_of(workdir)
    report.effects = len(effects)
    report.duplicated = duplicated(effects)
    report.lost = lost_acks(workdir, engine)
    report.doctor_ok = doctor_clean(engine)
    return report


# -- the scenarios -------------------------------------------------------------------------
def partition_after_prepare(cluster: Any, workdir: Path, *, ttl: float = 2.0,
                            settle: str = "reconciler", negative: bool = False) -> Report:
    """Worker A's prepare of ``charge`` commits, then A is cut off for 2.5 leases;
    worker B takes the run over, the call is settled (``settle``: the tool's reconciler
    says not done, or a person decides ``retry``) and B makes it. When the partition
    heals, A must not make the call. ``negative``: A's lease check switched off (the
    negative control: it must duplicate)."""
    flow, tool = ("pay", "charge_card") if settle == "reconciler" else \
        ("pay_asking", "charge_unreconciled")
    report = Report(f"partition after prepare ({settle}{', negative' if negative else ''})")
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    with home(cluster) as (db, engine):
        workers = Workers(cluster, db, workdir, ttl)
        try:
            pa, pb = workers.proxy(), workers.proxy()
            pa.partition_after_commit(tool.encode(), ttl * 2.5)
            workers.spawn(pb, "watch")
            switched = {"BIDE_TEST_SWITCHES": "no_lease_deadline"} if negative else None
            a = workers.spawn(pa, "start", "r-1", flow, env=switched)
            report.runs = 1
            deadline = ttl * 2.5 + 60
            if settle == "person":
                from bide import Status
                wait_until(lambda: status_of(engine, "r-1") == Status.NEEDS_RECONCILIATION,
                           deadline)
                decide_as_a_person(engine, workdir)
            from bide import Status
            wait_until(lambda: status_of(engine, "r-1") == Status.DONE, deadline)
            try:
                a.wait(deadline)
            except subprocess.TimeoutExpired:
                report.notes.append("worker A did not end")
            report.notes.append(f"worker A ended with {a.returncode}")
            if pa.armed():
                report.notes.append("the partition never started: A's prepare was not seen")
        finally:
            workers.stop()
        report.faults = dict(workers.faults())
        finish(report, engine, workdir, ["r-1"])
    report.seconds = time.monotonic() - started
    return report


@dataclass
class Load:
    """What ``mixed_load`` puts on the workers, and when."""

    runs: int = 12
    workers: int = 3
    ttl: float = 2.0
    seconds: float = 25.0  # faults are injected for this long, then the load must finish
    latency: tuple[float, float] = (0.05, 0.2)
    cuts_every: float = 1.5  # seconds between connection cuts (on a random worker)
    lost_replies_every: float = 2.0
    partitions: int = 1  # of one worker, each 2.5 leases long
    restarts: int = 1  # pg_ctl restart -m fast
    crashes: int = 1  # pg_ctl stop -m immediate, then start
    skew: float = 300.0  # one worker's clock is this far ahead (another's as far behind)
    seed: int = 0
    finish_within: float = 120.0


def mixed_load(cluster: Any, workdir: Path, load: Load | None = None) -> Report:
    """``load.runs`` ledger runs (three tool steps each) and one run that needs a person,
    on ``load.workers`` watchers, under every fault at once; then the world is read."""
    load = load or Load()
    rng = random.Random(load.seed)
    report = Report(f"mixed load ({load.workers} workers, {load.runs} runs)")
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    with home(cluster) as (db, engine):
        run_ids = [f"ledger-{i}" for i in range(load.runs)] + ["pay_asking-0"]
        submit(cluster.url(db), workdir, "ledger", load.runs)
        submit(cluster.url(db), workdir, "pay_asking", 1)
        report.runs = len(run_ids)
        workers = Workers(cluster, db, workdir, load.ttl)
        server: Counter[str] = Counter()
        try:
            proxies = [workers.proxy() for _ in range(load.workers)]
            skews = [load.skew, -load.skew] + [0.0] * load.workers
            for i, p in enumerate(proxies):
                p.latency = rng.uniform(*load.latency)
                workers.spawn(p, "watch", env={"BIDE_TEST_CLOCK_SKEW": str(skews[i]),
                                               "BIDE_TEST_TOOL_SLEEP": "0.05"})
            server = _faults_for(load, rng, proxies, cluster, engine, workdir)
            from bide import Status

            def all_done() -> bool:
                decide_as_a_person(engine, workdir)
                return all(engine.get(r).status == Status.DONE for r in run_ids)

            if not wait_until(all_done, load.finish_within, step=0.5):
                report.notes.append("not every run finished: " + ", ".join(
                    f"{r} {engine.get(r).status}" for r in run_ids
                    if engine.get(r).status != Status.DONE))
        finally:
            workers.stop()
        report.faults = dict(workers.faults() + server)
        finish(report, engine, workdir, run_ids)
    report.seconds = time.monotonic() - started
    return report


def _faults_for(load: Load, rng: random.Random, proxies: list[Proxy], cluster: Any,
                engine: Any, workdir: Path) -> Counter[str]:
    """Inject faults for ``load.seconds``: cuts and lost replies on random workers all
    along, partitions, a restart and a crash of the server at random moments."""
    server: Counter[str] = Counter()
    end = time.monotonic() + load.seconds
    plan = sorted([(rng.uniform(0.2, 0.8) * load.seconds, "partition")
                   for _ in range(load.partitions)]
                  + [(rng.uniform(0.2, 0.8) * load.seconds, "restart")
                     for _ in range(load.restarts)]
                  + [(rng.uniform(0.2, 0.8) * load.seconds, "crash")
                     for _ in range(load.crashes)])
    begun = time.monotonic()
    next_cut = begun + rng.expovariate(1 / load.cuts_every)
    next_lost = begun + rng.expovariate(1 / load.lost_replies_every)
    while time.monotonic() < end:
        now = time.monotonic()
        if plan and now - begun >= plan[0][0]:
            _, what = plan.pop(0)
            if what == "partition":
                rng.choice(proxies).partition(load.ttl * 2.5)
            elif what == "restart":
                cluster.restart("fast")
                server["server restarts"] += 1
            else:
                cluster.restart("immediate")
                server["server crashes"] += 1
        if now >= next_cut:
            rng.choice(proxies).cut()
            next_cut = now + rng.expovariate(1 / load.cuts_every)
        if now >= next_lost:
            rng.choice(proxies).lose_commit_reply()
            next_lost = now + rng.expovariate(1 / load.lost_replies_every)
        decide_as_a_person(engine, workdir)
        time.sleep(0.05)
    return server


# -- bide torture --network ------------------------------------------------------------------
def main(passes: int = 20, base: Path | None = None, seed: int = 0) -> int:
    """``passes`` of each scenario on a throwaway cluster; a line per pass, 1 on a failure."""
    import tempfile

    from bide.bench.kit.pg_server import throwaway

    base = Path(tempfile.mkdtemp(prefix="bide-net-")) if base is None else base
    failed = 0
    with throwaway() as cluster:
        for n in range(passes):
            for i, report in enumerate(_pass(cluster, base / f"pass{n}", seed + n)):
                print(json.dumps(report.as_dict()) if os.environ.get("BIDE_JSON")
                      else f"pass {n + 1}.{i + 1}: {report.line()}", flush=True)
                failed += not report.ok()
    print(f"{failed} failing scenario passes; trials in {base}", flush=True)
    return 1 if failed else 0


def _pass(cluster: Any, workdir: Path, seed: int) -> Iterator[Report]:
    yield partition_after_prepare(cluster, workdir / "reconciler")
    yield partition_after_prepare(cluster, workdir / "person", settle="person")
    # at length: the latencies (50-200 ms each way) need a lease well above a
    # commit's few round trips, and partitions longer than it
    yield mixed_load(cluster, workdir / "load", Load(
        runs=30, workers=3, ttl=10.0, seconds=90.0, latency=(0.05, 0.2), partitions=2,
        seed=seed, finish_within=300.0))


if __name__ == "__main__":
    threading.current_thread().name = "bide-net-torture"
    sys.exit(main())
