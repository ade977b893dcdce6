"""``bide bench timers``: how late a sleeping run goes on under an idle ``bide watch``.

N runs each ``ctx.sleep_until`` a due time 50 ms apart (the first ~0.5 s after the
watcher starts); the watcher's rescan is set far beyond the whole bench, so only
its due-time wait can resume them in time. The node writes the time it runs again;
lateness = that time minus the due time: p50 and max over the N runs. The rescan
it would otherwise have waited for is printed beside them (the ratio is the point:
the numbers move with the load of the machine).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import bide

RESCAN = 30.0  # the watcher's rescan: far beyond the bench, so no rescan serves a timer
SPACING = 0.05


def flow() -> bide.Flow:
    f = bide.Flow("bench-timers")

    @f.node(start=True)
    def nap(state: Any, ctx: Any) -> Any:
        ctx.sleep_until(state["due"])
        return {"woke_at": time.time()}

    return f


def measure(home: Path | str, n: int, *, local: Path | None = None,
            lead: float = 0.5) -> dict[str, Any]:
    """Lateness of ``n`` timers under one idle watcher on ``home`` (a directory or URL)."""
    with bide.open(home, local=local, durability="fast") as eng:
        eng.register(flow())
        start = time.time() + lead
        for i in range(n):
            eng.submit("bench-timers", {"due": start + i * SPACING}, run_id=f"t-{i}")
        watcher = bide.Watcher(eng, log=lambda line: None, rescan=RESCAN)
        thread = threading.Thread(target=watcher.serve, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + lead + n * SPACING + RESCAN / 2
            while len(eng.runs(status=bide.Status.DONE)) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError("the watcher did not resume every timer in time")
                time.sleep(0.02)
        finally:
            watcher.stop.set()
            thread.join(30)
        late = sorted(r.state["woke_at"] - r.state["due"] for r in eng.runs())
    return {"n": n, "rescan": RESCAN, "p50": statistics.median(late), "max": late[-1],
            "late": late}


def run(*, quick: bool = False, home: Path | None = None, pg: str | None = None
        ) -> dict[str, Any]:
    n = 10 if quick else 40
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        out["lmdb"] = measure(Path(tmp) / "home", n)
        if pg is not None:
            out["postgres"] = measure(pg, n, local=Path(tmp) / "pg-local")
    return out


def render(out: dict[str, Any]) -> str:
    lines = ["timer lateness under an idle watcher (due -> the node runs again)"]
    for store, m in out.items():
        lines.append(f"  {store:9} n={m['n']:<3} p50 {m['p50'] * 1000:6.1f} ms   "
                     f"max {m['max'] * 1000:6.1f} ms   (its rescan: {m['rescan']:.0f} s)")
    return "\n".join(lines)
