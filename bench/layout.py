"""``bide bench layout``: reads against run length, and the bytes that reach the device.

The two measures of how the store lays out its bytes:
``reads`` (the latest-state index against a replay, K up to 10,000) and
``physical`` (device bytes per superstep for every policy, the raw-LMDB floor
and LangGraph + SqliteSaver). ``suite`` runs it for ``layout`` and ``all``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import physical, reads

PHYSICAL_LIMIT = 1.2  # default durable superstep / raw LMDB's one-database commit


def units(quick: bool) -> int:
    return len(reads.sizes(quick)) + physical.units()


def run(quick: bool, root: Path, tick: Callable[[int], None] = lambda n: None
        ) -> dict[str, Any]:
    rows = []
    for k in reads.sizes(quick):
        rows.append(reads.row(k, root / "reads"))
        tick(1)
    return {"reads": rows, "physical": physical.run(quick, root / "physical", tick)}


def targets(section: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not section:
        return []
    ratio = section["physical"].get("ratio_to_floor")
    rows = section["physical"].get("rows", [])
    saved = _granularity_saving(rows)
    return [*reads.targets(section["reads"]),
            {"target": "device bytes per default durable superstep vs raw LMDB's "
                       "one-database commit", "limit": f"<= {PHYSICAL_LIMIT}x",
             "measured": ratio, "met": None if ratio is None else ratio <= PHYSICAL_LIMIT,
             "detail": section["physical"].get("skipped") or saved}]


def _granularity_saving(rows: list[dict[str, Any]]) -> str:
    """How much coarser checkpoints save on the device, per superstep, against the default."""
    by = {r.get("policy"): r["bytes_per_superstep"] for r in rows
          if r["system"] == "bide" and r.get("payload") == 100}
    base = by.get("default")
    if not base:
        return ""
    return "; ".join(f"{p}: {v / base:.2f}x of default" for p, v in by.items() if p != "default")


def render(section: dict[str, Any]) -> str:
    saved = _granularity_saving(section["physical"].get("rows", []))
    return (reads.render(section["reads"]) + "\n\n" + physical.render(section["physical"])
            + (f"\n  coarser granularity, device bytes per superstep: {saved}" if saved else ""))
