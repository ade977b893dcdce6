"""Why 8 runs in 8 threads do not reach 4x one run: what an LMDB call costs under the GIL.

    python -m bide.bench.gil_handoff [--iterations 3000] [--steps 300]

py-lmdb releases the GIL around every call (``begin``, ``put``, ``putmulti``,
``commit``), so that another thread may run while LMDB works. With threads that
all have Python to run, each release hands the GIL to one of them, and the
caller waits to get it back. Two measurements, each against one thread in the
same run:

- raw: each thread repeats ~9 us of Python and then one write transaction of six
  100 B puts (no flush), on an LMDB environment of its own; the same with the six
  values set in a dict instead (nothing released);
- engine: ``long`` runs (B = 100) with ``durability="fast"``: 8 runs on one
  engine (their commits share write transactions, ``engine/storage/group_commit.py``)
  and 8 runs on 8 engines of their own (every thread makes its own LMDB calls).

If the raw LMDB loop slows down with 8 threads while the dict loop does not, the
cost is the GIL hand-offs around LMDB's calls, not the work the threads do.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from ..engine.api.runtime import open as open_home
from .concurrency import in_threads
from .kit.workloads import Workload

THREADS = 8
PUTS = 6


def _python(n: int = 400) -> int:
    """~9 us of Python, the stand-in for a superstep's own work."""
    x = 0
    for i in range(n):
        x += i * i
    return x


def raw_us(root: Path, threads: int, iterations: int, *, store: str) -> float:
    """Microseconds per iteration (Python, then six writes) over all ``threads``."""
    envs = [lmdb.open(str(root / f"{store}-{threads}-{k}"), map_size=1 << 30, sync=False,
                      metasync=False) for k in range(threads)]
    value = b"v" * 100

    def loop(k: int) -> None:
        env, table = envs[k], {}
        for i in range(iterations):
            _python()
            keys = [b"%d-%d" % (j, i) for j in range(PUTS)]
            if store == "lmdb":
                with env.begin(write=True) as txn:
                    for key in keys:
                        txn.put(key, value)
            else:
                for key in keys:
                    table[key] = value

    try:
        seconds = in_threads(loop, threads, "bench-gil")
    finally:
        for env in envs:
            env.close()
    return 1e6 * seconds / (threads * iterations)


def engine_rate(root: Path, runs: int, steps: int, *, shared: bool) -> float:
    """Supersteps per second of ``runs`` fast ``long`` runs in ``runs`` threads, on one
    engine (``shared``) or on one engine each."""
    w = Workload("long", steps, 100)
    flow = w.flow()
    engines = [open_home(root / f"{'one' if shared else 'each'}-{runs}-{k}", durability="fast")
               for k in range(1 if shared else runs)]
    try:
        for k, engine in enumerate(engines):
            engine.register(flow)
            engine.start(flow.name, w.initial(), run_id=f"warmup{k}")

        def one(k: int) -> None:
            engines[0 if shared else k].start(flow.name, w.initial(), run_id=f"c{k}")

        seconds = in_threads(one, runs, "bench-gil")
    finally:
        for engine in engines:
            engine.close()
    return runs * steps / seconds


def run(root: Path, *, iterations: int = 3000, steps: int = 300, repeat: int = 3
        ) -> dict[str, Any]:
    """Every measurement, a median of ``repeat`` rounds; in each round the cases run
    back to back, one thread (one run) first, so a change in load hits them alike."""
    cases: dict[str, Callable[[Path], float]] = {
        "dict, 1 thread": lambda r: raw_us(r, 1, iterations, store="dict"),
        f"dict, {THREADS} threads": lambda r: raw_us(r, THREADS, iterations, store="dict"),
        "lmdb, 1 thread": lambda r: raw_us(r, 1, iterations, store="lmdb"),
        f"lmdb, {THREADS} threads": lambda r: raw_us(r, THREADS, iterations, store="lmdb"),
        "one run": lambda r: engine_rate(r, 1, steps, shared=True),
        f"{THREADS} runs, one engine": lambda r: engine_rate(r, THREADS, steps, shared=True),
        f"{THREADS} runs, an engine each": lambda r: engine_rate(r, THREADS, steps,
                                                                shared=False),
    }
    samples: dict[str, list[float]] = {case: [] for case in cases}
    for i in range(repeat):
        for case, measure in cases.items():
            where = root / f"round-{i}"
            where.mkdir(parents=True, exist_ok=True)
            samples[case].append(measure(where))
    return {case: statistics.median(values) for case, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        got = run(Path(tmp), iterations=args.iterations, steps=args.steps, repeat=args.repeat)
    print(f"medians of {args.repeat} rounds")
    for store in ("dict", "lmdb"):
        one, many = got[f"{store}, 1 thread"], got[f"{store}, {THREADS} threads"]
        print(f"raw, Python + {PUTS} writes into {store:<4}: 1 thread {one:6.1f} us/iteration, "
              f"{THREADS} threads {many:6.1f} ({many / one:.2f}x)")
    for case in ("one run", f"{THREADS} runs, one engine", f"{THREADS} runs, an engine each"):
        print(f"engine, fast, {case:<24} {got[case]:8.0f} supersteps/s "
              f"({got[case] / got['one run']:.2f}x one run)")


if __name__ == "__main__":
    main()
