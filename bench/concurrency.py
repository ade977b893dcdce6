"""Many runs at once in one process: what group commit buys.

    python -m bide.bench.concurrency [--steps 200] [--repeat 3] [--flush-delay-us 1000]

- runs: 1, 2, 4 and 8 durable runs of a ``long`` chain (one node looping, B =
  100), each in its own thread, on ONE engine: total supersteps per second and
  the ratio to one run alone, with the write transactions and records per
  transaction (how many callers shared each flush);
- ceiling: the same 1 and 8 runs with no flush at all (``durability="fast"``),
  against one durable run: group commit can at best hide the flushes, so 8 fast
  runs are the most 8 durable runs can reach on this machine (the GIL runs one
  thread's Python at a time, and 8 threads pay for their hand-offs);
- batches: where the leader's time goes with 8 durable runs — the callers' bodies
  and the rest of the batch (nested transactions, the commit and its page flush), which
  LMDB's writer lock keeps one after the other; the meta-page flush that acknowledges a
  batch runs after the lock, overlapping the next batch — and so how many callers a batch would
  need for 8 runs to reach 4x one run at those costs (a round of its own: timing each
  body costs two clock reads);
- fan-out: ms per superstep of ``fanout4`` against ``linear`` (durable default
  policy), raw and net of the same flows run in memory (the durable cost).

Every figure is a median of ``repeat`` runs measured back to back, so a change in
the machine's load moves the baseline and the case together. ``--flush-delay-us``
runs it all as on a slower disk (``bench/kit/slow_flush.py``), where flushes, not
Python, are the limit.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine.api.runtime import open as open_home
from ..engine.base.vocabulary import Status
from ..engine.storage.store import WriteEvent
from .kit import noise, quick_size, slow_flush
from .kit.measure import baseline_seconds
from .kit.workloads import Workload

RUNS = (1, 2, 4, 8)
TARGET_RUNS = 4.0  # 8 runs >= 4x one run's supersteps per second
TARGET_FANOUT = 1.5  # a fan-out-4 superstep's durable cost <= 1.5x a chain superstep's
_JOIN = 120.0  # seconds: a run thread that has not finished by then is a failure


def concurrent_runs(home: Path, runs: int, steps: int, *, durability: str = "durable"
                    ) -> dict[str, Any]:
    """``runs`` chains of ``steps`` supersteps in ``runs`` threads of one engine."""
    w = Workload("long", steps, 100)
    flow = w.flow()
    with open_home(home, durability=durability) as engine:
        engine.register(flow)
        engine.start(flow.name, w.initial(), run_id="warmup")
        sizes: list[int] = []

        def count(event: WriteEvent) -> None:
            # no lock: list.append is atomic under the GIL, and a lock that 8 threads take
            # after every commit cost the no-flush runs 10-15% (it is the bench's, not bide's)
            if event.kind == "commit" and not event.refused:
                sizes.append(len(event.seqs))

        stop = engine.store.on_commit(count)
        txns0 = _transactions(engine)

        def one(k: int) -> None:
            run = engine.start(flow.name, w.initial(), run_id=f"c{k}")
            if run.status != Status.DONE or run.state != w.expected():
                raise AssertionError(f"run c{k} ended {run.status}")

        try:
            seconds = in_threads(one, runs, "bench-run")
        finally:
            stop()
        txns = _transactions(engine) - txns0
    return {"runs": runs, "supersteps": runs * steps, "seconds": seconds,
            "steps_per_s": runs * steps / seconds, "commits": len(sizes),
            "transactions": txns, "commits_per_transaction": len(sizes) / max(txns, 1)}


def in_threads(fn: Callable[[int], None], n: int, name: str) -> float:
    """Seconds to run ``fn(0)`` .. ``fn(n - 1)`` in ``n`` threads started together.

    Raises:
        AssertionError: a call raised (each one's exception named), or a thread was
            still running after ``_JOIN`` seconds.
    """
    errors: list[str] = []

    def guarded(k: int) -> None:
        try:
            fn(k)
        except BaseException as exc:  # noqa: BLE001 - reported below, in the caller
            errors.append(f"{name}-{k}: {exc!r}")

    threads = [threading.Thread(target=guarded, args=(k,), name=f"{name}-{k}")
               for k in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(_JOIN)
    seconds = time.perf_counter() - t0
    if errors or any(t.is_alive() for t in threads):
        raise AssertionError(f"{n} threads did not all finish: {errors}")
    return seconds


def _transactions(engine: Any) -> int:
    """Write transactions the engine's store committed so far (batches, not callers)."""
    return int(engine.store.batches)


CEILING = (1, RUNS[-1])  # runs measured with no flush at all (durability "fast")


def runs_table(root: Path, *, steps: int = 200, repeat: int = 3) -> list[dict[str, Any]]:
    """One row per concurrency in ``RUNS`` (durable), then one per ``CEILING`` (fast):
    medians of ``repeat`` rounds, interleaved; every ratio is to one durable run."""
    cases = [(n, "durable") for n in RUNS] + [(n, "fast") for n in CEILING]
    samples: dict[tuple[int, str], list[dict[str, Any]]] = {c: [] for c in cases}
    for i in range(repeat):
        for n, durability in cases:
            samples[n, durability].append(concurrent_runs(
                root / f"runs-{durability}-{n}-{i}", n, steps, durability=durability))
    rows = []
    for n, durability in cases:
        row = dict(samples[n, durability][0], durability=durability)
        for key in ("seconds", "steps_per_s", "commits_per_transaction"):
            row[key] = statistics.median(s[key] for s in samples[n, durability])
        rows.append(row)
    one = rows[0]["steps_per_s"]
    for row in rows:
        row["ratio"] = row["steps_per_s"] / one
    return rows


def durable_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of durable runs (older results have no ``durability``: all durable)."""
    return [r for r in rows if r.get("durability", "durable") == "durable"]


def ceiling(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The no-flush row of the most runs, or None for results measured without it."""
    fast = [r for r in rows if r.get("durability") == "fast"]
    return max(fast, key=lambda r: r["runs"]) if fast else None


def batch_breakdown(home: Path, runs: int, steps: int) -> dict[str, Any]:
    """Per write transaction of ``runs`` durable runs in threads: callers, the time in
    their bodies (the engine's records, fences and folds, run by the leader under LMDB's
    writer lock) and the rest of the batch (begin, nested transactions, hot cache, the
    commit with its flushes). Batches are serial (one leader at a time), so the runs'
    supersteps over the batches' time bounds their supersteps per second
    (``implied_steps_per_s``, to compare with ``steps_per_s``, measured around them)."""
    from ..engine.storage.lmdb_store import LMDBStore, _Body  # the bench's look inside the store

    w = Workload("long", steps, 100)
    flow = w.flow()
    batches: list[tuple[int, float, float]] = []  # callers, seconds in bodies, in the batch
    with open_home(home, durability="durable") as engine:
        engine.register(flow)
        engine.start(flow.name, w.initial(), run_id="warmup")
        assert isinstance(engine.store, LMDBStore)  # group commit is LMDB's
        commits = engine.store._commits
        real = commits._run_batch

        def timed(batch: list[Any]) -> Any:
            spent = [0.0]
            for request in batch:
                body = request.body
                if isinstance(body, _Body):  # keep the body (the batch checks its type)
                    if body.staged is not None:
                        body.staged = _clocked(body.staged, spent)
                    elif body.plain is not None:
                        body.plain = _clocked(body.plain, spent)
            t0 = time.perf_counter()
            try:  # the flush that acknowledges the batch runs after the lock: not counted
                return real(batch)
            finally:
                batches.append((len(batch), spent[0], time.perf_counter() - t0))

        commits._run_batch = timed
        point = engine.store._durable
        flushed = point.flushes if point is not None else 0
        try:
            def one(k: int) -> None:
                engine.start(flow.name, w.initial(), run_id=f"b{k}")

            seconds = in_threads(one, runs, "bench-batch")
        finally:
            commits._run_batch = real
        flushed = (point.flushes if point is not None else 0) - flushed
    callers = sum(b[0] for b in batches)
    bodies, total = sum(b[1] for b in batches), sum(b[2] for b in batches)
    n = len(batches)
    return {"runs": runs, "transactions": n, "callers_per_batch": callers / n,
            "body_ms_per_caller": 1000 * bodies / callers,
            "rest_ms_per_batch": 1000 * (total - bodies) / n,
            "outside_flushes_per_batch": flushed / n,  # acknowledging flushes, after the lock
            # batches are serial and inside the timed window: a bound on the table's rate
            "batch_ms": 1000 * total / n, "implied_steps_per_s": runs * steps / total,
            "steps_per_s": runs * steps / seconds}


def _clocked(fn: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    def clocked(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            spent[0] += time.perf_counter() - t0
    return clocked


def callers_needed(one_run_steps_per_s: float, body_ms: float, rest_ms: float,
                   target: float = TARGET_RUNS) -> float:
    """Callers a batch must hold for bodies and rest, one after the other, to reach
    ``target`` x one run: n * (superstep budget - body) >= rest (inf: never)."""
    budget_ms = 1000 / (target * one_run_steps_per_s)
    return rest_ms / (budget_ms - body_ms) if budget_ms > body_ms else float("inf")


def fanout_cost(root: Path, *, size: int = 50, repeat: int = 5) -> dict[str, Any]:
    """ms per superstep of fanout4 and linear (durable default), raw and over memory.

    The two flows run alternately, ``repeat`` times each, so that a change in the
    disk's flush time (other processes' I/O) hits both alike.
    """
    kinds = ("linear", "fanout4")
    loads = {k: Workload(k, size, 100) for k in kinds}
    flows = {k: w.flow() for k, w in loads.items()}
    memory = {k: baseline_seconds(w, repeat) for k, w in loads.items()}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    txns: dict[str, int] = dict.fromkeys(kinds, 0)
    with open_home(root / "linear", durability="durable") as a, \
            open_home(root / "fanout4", durability="durable") as b:
        engines = {"linear": a, "fanout4": b}
        for k in kinds:
            engines[k].register(flows[k])
            engines[k].start(flows[k].name, loads[k].initial(), run_id="warmup")
        for i in range(repeat):
            for k in kinds:
                before = _transactions(engines[k])
                t0 = time.perf_counter()
                engines[k].start(flows[k].name, loads[k].initial(), run_id=f"r{i}")
                times[k].append(time.perf_counter() - t0)
                txns[k] += _transactions(engines[k]) - before
    out: dict[str, Any] = {}
    for k in kinds:
        seconds = statistics.median(times[k])
        out[k] = {"ms_per_superstep": 1000 * seconds / size,
                  "memory_ms_per_superstep": 1000 * memory[k] / size,
                  "durable_ms_per_superstep": 1000 * (seconds - memory[k]) / size,
                  "transactions_per_superstep": txns[k] / (repeat * size)}
    out["ratio"] = out["fanout4"]["ms_per_superstep"] / out["linear"]["ms_per_superstep"]
    out["durable_ratio"] = (out["fanout4"]["durable_ms_per_superstep"]
                            / out["linear"]["durable_ms_per_superstep"])
    return out


def run(root: Path, *, quick: bool) -> dict[str, Any]:
    """The rows ``bide bench`` shows: concurrent runs, then the fan-out cost."""
    steps, repeat = (40, 1) if quick else (200, 3)
    return {"runs": runs_table(root / "runs", steps=steps, repeat=repeat),
            "batches": batch_breakdown(root / "batches", RUNS[-1], steps),
            "fanout": fanout_cost(root / "fanout", size=20 if quick else 50,
                                  repeat=3 if quick else 5)}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The two many-runs targets, in ``report.targets``' shape (absent: not measured)."""
    got = results.get("concurrency")
    if not got:
        return []
    eight = next(r for r in durable_rows(got["runs"]) if r["runs"] == RUNS[-1])
    top = ceiling(got["runs"])
    bound = "" if top is None else f"; no flush at all: {top['ratio']:.2f}x"
    fan = got["fanout"]
    return [
        {"target": f"{RUNS[-1]} concurrent durable runs vs one (steps/s, one process)",
         "limit": f">= {TARGET_RUNS:g}x", "measured": eight["ratio"],
         "met": eight["ratio"] >= TARGET_RUNS,
         "detail": f"{eight['commits_per_transaction']:.1f} commits per transaction{bound}"},
        {"target": "fan-out-4 superstep's durable cost vs a chain superstep's",
         "limit": f"<= {TARGET_FANOUT:g}x", "measured": fan["durable_ratio"],
         "met": fan["durable_ratio"] <= TARGET_FANOUT,
         "detail": f"{fan['fanout4']['transactions_per_superstep']:.2f} vs "
                   f"{fan['linear']['transactions_per_superstep']:.2f} transactions/superstep"},
    ]


def section(results: dict[str, Any]) -> list[str]:
    """The lines ``report.render`` prints for these rows (none if not measured)."""
    got = results.get("concurrency")
    if not got:
        return []
    return ["Many runs at once (durable, threads of one process, one engine; group commit)",
            render(got["runs"], got["fanout"], got.get("batches"),
                   quick=bool(results.get("meta", {}).get("quick"))), ""]


def render(rows: list[dict[str, Any]], fan: dict[str, Any],
           batches: dict[str, Any] | None = None, *, quick: bool = False) -> str:
    """The table and its two verdicts (``n/a at quick size`` for a quick run: see
    ``quick_size``), and where a batch's time goes (absent in older results)."""
    lines = ["runs  durability  supersteps/s  ratio  callers/txn",
             *(f"{r['runs']:>4}  {r.get('durability', 'durable'):>10}  "
               f"{r['steps_per_s']:>12.0f}  {r['ratio']:>5.2f}  "
               f"{r['commits_per_transaction']:>11.2f}" for r in rows)]
    eight = durable_rows(rows)[-1]["ratio"]
    met = quick_size.NA if quick else "met" if eight >= TARGET_RUNS else "not met"
    lines.append(f"8 runs >= {TARGET_RUNS:g}x one run: {met} ({eight:.2f}x)")
    top = ceiling(rows)
    if top is not None:
        lines.append(f"ceiling: {top['runs']} runs with no flush at all reach {top['ratio']:.2f}x "
                     f"one durable run (group commit can at most hide the flushes)")
    if batches is not None:
        lines.append(batch_line(batches, durable_rows(rows)[0]["steps_per_s"]))
    for kind in ("linear", "fanout4"):
        f = fan[kind]
        lines.append(f"{kind:8} {f['ms_per_superstep']:.2f} ms/superstep "
                     f"(memory {f['memory_ms_per_superstep']:.2f}, durable cost "
                     f"{noise.text(f['durable_ms_per_superstep'])}, "
                     f"{f['transactions_per_superstep']:.2f} transactions/superstep)")
    met = quick_size.NA if quick else "met" if fan["durable_ratio"] <= TARGET_FANOUT \
        else "not met"
    lines.append(f"fanout4 durable cost <= {TARGET_FANOUT:g}x linear: {met} "
                 f"({noise.text(fan['durable_ratio'])}x; raw {fan['ratio']:.2f}x)")
    return "\n".join(lines)


def batch_line(b: dict[str, Any], one_run_steps_per_s: float) -> str:
    """Where a batch of the 8 runs spends its time, and what 4x would take."""
    need = callers_needed(one_run_steps_per_s, b["body_ms_per_caller"], b["rest_ms_per_batch"])
    needed = (f"need >= {need:.0f} callers a batch" if need != float("inf") else
              "be out of reach at any batch size (the bodies alone take the budget)")
    return (f"batches of {b['runs']} runs: {b['callers_per_batch']:.1f} callers, bodies "
            f"{b['body_ms_per_caller'] * 1000:.0f} us each then {b['rest_ms_per_batch']:.2f} ms "
            f"of nested transactions, commit and page flush, serial under LMDB's writer lock; "
            f"{b.get('outside_flushes_per_batch', 0):.2f} meta-page flushes a batch after it, "
            f"overlapping the next batch (bound {b['implied_steps_per_s']:.0f} supersteps/s; "
            f"measured "
            f"{b['steps_per_s']:.0f}); {TARGET_RUNS:g}x one run would {needed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--flush-delay-us", type=int, default=0, metavar="US",
                    help="make every flush this much slower (a slower disk's; needs cc)")
    args = ap.parse_args()
    if args.flush_delay_us:
        with tempfile.TemporaryDirectory(prefix="bide-slow-") as where:
            slow_flush.reexec_slow(args.flush_delay_us, Path(where))
        print(f"every flush made {args.flush_delay_us} us slower (bench/kit/slow_flush.c)")
    with tempfile.TemporaryDirectory(prefix="bide-conc-") as tmp:
        rows = runs_table(Path(tmp), steps=args.steps, repeat=args.repeat)
        batches = batch_breakdown(Path(tmp) / "batches", RUNS[-1], args.steps)
        fan = fanout_cost(Path(tmp) / "fan", repeat=max(args.repeat, 3))
    print(render(rows, fan, batches))


if __name__ == "__main__":
    main()
