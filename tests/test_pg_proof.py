"""Proof runs on PostgreSQL: many runs, several worker processes, real failures.

Each worker is a ``bide watch`` process with its own local directory, standing in
for a host; they share one database. The runs are ``proof_app``'s (prep → pay with
a reconciled, non-idempotent ``charge`` → finish); every node execution and every
charge is one line in a file outside the database. Two failures:

- two of four workers SIGKILLed mid-way: their runs are taken over once their
  leases expire (a short ``--lease-ttl``);
- the server restarted with ``pg_ctl restart -m immediate`` mid-run: the workers
  reconnect and go on.

Afterwards every run is DONE, reached DONE once, charged exactly once, and
``doctor`` is clean.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import bide
import pytest
from bide import Status
from bide.engine.upkeep import maintenance
from conftest import APPS, count_lines
from extras import need
from polling import wait_for

need("psycopg")
sys.path.insert(0, str(APPS))
import proof_app  # noqa: E402

DEADLINE = 240.0  # seconds for every run to finish; a hang fails, it never blocks CI
LEASE_TTL = 3.0  # a killed worker's runs are taken over this long after its last renewal


def opened(url: str, here: Path) -> bide.Engine:
    """The test's own view of the database (its local directory unused by workers)."""
    return bide.open(url, durability="fast", local=here / "checker")


def seed(url: str, here: Path, runs: int) -> list[str]:
    """``runs`` runs submitted (PENDING), for the workers to find."""
    ids = [f"r{i:03d}" for i in range(runs)]
    with opened(url, here) as eng:
        eng.register(proof_app.flow)
        for run_id in ids:
            eng.submit("proof", run_id=run_id)
    return ids


def start_host(url: str, here: Path, i: int, *, slow: float, hang_after: int | None = None
               ) -> subprocess.Popen:
    """A ``bide watch`` process as host ``host<i>`` (its lease owner's name, see
    ``as_host.py``) in a directory of its own, its output in ``host<i>.log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env.update(PYTHONPATH=str(APPS), PROOF_EFFECTS=str(here / "effects"), PROOF_SLOW=str(slow),
               PROOF_HOST=f"host{i}")
    if hang_after is not None:
        env["PROOF_HANG_AFTER"] = str(hang_after)
    (here / f"host{i}").mkdir()
    with (here / f"host{i}.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, str(APPS / "as_host.py"), "watch", "--home", url, "--app",
             "proof_app:flow", "--workers", "2", "--lease-ttl", str(LEASE_TTL)],
            cwd=here / f"host{i}", env=env, stdout=log, stderr=subprocess.STDOUT)


@contextmanager
def stopped_at_the_end() -> Iterator[list[subprocess.Popen]]:
    """A list to put worker processes in; each still running at the end is stopped
    (SIGTERM, then SIGKILL), within deadlines."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(40)  # a watcher leaves within its 30 s grace
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)


def hanging(here: Path, i: int) -> int:
    """How many of host<i>'s threads are stuck inside a charge."""
    return sum(count_lines(here / f"host{i}" / "hanging").values())


def charges(here: Path) -> Counter[str]:
    return Counter({k: n for k, n in count_lines(here / "effects").items()
                    if k.startswith("tool charge")})


def statuses(url: str, here: Path) -> Counter[str]:
    with opened(url, here) as eng:
        return Counter(r.status.value for r in eng.runs())


def not_done(url: str, here: Path) -> dict[str, tuple[str, str | None]]:
    """The runs not DONE: status and error, for a failing test's message."""
    with opened(url, here) as eng:
        return {r.run_id: (r.status.value, r.error) for r in eng.runs()
                if r.status != Status.DONE}


MOVING = (Status.PENDING, Status.RUNNING, Status.INTERRUPTED)


def all_done(url: str, here: Path, runs: int) -> Callable[[], bool]:
    """Every run DONE; raises as soon as every run has stopped and some are not DONE."""
    def check() -> bool:
        seen = statuses(url, here)
        if seen[Status.DONE] < runs and not any(seen[s] for s in MOVING):
            raise AssertionError(f"runs stopped short of DONE: {not_done(url, here)}\n"
                                 f"{logs(here)}")
        return seen[Status.DONE] == runs
    return check


def logs(here: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(here.glob("*.log")))


def check_world(url: str, here: Path, ids: list[str]) -> None:
    """Every run DONE once, charged once with its own key; doctor clean."""
    lines = count_lines(here / "effects")
    with opened(url, here) as eng:
        assert maintenance.doctor(eng.store).ok
        keys = {}
        for run_id in ids:
            run = eng.get(run_id)
            assert run.status == Status.DONE, (run_id, run.status, run.error)
            assert run.state == {"prep": True, "paid": run.state["paid"], "done": True}
            (call,) = eng.intents(run_id)
            keys[run_id] = call["idempotency_key"]
            assert run.state["paid"] == keys[run_id]
            with eng.store.reader() as r:
                done = [s for s, _ in r.run_entries(run_id)  # checkpoints, status changes
                        if getattr(r.record(s), "status", None) == Status.DONE]
            assert len(done) == 1, (run_id, done)  # DONE once, never finished twice
    assert charges(here) == Counter({f"tool charge {k}": 1 for k in keys.values()}), \
        "a charge was lost or made twice"
    for run_id in ids:  # a node runs again only when a failure cut it off
        assert 1 <= lines[f"node finish {run_id}"] <= 2, (run_id, lines)


def takeovers(url: str, here: Path, dead: tuple[str, ...]) -> list[tuple[str, float]]:
    """(run, when) for each lease taken from a worker of a ``dead`` host."""
    found = []
    with opened(url, here) as eng, eng.store.reader() as r:
        for head in r.heads():
            leases = [rec for s, t in r.run_entries(head.run_id) if t == "lease_acquired"
                      for rec in [r.record(s)]]
            found += [(head.run_id, new.at) for old, new in pairwise(leases)
                      if old.owner.startswith(dead) and new.attempts > old.attempts]
    return found


def four_hosts_two_killed(url: str, here: Path, runs: int) -> None:
    """host0 and host1 start first and stop inside a charge on each of their two
    threads after 2 charges (effect made, outcome not durable, lease held); host2 and
    host3 join; with a quarter of the runs charged, host0 and host1 are SIGKILLed."""
    ids = seed(url, here, runs)
    started = time.monotonic()
    with stopped_at_the_end() as procs:
        procs += [start_host(url, here, i, slow=0.02, hang_after=2) for i in (0, 1)]
        assert wait_for(lambda: hanging(here, 0) == hanging(here, 1) == 2, DEADLINE), logs(here)
        procs += [start_host(url, here, i, slow=0.02) for i in (2, 3)]
        assert wait_for(lambda: len(charges(here)) >= runs // 4 + 4, DEADLINE), logs(here)
        for p in procs[:2]:
            p.send_signal(signal.SIGKILL)
        killed_at = time.time()
        for p in procs[:2]:
            p.wait(30)
        assert wait_for(all_done(url, here, runs), DEADLINE), (not_done(url, here), logs(here))
        for p in procs[2:]:
            assert p.poll() is None, logs(here)  # the survivors never died
    took = time.monotonic() - started
    check_world(url, here, ids)
    taken = takeovers(url, here, ("host0:", "host1:"))
    assert len(taken) == 4, taken  # the four runs the killed workers were charging
    # another host's lease is honoured until it expires (renewed every ttl/3 until the kill)
    assert all(at >= killed_at + LEASE_TTL / 2 for _, at in taken), (killed_at, taken)
    print(f"{runs} runs, 4 workers, 2 killed: {took:.1f}s, {len(taken)} taken over")


def test_four_hosts_two_killed_midway_every_run_done_once(pg_url, tmp_path):
    four_hosts_two_killed(pg_url, tmp_path, 40)


@pytest.mark.slow
def test_four_hosts_two_killed_midway_over_200_runs(pg_url, tmp_path):
    four_hosts_two_killed(pg_url, tmp_path, 200)


def test_an_immediate_server_restart_mid_run_loses_and_repeats_nothing(pg_cluster, pg_url,
                                                                     tmp_path):
    runs = 60
    ids = seed(pg_url, tmp_path, runs)
    with stopped_at_the_end() as procs:
        procs += [start_host(pg_url, tmp_path, i, slow=0.1) for i in (0, 1)]
        assert wait_for(lambda: len(charges(tmp_path)) >= runs // 4, DEADLINE), logs(tmp_path)
        before = len(charges(tmp_path))
        pg_cluster.restart("immediate")  # as a crash: no shutdown checkpoint
        assert before < runs - 10, "the runs were nearly done before the restart"
        assert wait_for(all_done(pg_url, tmp_path, runs), DEADLINE), (
            not_done(pg_url, tmp_path), logs(tmp_path))
        for p in procs:
            assert p.poll() is None, logs(tmp_path)  # they reconnected, never died
    check_world(pg_url, tmp_path, ids)
