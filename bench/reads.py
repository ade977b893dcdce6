"""Reading a run's latest state as the run grows: the latest-state index against a replay.

    python -m bide.bench.reads [--quick]

The ``long`` workload (one node looping K times: append a B-byte item, bump a
counter) at B = 100 B, K up to 10,000. For each K: the median time of
``Engine.state`` (the index: O(state)), of a replay of the same checkpoint from
the log (what every read cost before: O(run length)), and WA committed (bytes
of records / payload bytes), which the index must not change. Runs use
``durability="fast"``: what is read and how many bytes are committed do not
depend on fsync, and K = 10,000 durable commits would only make the bench slow.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from ..engine.api.runtime import open as open_home
from ..engine.run.state import replay
from .kit.measure import median_time
from .kit.workloads import Workload

READ_LIMIT_MS = 1.0  # at K = 1,000
FLAT = 1.2  # K = 10,000 may cost this much more (x the 1 ms budget), WA likewise
WA_LIMIT = 3.0


def sizes(quick: bool) -> tuple[int, ...]:
    return (100, 1000) if quick else (1000, 10000)


def row(k: int, root: Path, payload: int = 100) -> dict[str, Any]:
    w = Workload("long", k, payload)
    with open_home(root / f"long-{k}", durability="fast") as engine:
        engine.register(w.flow())
        run = engine.start(w.flow().name, w.initial(), run_id="r")
        if run.state != w.expected():
            raise AssertionError(f"{w.label} ended with a wrong state")
        committed = sum(size for _, _, size in engine.records("r"))
        read = median_time(lambda: engine.state("r"), 15)
        with engine.store.reader() as r:
            head = r.head("r")
            assert head is not None
            replayed = median_time(lambda: replay(r, "r", head.checkpoint), 5)
    return {"workload": w.label, "k": k, "payload": payload, "read_latest_ms": 1000 * read,
            "read_replay_ms": 1000 * replayed, "wa_committed": committed / w.logical_bytes}


def run(quick: bool, root: Path) -> list[dict[str, Any]]:
    return [row(k, root) for k in sizes(quick)]


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_k = {r["k"]: r for r in rows}
    small, big = by_k.get(1000), by_k.get(10000)
    out = [_target("read latest state at K=1,000 (long, B=100)", f"<= {READ_LIMIT_MS} ms",
                   small["read_latest_ms"] if small else None, READ_LIMIT_MS)]
    out.append(_target("read latest state at K=10,000 (long, B=100)",
                       f"<= {FLAT} x {READ_LIMIT_MS} ms", big["read_latest_ms"] if big else None,
                       FLAT * READ_LIMIT_MS))
    worst = max(rows, key=lambda r: r["wa_committed"], default=None)
    out.append(_target("WA committed (long, B=100), every K", f"<= {WA_LIMIT}x",
                       worst["wa_committed"] if worst else None, WA_LIMIT))
    if small and big:
        ratio = big["wa_committed"] / small["wa_committed"]
        out.append(_target("WA committed flat in K: WA(10,000) / WA(1,000)", f"<= {FLAT}",
                           ratio, FLAT))
    return out


def _target(name: str, limit: str, measured: float | None, bound: float) -> dict[str, Any]:
    return {"target": name, "limit": limit, "measured": measured,
            "met": None if measured is None else measured <= bound,
            "detail": "" if measured is not None else "not measured (use the full run)"}


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["Reading the latest state as runs grow (long, B=100; index vs a replay of the log):",
             f"  {'workload':<24} {'index ms':>9} {'replay ms':>10} {'WA committed':>13}"]
    lines += [f"  {r['workload']:<24} {r['read_latest_ms']:>9.3f} {r['read_replay_ms']:>10.3f} "
              f"{r['wa_committed']:>12.2f}x" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bide-reads-") as d:
        rows = run(args.quick, Path(d))
    print(render(rows))
    for t in targets(rows):
        print(f"  {t['target']}: {t['measured']} (limit {t['limit']}) met={t['met']}")


if __name__ == "__main__":
    main()
