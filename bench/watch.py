"""``bide bench watch``: the watcher with many runs at once.

- single drops and a burst, back to back on the same watcher: from a decision
  file's rename into the inbox to its run running again (the node after the
  approval writes the time), median and last;
- a decision for an idle run while other runs' nodes are busy: from rename to DONE;
- idle CPU of ``bide watch`` (a subprocess; utime+stime from /proc) over a home of
  finished runs, and what one rescan costs now (the attention table) against a
  scan of every run head (what each rescan did before).

Every number is a ratio or a latency measured in the same run; nothing is compared
with a fixed time measured elsewhere.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bide
from bide.formats import RunCreated, StatusChanged

from ..engine.base.render import to_json
from ..engine.human.inbox import drop_decision
from ..engine.ops.watcher import DEFAULT_WORKERS
from ..engine.run.run_view import RunView
from ..engine.storage import attention
from .kit.verdicts import named_lines

APP = '''
import os, time, bide
lat = bide.Flow("lat")
@lat.node(start=True)
def ask(state, ctx):
    ok = ctx.approve("go")
    with open(os.environ["BIDE_LAT_MARK"], "a") as fh:
        fh.write(f"{ctx.run_id} {time.time()}\\n")
    return {"ok": ok}
slow = bide.Flow("slow")
@slow.node(start=True)
def wait(state, ctx):
    time.sleep(float(os.environ.get("BIDE_SLOW_NODE", "2")))
    return {"slow": True}
flows = [lat, slow]
'''
MARK_DEADLINE = 60.0


class _Home:
    """A home with the bench app, and a ``bide watch`` subprocess over it."""

    def __init__(self, root: Path, *, durability: str = "fast") -> None:
        self.root, self.home, self.mark = root, root / "home", root / "marks.log"
        self.durability = durability
        root.mkdir(parents=True, exist_ok=True)
        (root / "watch_bench_app.py").write_text(APP)
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(root), os.environ.get("PYTHONPATH")])),
            "BIDE_LAT_MARK": str(self.mark)}
        self.proc: subprocess.Popen[bytes] | None = None

    def flows(self) -> list[bide.Flow]:
        sys.path.insert(0, str(self.root))
        try:
            import watch_bench_app  # type: ignore[import-not-found]
        finally:
            sys.path.remove(str(self.root))
        return list(watch_bench_app.flows)

    def paused(self, n: int, prefix: str) -> dict[str, str]:
        """Start ``n`` runs that wait for an approval; {run_id: approval_id}."""
        with bide.open(self.home, durability=self.durability) as eng:
            eng.register(*self.flows())
            for i in range(n):
                eng.start("lat", run_id=f"{prefix}{i}")
            return {p["run_id"]: p["approval_id"] for p in eng.pending()
                    if p["run_id"].startswith(prefix)}

    def watch(self, *args: str, started: Callable[[], bool] | None = None) -> None:
        cmd = [sys.executable, "-m", "bide.cli", "watch", "--home", str(self.home), "--app",
               "watch_bench_app:flows", "--durability", self.durability, *args]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (started or self._watching)():
            time.sleep(0.05)
        time.sleep(0.5)  # watchfiles starts watching just after the first pass

    def _watching(self) -> bool:
        return (self.home / "inbox" / "processed").exists()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def marks(self) -> dict[str, float]:
        if not self.mark.exists():
            return {}
        out = {}
        for line in self.mark.read_text().splitlines():
            run_id, _, at = line.partition(" ")
            out[run_id] = float(at)
        return out

    def wait_marks(self, run_ids: set[str]) -> dict[str, float]:
        deadline = time.monotonic() + MARK_DEADLINE
        while time.monotonic() < deadline:
            marks = self.marks()
            if run_ids <= marks.keys():
                return marks
            time.sleep(0.002)
        raise TimeoutError(f"{len(run_ids - self.marks().keys())} runs never ran again")


def _file(home: Path, approval_id: str, i: int) -> tuple[Path, Path]:
    """A decision file written as a dot-file, and the name it is renamed to."""
    final = drop_decision(home.parent / "staging", approval_id, "approve", by="bench")
    dot = home / "inbox" / f".{i}-{final.name}"
    os.rename(final, dot)
    return dot, home / "inbox" / final.name


def latency(root: Path, *, drops: int = 20, burst: int = 200, workers: int = 4,
            overlap_after: float | None = None) -> dict[str, Any]:
    """Single drops then one burst, against one ``bide watch --workers`` subprocess
    (``--overlap-after`` when given; else the default)."""
    h = _Home(root)
    singles = h.paused(drops, "s")
    bursts = h.paused(burst, "b")
    (root / "staging" / "inbox").mkdir(parents=True, exist_ok=True)
    overlap = () if overlap_after is None else ("--overlap-after", str(overlap_after))
    h.watch("--workers", str(workers), *overlap)
    try:
        single = []
        for run_id, aid in singles.items():
            dot, final = _file(h.home, aid, 0)
            t0 = time.time()
            os.rename(dot, final)
            single.append(h.wait_marks({run_id})[run_id] - t0)
            time.sleep(0.05)
        files = [(run_id, *_file(h.home, aid, i))
                 for i, (run_id, aid) in enumerate(bursts.items())]
        renamed = {}
        assert h.proc is not None
        cpu0 = _cpu_seconds(h.proc.pid)
        for run_id, dot, final in files:
            os.rename(dot, final)
            renamed[run_id] = time.time()
        marks = h.wait_marks(set(bursts))
        cpu = _cpu_seconds(h.proc.pid) - cpu0  # the watcher's own work for the burst
    finally:
        h.stop()
    lat = sorted(marks[r] - t for r, t in renamed.items())
    return {"workers": workers, "overlap_after": overlap_after, "drops": drops, "burst": burst,
            "single_p50_ms": statistics.median(single) * 1000,
            "single_max_ms": max(single) * 1000,
            "burst_p50_ms": statistics.median(lat) * 1000, "burst_last_ms": lat[-1] * 1000,
            "burst_cpu_ms": cpu * 1000}


def while_busy(root: Path, *, busy: int = 4, workers: int = 8, node_s: float = 3.0
               ) -> dict[str, Any]:
    """A decision for an idle run while ``busy`` runs' nodes sleep: rename to DONE."""
    h = _Home(root)
    h.env["BIDE_SLOW_NODE"] = str(node_s)
    (run_id, aid), = h.paused(1, "idle").items()
    with bide.open(h.home, durability=h.durability) as eng:
        eng.register(*h.flows())
        for i in range(busy):
            eng.submit("slow", run_id=f"busy{i}")
    (root / "staging" / "inbox").mkdir(parents=True, exist_ok=True)
    h.watch("--workers", str(workers))
    try:
        dot, final = _file(h.home, aid, 0)
        t0 = time.time()
        os.rename(dot, final)
        took = h.wait_marks({run_id})[run_id] - t0
        with bide.open(h.home, durability=h.durability, create=False) as eng:
            still = sum(1 for i in range(busy)
                        if eng.get(f"busy{i}").status == bide.Status.RUNNING)
    finally:
        h.stop()
    return {"busy_runs": busy, "node_s": node_s, "workers": workers,
            "decision_to_running_ms": took * 1000, "busy_still_running": still}


def finished_home(home: Path, runs: int, batch: int = 2000) -> None:
    """A home of ``runs`` DONE runs, made quickly (many runs per fast commit)."""
    with bide.open(home, durability="fast") as eng:
        for start in range(0, runs, batch):
            records: list[Any] = []
            for i in range(start, min(start + batch, runs)):
                run_id = f"done-{i:07d}"
                records += [RunCreated(run_id=run_id, flow="lat", status=bide.Status.RUNNING,
                                       at=1.0),
                            StatusChanged(run_id=run_id, status=bide.Status.DONE.value,
                                          at=2.0)]
            eng.store.commit(records)


def rescan_ms(home: Path, repeat: int = 5) -> dict[str, float]:
    """One rescan now (the attention table) and a scan of every head (as before), in ms."""
    with bide.open(home, durability="fast", create=False) as eng:
        now = time.time()

        def every_head() -> int:
            with eng.store.reader() as r:
                return sum(1 for h in r.heads() if RunView(r, h).needs_work(now))

        def attended() -> int:
            with eng.store.reader() as r:
                heads = (r.head(run_id) for run_id in attention.run_ids(r))
                return sum(1 for h in heads if h is not None and RunView(r, h).needs_work(now))

        return {"rescan_ms": _best(attended, repeat) * 1000,
                "full_scan_ms": _best(every_head, repeat) * 1000}


def _best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def idle_cpu(root: Path, *, runs: int, seconds: float = 15.0) -> dict[str, Any]:
    """``bide watch`` over ``runs`` finished runs, nothing to do: % of one core."""
    h = _Home(root)
    finished_home(h.home, runs)
    scans = rescan_ms(h.home)
    h.watch()
    assert h.proc is not None
    try:
        time.sleep(2.0)  # past start-up
        c0, t0 = _cpu_seconds(h.proc.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = _cpu_seconds(h.proc.pid), time.monotonic()
    finally:
        h.stop()
    return {"finished_runs": runs, "seconds": t1 - t0,
            "idle_cpu_pct": (c1 - c0) / (t1 - t0) * 100, **scans,
            # what a rescan each second cost when it read every head (the old watcher)
            "full_scan_cpu_pct": scans["full_scan_ms"] / 10}


def run(*, quick: bool = False, home: Path | None = None,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every row of ``bide bench watch``; quick: small sizes, a few seconds each."""
    root = Path(tempfile.mkdtemp(prefix="bide-bench-watch-", dir=home))
    out: dict[str, Any] = {"latency": [], "while_busy": [], "idle": []}
    sizes = (2_000,) if quick else (20_000, 100_000)
    # one worker; the default (4 workers, one more each time a resume runs past 25 ms);
    # 4 workers all taking runs at once (--overlap-after 0, the default before)
    for workers, overlap in (((4, None),) if quick else ((1, None), (4, None), (4, 0.0))):
        out["latency"].append(latency(root / f"lat-{workers}-{overlap}",
                                      drops=5 if quick else 20, burst=50 if quick else 200,
                                      workers=workers, overlap_after=overlap))
        say(f"latency, {_label(out['latency'][-1])}: {out['latency'][-1]}")
    out["while_busy"].append(while_busy(root / "busy", node_s=1.0 if quick else 3.0))
    say(f"while busy: {out['while_busy'][-1]}")
    for n in sizes:
        out["idle"].append(idle_cpu(root / f"idle-{n}", runs=n, seconds=3 if quick else 15))
        say(f"idle: {out['idle'][-1]}")
    out["targets"] = targets(out)
    return out


def _label(r: dict[str, Any]) -> str:
    """A latency row's watcher: "4, default", "4, all at once", "1"."""
    if r["workers"] == 1:
        return "1"
    return f"{r['workers']}, " + ("default" if r.get("overlap_after") is None else
                                  "all at once" if r["overlap_after"] == 0 else
                                  f"overlap {r['overlap_after']:g} s")


def render(out: dict[str, Any]) -> str:
    lines = ["Watcher: rename -> running again (ms)",
             f"{'workers':>16} {'single p50':>11} {'single max':>11} {'burst':>6} "
             f"{'burst p50':>10} {'burst last':>11} {'burst CPU':>10}"]
    for r in out["latency"]:
        lines.append(f"{_label(r):>16} {r['single_p50_ms']:>11.0f} {r['single_max_ms']:>11.0f} "
                     f"{r['burst']:>6} {r['burst_p50_ms']:>10.0f} {r['burst_last_ms']:>11.0f} "
                     f"{r.get('burst_cpu_ms', float('nan')):>10.0f}")
    for r in out["while_busy"]:
        lines += ["", f"a decision while {r['busy_runs']} runs' nodes sleep {r['node_s']:.0f} s: "
                  f"running again after {r['decision_to_running_ms']:.0f} ms "
                  f"({r['busy_still_running']} of them still busy then)"]
    lines += ["", "Idle watcher over finished runs (% of one core)",
              f"{'runs':>8} {'idle CPU':>9} {'rescan ms':>10} {'full scan ms':>13} "
              f"{'full scan /s':>13}"]
    for r in out["idle"]:
        lines.append(f"{r['finished_runs']:>8} {r['idle_cpu_pct']:>8.2f}% "
                     f"{r['rescan_ms']:>10.3f} {r['full_scan_ms']:>13.1f} "
                     f"{r['full_scan_cpu_pct']:>12.1f}%")
    lines += named_lines(targets(out))
    return "\n".join(lines)


def targets(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The watcher's targets, each met or not."""
    found = []

    def target(name: str, limit: str, measured: float, ok: bool) -> None:
        found.append({"name": name, "limit": limit, "measured": round(measured, 2), "met": ok})

    one = next((r for r in out["latency"] if r["workers"] == 1), None)
    for r in out["latency"]:
        if r["workers"] != DEFAULT_WORKERS or r.get("overlap_after") is not None:
            continue  # a row for comparison: the targets are the default watcher's
        w = f"{r['burst']} files, {r['workers']} workers"
        target(f"burst p50, {w}", "<= 150 ms", r["burst_p50_ms"], r["burst_p50_ms"] <= 150)
        target(f"burst last, {w}", "<= 300 ms", r["burst_last_ms"], r["burst_last_ms"] <= 300)
        if one is not None:  # the default is never slower than one worker on a burst
            target(f"burst last, {w}, against 1 worker's", "<= 1x (10 % for noise)",
                   r["burst_last_ms"] / one["burst_last_ms"],
                   r["burst_last_ms"] <= 1.1 * one["burst_last_ms"])
        for missed in [t for t in found[-3:] if not t["met"] and "burst_cpu_ms" in r]:
            missed["bound"] = (
                f"bound: the watcher spent {r['burst_cpu_ms']:.0f} ms of CPU on the burst "
                f"({r['burst_cpu_ms'] / r['burst']:.2f} ms a decision: read, check, record, "
                "move the file, resume and run the flow); one process's Python runs on one "
                "core at a time (the GIL), so the last run cannot run sooner than that work "
                "takes, and more workers on 2 cores add hand-offs, not cores")
    for r in out["while_busy"]:
        target("a decision for an idle run while others are busy", "<= 100 ms",
               r["decision_to_running_ms"], r["decision_to_running_ms"] <= 100
               and r["busy_still_running"] == r["busy_runs"])
    for r in out["idle"]:
        target(f"idle CPU over {r['finished_runs']} finished runs", "<= 0.5% of a core",
               r["idle_cpu_pct"], r["idle_cpu_pct"] <= 0.5)
    return found


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out = run(quick=args.quick, say=lambda line: print(line, file=sys.stderr))
    print(render(out))
    if args.json:
        args.json.write_text(to_json(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
