"""Peak memory of ``bide doctor`` and ``bide prune`` as a home grows.

Each measurement runs in a fresh process that samples its anonymous resident
memory (``RssAnon`` in /proc/self/status, every 5 ms) through one ``doctor`` or
``prune --dry-run`` and keeps the peak; the peak of a process that only opens
the home is subtracted, so what is left is what the command itself holds.
``VmHWM`` is not the measure: it counts the LMDB file pages a read maps in,
which is the store's size for any command that reads it all, and which the
kernel drops under pressure (they are page cache, not the process's memory).
Bounded memory shows as the same growth at 10,000 and at 40,000 runs; a
whole-log read shows as growth proportional to the runs.

    python -m bide.bench.maintenance_memory --runs 10000 20000 40000 --dir /tmp/mm
    python -m bide.bench.maintenance_memory --home /path/to/home   # an existing home
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

# Measured in a child process: import bide, open the home, run the command, report.
_CHILD = """
import json, sys, threading, time
import bide

def anon():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))

top, done = [anon()], threading.Event()

def sample():
    while not done.wait(0.005):
        top[0] = max(top[0], anon())

home, what = sys.argv[1], sys.argv[2]
engine = bide.open(home, create=False)
sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
sampler.start()
t0 = time.perf_counter()
if what == "doctor":
    ok = engine.doctor().ok
elif what == "prune":
    ok = engine.prune(keep=1, dry_run=True).records >= 0
else:
    ok = True
seconds = time.perf_counter() - t0
done.set()
sampler.join(5)
top[0] = max(top[0], anon())
hwm = next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmHWM:"))
print(json.dumps({"what": what, "ok": ok, "seconds": seconds, "peak_kib": top[0],
                  "hwm_kib": hwm}))
"""


def peak(home: Path, what: str) -> dict[str, Any]:
    """One command's peak RSS in KiB and its time, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(home), what], check=True,
                         capture_output=True, text=True, timeout=3600)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def growth(home: Path) -> dict[str, Any]:
    """MiB each command holds above a process that only opens the home (anonymous
    memory; and VmHWM, which counts mapped file pages too), and seconds."""
    base = peak(home, "open")
    row: dict[str, Any] = {"home": str(home)}
    for what in ("doctor", "prune"):
        got = peak(home, what)
        row[f"{what}_mib"] = round((got["peak_kib"] - base["peak_kib"]) / 1024, 1)
        row[f"{what}_hwm_mib"] = round((got["hwm_kib"] - base["hwm_kib"]) / 1024, 1)
        row[f"{what}_s"] = round(got["seconds"], 2)
        row[f"{what}_ok"] = got["ok"]
    return row


def build(home: Path, runs: int) -> None:
    """A home of ``runs`` finished runs: two nodes, one tool call each (as a small app)."""
    import bide

    @bide.tool
    def look(x: int) -> int:
        return x

    flow = bide.Flow("m")
    flow.node(lambda s, ctx: {"a": ctx.tool(look, 1)}, name="a", start=True)
    flow.node(lambda s, ctx: {"b": 2}, name="b", after="a")
    engine = bide.open(home, durability="fast")
    engine.register(flow)
    for i in range(runs):
        engine.start("m", run_id=f"r-{i}")
    engine.close()


@click.command()
@click.option("--runs", type=int, multiple=True, help="Build a home of this many runs.")
@click.option("--dir", "where", type=click.Path(path_type=Path), default=Path("mm-homes"),
              show_default=True, help="Where built homes go (reused if there).")
@click.option("--home", "homes", type=click.Path(path_type=Path), multiple=True,
              help="Measure this existing home too.")
def main(runs: tuple[int, ...], where: Path, homes: tuple[Path, ...]) -> None:
    """Peak memory of doctor and prune by home size (MiB above opening the home)."""
    targets = list(homes)
    for n in runs:
        home = where / f"runs-{n}"
        if not home.exists():
            t0 = time.perf_counter()
            build(home, n)
            click.echo(f"built {home} in {time.perf_counter() - t0:.0f}s", err=True)
        targets.append(home)
    for home in targets:
        size = sum(f.stat().st_size for f in (home / "store").glob("*.mdb"))
        click.echo(json.dumps({**growth(home), "store_mib": round(size / 2**20, 1)}))


if __name__ == "__main__":
    main()
