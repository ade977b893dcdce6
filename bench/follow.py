"""``bide bench follow``: how fast a commit in one process reaches another's ``follow``.

- latency: a worker subprocess (process A) advances a run one superstep every
  ``gap`` seconds; this process (B) follows it with the fallback re-read set to an
  hour, so only the store's wake-up (inotify on LMDB, LISTEN/NOTIFY on PostgreSQL)
  can deliver an event in time. Per checkpoint: the time B yields it minus the
  time A stamped on it (both ``time.time()`` on one machine; A stamps the record
  just before its commit, so the commit itself is counted too). p50 and max.
- idle CPU: ``bide log RUN --follow`` (a subprocess) on a run nobody advances,
  utime+stime from /proc over a few seconds: what a follower costs while it waits.
- PostgreSQL only, the commit cost of the follow seam: commits of one run by one
  worker, with nobody following (the commit sends one more statement in its last
  round trip, which finds no follower and notifies nothing), with a follower (the
  commit notifies), and with the statement left out (the code before the seam),
  interleaved in one session.

Every number is measured in the same run; nothing is compared with a time
measured elsewhere.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bide
from bide.formats import LeaseAcquired

from .kit.verdicts import named_lines

APP = '''
import os, time, bide
STEPS = int(os.environ.get("BIDE_FOLLOW_STEPS", "50"))
GAP = float(os.environ.get("BIDE_FOLLOW_GAP", "0.02"))
chain = bide.Flow("chain")
@chain.node(start=True)
def tick(state, ctx):
    time.sleep(GAP)
    return {"i": state.get("i", 0) + 1}
chain.route("tick", lambda s: "tick" if s["i"] < STEPS else bide.END)
flows = [chain]
'''
DEADLINE = 120.0
TARGET_P50_MS = 50.0


class _Bench:
    """A directory with the bench app; homes are LMDB directories in it or a PG URL."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "follow_bench_app.py").write_text(APP)
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(root), os.environ.get("PYTHONPATH")]))}

    def open(self, home: str) -> bide.Engine:
        sys.path.insert(0, str(self.root))
        try:
            import follow_bench_app  # type: ignore[import-not-found]
        finally:
            sys.path.remove(str(self.root))
        local = self.root / "local"
        eng = bide.open(home, durability="fast", local=local if "://" in home else None)
        eng.register(*follow_bench_app.flows)
        return eng

    def cli(self, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "bide.cli", *args], cwd=self.root,
                                env={**self.env, **kw.pop("env", {})}, **kw)


def latency(bench: _Bench, home: str, *, steps: int, gap: float) -> dict[str, Any]:
    """Commit in a worker subprocess -> event in this process's follow (see the docstring)."""
    with bench.open(home) as eng:
        run_id = eng.submit("chain")
        seen: list[tuple[float, Any]] = []
        failed: list[BaseException] = []

        def follow() -> None:
            try:
                for event in eng.follow(run_id, fallback=3600.0, timeout=DEADLINE):
                    seen.append((time.time(), event))
            except BaseException as exc:  # reported below
                failed.append(exc)

        follower = threading.Thread(target=follow, name="bench-follower", daemon=True)
        follower.start()
        time.sleep(0.2)  # the follower is waiting on its feed
        worker = bench.cli("resume", run_id, "--home", home, "--app",
                           "follow_bench_app:flows", stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE,
                           env={"BIDE_FOLLOW_STEPS": str(steps), "BIDE_FOLLOW_GAP": str(gap)})
        _, err = worker.communicate(timeout=DEADLINE)
        follower.join(DEADLINE)
        if worker.returncode != 0 or follower.is_alive() or failed:
            raise RuntimeError(f"follow bench failed: worker exit {worker.returncode} "
                               f"{err.decode()[-500:]}; follower {failed or 'still running'}")
    delays = [1000 * (got - event.at) for got, event in seen
              if event.kind == "checkpoint" and event.status == bide.Status.RUNNING
              and event.record.version > 0]
    return {"commits": len(delays), "gap_ms": 1000 * gap,
            "p50_ms": round(statistics.median(delays), 2),
            "max_ms": round(max(delays), 2), "events": len(seen)}


def idle_cpu(bench: _Bench, home: str, seconds: float) -> dict[str, Any]:
    """CPU of ``bide log RUN --follow`` waiting on a run nobody advances."""
    with bench.open(home) as eng:
        run_id = eng.submit("chain")
    proc = bench.cli("log", run_id, "--home", home, "--follow", stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for _ in range(2):  # its two records are printed: it is following now
            proc.stdout.readline()
        time.sleep(0.5)
        before, t0 = _cpu(proc.pid), time.monotonic()
        time.sleep(seconds)
        used, wall = _cpu(proc.pid) - before, time.monotonic() - t0
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    return {"seconds": round(wall, 1), "cpu_ms": round(1000 * used, 1),
            "idle_cpu_pct": round(100 * used / wall, 3)}


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commit_cost(bench: _Bench, url: str, *, commits: int, rounds: int) -> dict[str, Any]:
    """Commits/s of one run on PostgreSQL: nobody following, followed, the seam left out."""
    with bench.open(url) as eng:
        run_id = eng.submit("chain")
        store = eng.store
        rate: dict[str, list[float]] = {"unfollowed": [], "followed": [], "without_seam": []}
        token = [1]

        def timed(label: str) -> None:
            t0 = time.perf_counter()
            for _ in range(commits):  # a record no watcher is woken for (``wakeups``)
                token[0] += 1
                store.commit([LeaseAcquired(run_id=run_id, owner="bench", token=token[0],
                                            expires_at=time.time() + 60, at=time.time())])
            rate[label].append(commits / (time.perf_counter() - t0))

        for _ in range(rounds):  # interleaved: drift of the machine hits every variant alike
            timed("unfollowed")
            with _without_seam():
                timed("without_seam")
            feed = store.change_feed(run_id)
            try:
                timed("followed")
            finally:
                feed.close()
    out = {k: round(statistics.median(v), 1) for k, v in rate.items()}
    return {"commits": commits, "rounds": rounds, **{f"{k}_per_s": v for k, v in out.items()},
            "unfollowed_vs_without": round(out["unfollowed"] / out["without_seam"], 3),
            "followed_vs_without": round(out["followed"] / out["without_seam"], 3)}


@contextmanager
def _without_seam() -> Iterator[None]:
    """Commits without the followers' statement: the code before the seam, for comparison."""
    from ..engine.postgres import store as pg_store  # the PostgreSQL rows only: the postgres extra

    real = pg_store._notify_followers
    pg_store._notify_followers = lambda txn, batch: None
    try:
        yield
    finally:
        pg_store._notify_followers = real


def run(*, quick: bool = False, home: Path | None = None, pg: str | None = None,
        say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Every row on LMDB, and on PostgreSQL at ``pg`` when given (a database there)."""
    steps, seconds = (20, 2.0) if quick else (100, 5.0)
    commits, rounds = (100, 2) if quick else (300, 5)
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        bench = _Bench(Path(tmp))
        t0 = time.monotonic()
        say("follow latency, LMDB")
        out: dict[str, Any] = {"latency": [{"store": "lmdb", **latency(
            bench, str(bench.root / "home"), steps=steps, gap=0.02)}]}
        say("idle follower, LMDB")
        out["idle"] = [{"store": "lmdb", **idle_cpu(bench, str(bench.root / "home"), seconds)}]
        if pg is not None:
            say("follow latency, PostgreSQL")
            out["latency"].append({"store": "postgres", **latency(bench, pg, steps=steps,
                                                                  gap=0.02)})
            say("idle follower, PostgreSQL")
            out["idle"].append({"store": "postgres", **idle_cpu(bench, pg, seconds)})
            say("commit cost of the follow seam, PostgreSQL")
            out["commit_cost"] = commit_cost(bench, pg, commits=commits, rounds=rounds)
        out["seconds"] = round(time.monotonic() - t0, 1)
    out["targets"] = targets(out)
    return out


def targets(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The follow target: a commit reaches another process's follow within 50 ms p50."""
    return [{"name": f"commit -> follow p50, {row['store']}", "limit": f"<= {TARGET_P50_MS} ms",
             "measured": row["p50_ms"], "met": row["p50_ms"] <= TARGET_P50_MS}
            for row in out["latency"]]


def render(out: dict[str, Any]) -> str:
    lines = ["Commit in process A -> event in process B's follow (fallback re-read: 1 hour)",
             f"{'store':<10} {'commits':>7} {'gap ms':>7} {'p50 ms':>7} {'max ms':>7}"]
    lines += [f"{r['store']:<10} {r['commits']:>7} {r['gap_ms']:>7.0f} {r['p50_ms']:>7.2f} "
              f"{r['max_ms']:>7.2f}" for r in out["latency"]]
    lines += ["", "Idle follower (bide log --follow on a run nobody advances)",
              f"{'store':<10} {'seconds':>7} {'CPU ms':>7} {'CPU %':>7}"]
    lines += [f"{r['store']:<10} {r['seconds']:>7.1f} {r['cpu_ms']:>7.1f} "
              f"{r['idle_cpu_pct']:>7.3f}" for r in out["idle"]]
    if "commit_cost" in out:
        c = out["commit_cost"]
        lines += ["", f"PostgreSQL commits/s of one run ({c['commits']} commits, median of "
                  f"{c['rounds']} interleaved rounds)",
                  f"without the follow statement {c['without_seam_per_s']:>8.1f}",
                  f"nobody following             {c['unfollowed_per_s']:>8.1f} "
                  f"({c['unfollowed_vs_without']:.3f}x)",
                  f"followed (NOTIFY each)       {c['followed_per_s']:>8.1f} "
                  f"({c['followed_vs_without']:.3f}x)"]
    lines += named_lines(out["targets"])
    return "\n".join(lines)
