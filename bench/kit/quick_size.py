"""Targets a ``--quick`` run cannot judge: they hold for the full size, not for a small one.

``--quick`` runs every workload small (K=10 instead of 50, 40 supersteps instead of
200, one repeat) to show that everything works in under a minute. Some targets
are ratios whose fixed costs only amortize at the full size: a run's few LMDB
pages at K=10 are mostly page rounding, thread and process start-up weighs on a
throughput of 40 supersteps. Printing ``NO`` for them at the quick size would
report a miss the full run does not have, so they say ``n/a at quick size`` and
keep their measured value.
"""

from __future__ import annotations

from typing import Any

NA = "n/a at quick size"

SIZE_DEPENDENT = {  # target -> why its quick measurement says nothing about it
    "store growth vs raw LMDB growth for the same payloads (default)":
        "LMDB grows in 4 KB pages; a K=10 run's few pages are mostly rounding",
    "durable overhead per superstep vs raw-LMDB floor (same commits)":
        "a K=10 run's opening and first commits weigh on a per-superstep time",
    "8 concurrent durable runs vs one (steps/s, one process)":
        "40 supersteps per run, one repeat: thread start-up weighs on the throughput",
    "fan-out-4 superstep's durable cost vs a chain superstep's":
        "20 supersteps, over the same flow in memory: a difference of small noisy times",
    "4 worker processes vs one on one PostgreSQL home (steps/s)":
        "8 runs of 5 supersteps, median of one: process start-up weighs on the throughput",
}


def mark(targets: list[dict[str, Any]], quick: bool) -> list[dict[str, Any]]:
    """``targets`` with each size-dependent one not judged (``met`` None, ``na`` set)
    when the run was quick; the measured value and the detail stay."""
    if not quick:
        return targets
    return [{**t, "met": None, "na": NA,
             "detail": f"{SIZE_DEPENDENT[t['target']]}; {t.get('detail', '')}".rstrip("; ")}
            if t.get("target") in SIZE_DEPENDENT else t for t in targets]


def verdict(t: dict[str, Any]) -> str | None:
    """``n/a at quick size`` for a target ``mark`` left unjudged, else None."""
    return t.get("na")
