"""Latencies quoted in the README and the issue notes, measured on this machine.

    python -m bide.bench.latency [--drops 50]

- commit: one small record per transaction, durable vs fast (median µs);
- tool call: what ``ctx.tool`` adds to a node (one commit: its outcome rides in the
  next), durable vs fast;
- inbox: from a decision file's rename into the inbox to the run running again under
  ``bide watch`` (a separate process), median and worst over ``--drops`` drops.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bide
from bide import Decision, Status
from bide.formats import RunCreated, StatusChanged

APP = '''
import os, time, bide
flow = bide.Flow("lat")
@flow.node(start=True)
def ask(state, ctx):
    ok = ctx.approve("go")
    with open(os.environ["BIDE_LAT_MARK"], "a") as fh:
        fh.write(f"{ctx.run_id} {time.time()}\\n")
    return {"ok": ok}
'''


def commit_latency(home: Path, durability: str, n: int = 300) -> float:
    with bide.open(home, durability=durability) as eng:
        eng.store.commit([RunCreated(run_id="c", flow="f")])
        times = []
        for _ in range(n):
            t = time.perf_counter()
            eng.store.commit([StatusChanged(run_id="c", status=Status.RUNNING)])
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def tool_call_cost(home: Path, durability: str, n: int = 200) -> tuple[float, int]:
    @bide.tool
    def noop(i: int) -> int:
        return i

    with_tool, without = bide.Flow("with"), bide.Flow("without")
    with_tool.node(lambda s, ctx: {"x": [ctx.tool(noop, i) for i in range(n)]}, name="n",
                   start=True)
    without.node(lambda s, ctx: {"x": list(range(n))}, name="n", start=True)
    with bide.open(home, durability=durability) as eng:
        eng.register(with_tool, without)
        seen: list[object] = []
        stop = eng.store.on_commit(seen.append)
        t = time.perf_counter()
        eng.start("with")
        a = time.perf_counter() - t
        with_commits = len(seen)
        t = time.perf_counter()
        eng.start("without")
        b = time.perf_counter() - t
        stop()
        commits = with_commits - (len(seen) - with_commits)
    return (a - b) / n * 1e6, round(commits / n)


def inbox_latency(drops: int, poll: bool = False) -> list[float]:
    from bide.engine.human.inbox import drop_decision

    work = Path(tempfile.mkdtemp(prefix="bide-lat-"))
    home, mark = work / "home", work / "marks.log"
    (work / "lat_app.py").write_text(APP)
    sys.path.insert(0, str(work))
    import lat_app  # type: ignore[import-not-found]

    env = {**os.environ, "PYTHONPATH": str(work), "BIDE_LAT_MARK": str(mark)}
    with bide.open(home, durability="fast") as eng:
        eng.register(lat_app.flow)
        for i in range(drops):
            eng.start("lat", run_id=f"l{i}")
        asks = {p["run_id"]: p["approval_id"] for p in eng.pending()}
    cmd = [sys.executable, "-m", "bide.cli", "watch", "--home", str(home), "--app",
           "lat_app:flow", "--durability", "fast", *(["--poll"] if poll else [])]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lat = []
    try:
        time.sleep(1.0)  # let the watcher start watching
        for i in range(drops):
            before = mark.read_text().count("\n") if mark.exists() else 0
            t0 = time.time()
            drop_decision(home, asks[f"l{i}"], Decision.APPROVE, by="bench")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if mark.exists() and mark.read_text().count("\n") > before:
                    break
                time.sleep(0.002)
            ran_at = float(mark.read_text().splitlines()[-1].split()[1])
            lat.append(ran_at - t0)
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--drops", type=int, default=50)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bide-latency-"))
    for mode in ("durable", "fast"):
        print(f"commit ({mode}): median {commit_latency(tmp / f'c-{mode}', mode):.0f} µs")
    for mode in ("durable", "fast"):
        us, commits = tool_call_cost(tmp / f"t-{mode}", mode)
        print(f"tool call ({mode}): {us:.0f} µs added per call, {commits} commits per call")
    lat = sorted(inbox_latency(args.drops))
    print(f"inbox rename -> run running again over {len(lat)} drops: median "
          f"{statistics.median(lat) * 1000:.0f} ms, worst {lat[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
