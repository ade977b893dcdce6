"""Racing processes: N long-running watchers over one home, M approval runs, CLI readers.

Decisions arrive as files dropped into the inbox while the watchers run. Some runs stall
in their first node: the test freezes that worker with SIGSTOP (a GC pause, a suspended
VM) until its lease expires and another watcher takes the run over, then lets it go on
(at most N-1 workers are frozen at once, and one watcher always stays free).
Everything a worker does is counted outside the store (``tests/apps/race_app.py``),
including every commit it made under a lease with the token it held; the store's log
says when each token was acquired, so a commit accepted after a newer token was taken
is caught. With fencing switched off (``BIDE_TEST_SWITCHES=no_fencing``) the same race
must show such commits: the negative control.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import bide
import pytest
from bide.engine.human.inbox import drop_decision
from bide.engine.storage import store as store_module
from bide.engine.storage.lmdb_store import LMDBStore
from bide.engine.upkeep.maintenance import doctor
from bide.formats import LeaseAcquired, LeaseReleased, decode
from conftest import APPS
from polling import wait_for

sys.path.insert(0, str(APPS))
import race_app  # noqa: E402

WATCHERS, RUNS, BATCH, TTL = 3, 20, 4, 1.0


def all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is in the stopped state (``T`` in /proc)."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        states = [(tasks / t / "stat").read_text().rsplit(")", 1)[1].split()[0]
                  for t in os.listdir(tasks)]
    except (FileNotFoundError, ProcessLookupError):  # a thread ended while we looked
        return False
    return bool(states) and all(state in "tT" for state in states)


def run_ids(n: int, stall_every: int) -> list[str]:
    return [f"r{i:02d}" + ("-stall" if i % stall_every == 1 % stall_every else "")
            for i in range(n)]


def decision_for(run_id: str) -> str:
    return "reject" if int(run_id[1:3]) % 5 == 3 else "approve"


def cli_env(log: Path, switches: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env.update(PYTHONPATH=str(APPS), BIDE_RACE_LOG=str(log))
    if switches:
        env["BIDE_TEST_SWITCHES"] = switches
    return env


def start_watcher(home: Path, log: Path, out: Path, switches: str = "") -> subprocess.Popen:
    with open(out, "w") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "bide.cli", "watch", "--home", str(home), "--app",
             "race_app:flow", "--durability", "fast", "--lease-ttl", str(TTL),
             "--max-attempts", "50",
             # the race freezes a watcher process (SIGSTOP) to stall ONE run and counts that
             # run's takeover; with several workers a frozen process would stall its other
             # runs too, uncounted. Several workers per process: tests/test_watch_kill.py
             "--workers", "1"],
            env=cli_env(log, switches), stdout=fh, stderr=subprocess.STDOUT)


def read_lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@dataclass
class Race:
    """One race: its processes, what the test did to them, and what the readers saw."""

    home: Path
    log: Path
    runs: list[str]
    switches: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)
    outs: list[Path] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)
    stalls_seen: set[str] = field(default_factory=set)
    submitted: int = 0
    waiting: dict[str, int] = field(default_factory=dict)  # stalled, not yet frozen or let go
    takeovers: set[str] = field(default_factory=set)
    dropped: dict[str, str] = field(default_factory=dict)
    reads: Counter = field(default_factory=Counter)
    reads_racing: int = 0  # reads that ended before every run had finished
    read_failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    all_finished: threading.Event = field(default_factory=threading.Event)

    # -- the parts that run while the watchers race ------------------------------------------
    def freeze(self, eng: bide.Engine, run_id: str, pid: int) -> None:
        """SIGSTOP the worker inside its stalled node until another worker holds the run."""
        try:
            os.kill(pid, signal.SIGSTOP)
            # SIGSTOP is asynchronous: a thread on another core may run on for a few ms.
            # Let the node go only once every thread is stopped, or it may run past the
            # stall (even call its tool) before it freezes, which is not what is counted.
            assert wait_for(lambda: all_threads_stopped(pid), 10, step=0.001), pid
            (self.log.parent / f"go-{run_id}").touch()  # seen when it wakes
            took = wait_for(lambda: eng.get(run_id).head.lease_token >= 2, 30, step=0.05)
        finally:
            os.kill(pid, signal.SIGCONT)
            with self.lock:
                self.stopped.discard(pid)
        if took:
            with self.lock:
                self.takeovers.add(run_id)

    def stalls(self, eng: bide.Engine, threads: list[threading.Thread]) -> None:
        """Freeze stalled workers while one watcher stays free; release the rest."""
        for parts in read_lines(self.log):
            if parts[0] == "stall" and parts[1] not in self.stalls_seen:
                self.stalls_seen.add(parts[1])
                self.waiting[parts[1]] = int(parts[2])
        for run_id, pid in list(self.waiting.items()):
            with self.lock:
                freeze = len(self.stopped) < len(self.procs) - 1 and pid not in self.stopped
                if freeze:
                    self.stopped.add(pid)
                free = len(self.procs) - len(self.stopped) - len(self.waiting) + freeze
            if freeze:
                t = threading.Thread(target=self.freeze, args=(eng, run_id, pid), daemon=True)
                t.start()
                threads.append(t)
            elif free <= 0:  # every watcher frozen or stalled: this one goes on unfrozen
                (self.log.parent / f"go-{run_id}").touch()
            else:
                continue  # it waits for a worker to be let go
            del self.waiting[run_id]

    def decide(self) -> None:
        for path in sorted((self.home / "requests").glob("*.json")):
            aid = path.stem
            if aid in self.dropped:
                continue
            req = json.loads(path.read_text())
            decision = decision_for(req["run_id"])
            self.dropped[aid] = decision
            copies = 2 if int(req["run_id"][1:3]) % 7 == 0 else 1  # a duplicate is a no-op
            for _ in range(copies):
                drop_decision(self.home, aid, decision, by="race", run_id=req["run_id"],
                              digest=req["digest"])

    def read(self) -> None:
        """CLI readers in a loop while the writers write: each must succeed and parse."""
        env = cli_env(self.log)
        i = 0
        while not self.done.is_set():
            run_id = self.runs[i % len(self.runs)]
            i += 1
            for cmd, expect in ((["runs", "--json"], list), (["show", run_id, "--json"], dict)):
                p = subprocess.run([sys.executable, "-m", "bide.cli", *cmd, "--home",
                                    str(self.home)], env=env, capture_output=True, text=True,
                                   timeout=60)
                self.reads[cmd[0]] += 1
                self.reads_racing += not self.all_finished.is_set()
                try:
                    assert p.returncode == 0, p.stderr
                    assert isinstance(json.loads(p.stdout), expect)
                except (AssertionError, ValueError) as exc:
                    self.read_failures.append(f"bide {' '.join(cmd)}: {exc}")

    def finished(self, eng: bide.Engine) -> bool:
        return all(r.status.value in ("DONE", "FAILED", "CANCELLED") for r in eng.runs())

    # -- the race ---------------------------------------------------------------------------------
    def submit(self, eng: bide.Engine) -> None:
        """Runs arrive in waves (BATCH at a time), each once the last has started and its
        stalls are settled: a free watcher then has time to take the frozen runs over."""
        heads = [r for r in eng.runs() if r.status.value == "PENDING"]
        with self.lock:
            busy = self.stopped or self.waiting
        if self.submitted < len(self.runs) and not heads and not busy:
            for run_id in self.runs[self.submitted:self.submitted + BATCH]:
                eng.submit("race", run_id=run_id)
            self.submitted += BATCH

    def run(self, deadline: float = 120.0) -> None:
        bide.open(self.home, durability="fast").close()
        for i in range(WATCHERS):
            self.outs.append(self.home.parent / f"watcher{i}.out")
            self.procs.append(start_watcher(self.home, self.log, self.outs[-1], self.switches))
        reader = threading.Thread(target=self.read, daemon=True)
        reader.start()
        threads: list[threading.Thread] = []
        try:
            with bide.open(self.home, durability="fast", create=False) as eng:
                eng.register(race_app.flow)
                end = time.monotonic() + deadline
                while time.monotonic() < end and not (
                        self.submitted >= len(self.runs) and self.finished(eng)):
                    self.submit(eng)
                    self.stalls(eng, threads)
                    self.decide()
                    time.sleep(0.02)
                self.all_finished.set()
                for t in threads:
                    t.join(timeout=60)
        finally:
            self.done.set()
            for p in self.procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in self.procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            reader.join(timeout=120)

    # -- what the race left -----------------------------------------------------------------------
    def stale_commits(self) -> list[str]:
        """Records accepted under a token older than the run's latest lease at that point."""
        store = LMDBStore(self.home, durability="fast", create=False)
        try:
            with store.reader() as r:
                records = [(seq, decode(raw, key=seq)) for seq, raw in r.log()]
        finally:
            store.close()
        acquired: dict[str, list[tuple[int, int]]] = {}
        bad = []
        for seq, rec in records:
            if isinstance(rec, LeaseAcquired):
                acquired.setdefault(rec.run_id, []).append((seq, rec.token))

        def token_at(run_id: str, seq: int) -> int | None:
            held = [tok for s, tok in acquired.get(run_id, []) if s < seq]
            return held[-1] if held else None

        for parts in read_lines(self.log):
            if parts[0] != "commit":
                continue
            run_id, token = parts[1], int(parts[2])
            for seq in map(int, parts[3:]):
                current = token_at(run_id, seq)
                if current != token:
                    bad.append(f"{run_id}: seq {seq} accepted under token {token} while "
                               f"token {current} held the lease")
        for seq, rec in records:  # from the log alone: a release by a worker fenced out
            if isinstance(rec, LeaseReleased) and token_at(rec.run_id, seq) != rec.token:
                bad.append(f"{rec.run_id}: lease_released of token {rec.token} at seq {seq} "
                           f"after token {token_at(rec.run_id, seq)} was acquired")
        return bad

    def violations(self) -> list[str]:
        """Every invariant of the race but the fencing one (``stale_commits``)."""
        bad: list[str] = []
        outs = [o.read_text() for o in self.outs]
        for p, out in zip(self.procs, outs, strict=True):
            if p.returncode != 0 or "Traceback" in out or "error:" in out:
                bad.append(f"watcher {p.pid} exited {p.returncode}: {out[-2000:]}")
        lines = Counter(" ".join(parts[:3]) for parts in read_lines(self.log)
                        if parts[0] in ("node", "tool"))
        done_lines = Counter(m for out in outs for m in re.findall(r"run (\S+): DONE$", out,
                                                                   re.M))
        with bide.open(self.home, durability="fast", create=False) as eng:
            report = doctor(eng.store)
            if not report.ok:
                bad.append(f"doctor: {report.problems[:3]}")
            for run_id in self.runs:
                run = eng.get(run_id)
                approved = decision_for(run_id) == "approve"
                want = {"charged": f"charged {run_id}",
                        "shipped": f"shipped {run_id}" if approved else None}
                if run.status.value != "DONE" or run.state != want:
                    bad.append(f"{run_id}: {run.status.value} {run.state} != DONE {want}")
                dones = sum(1 for cp in eng.checkpoints(run_id) if cp.status == "DONE")
                if dones != 1 or done_lines[run_id] != 1:
                    bad.append(f"{run_id} finished {dones} times in the log, "
                               f"{done_lines[run_id]} times by the watchers")
                leases = sum(1 for _, t, _ in eng.records(run_id) if t == "lease_acquired")
                taken = run_id in self.takeovers
                expected = {f"node work {run_id}": 1 + taken, f"node gate {run_id}": 2,
                            f"tool charge {run_id}": 1, f"tool ship {run_id}": int(approved)}
                for line, n in expected.items():
                    if lines[line] != n:
                        bad.append(f"{line} ran {lines[line]} times, expected {n}")
                if leases != 2 + taken:
                    bad.append(f"{run_id}: {leases} leases acquired, expected {2 + taken}")
        return bad


@pytest.mark.slow
def test_racing_watchers_finish_every_run_once_and_fence_out_stale_workers(tmp_path):
    race = Race(tmp_path / "home", tmp_path / "race.log", run_ids(RUNS, stall_every=2))
    race.run()
    problems = race.violations()
    assert not problems, "\n".join(problems[:20])
    assert race.stale_commits() == []
    stalled = {r for r in race.runs if r.endswith("-stall")}
    assert race.takeovers and race.takeovers <= stalled, race.takeovers
    refused = {parts[1] for parts in read_lines(race.log) if parts[0] == "refused"}
    assert refused == race.takeovers  # each frozen worker woke, tried to commit, was refused
    assert not race.read_failures, race.read_failures[:5]
    assert race.reads["runs"] >= 1 and race.reads["show"] >= 1, race.reads
    assert race.reads_racing >= 2, race.reads  # they read while the watchers wrote
    processed = list((race.home / "inbox" / "processed").iterdir())
    assert len(processed) == sum(2 if int(r[1:3]) % 7 == 0 else 1 for r in race.runs)
    assert not list((race.home / "inbox" / "rejected").iterdir())


@pytest.mark.slow
def test_negative_control_without_fencing_stale_commits_are_caught(tmp_path):
    """The same race with the fence switched off: the frozen workers' commits land."""
    race = Race(tmp_path / "home", tmp_path / "race.log", run_ids(4, stall_every=1),
                switches="no_fencing")
    race.run(deadline=60.0)
    assert race.takeovers, "no takeover happened: the control proved nothing"
    stale = race.stale_commits()
    assert stale, "with fencing off the race must show commits under stale tokens"
    assert {s.split(":")[0] for s in stale} <= race.takeovers


# -- stale reader slots ---------------------------------------------------------------------------
HOLD_READER = """
import sys, time, bide
eng = bide.open(sys.argv[1], durability="fast", create=False)
with eng.store.reader():
    print("reading", flush=True)
    time.sleep(600)
"""

LIST_READERS = """
import sys, lmdb
env = lmdb.open(sys.argv[1], readonly=True, max_dbs=16)
print(env.readers())
"""


def hold_reader(home: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD_READER, str(home)], stdout=subprocess.PIPE,
                         text=True, env=cli_env(home / "unused.log"))
    assert p.stdout is not None and p.stdout.readline().strip() == "reading"
    return p


def reader_pids(text: str) -> set[int]:
    """The pids in LMDB's reader table (``env.readers()``), without clearing anything."""
    return {int(line.split()[0]) for line in text.splitlines()[1:] if line.split()
            and line.split()[0].isdigit()}


def listed_readers(home: Path) -> set[int]:
    out = subprocess.run([sys.executable, "-c", LIST_READERS, str(home / "store")],
                         capture_output=True, text=True, check=True).stdout
    return reader_pids(out)


def kill(p: subprocess.Popen) -> int:
    p.kill()
    p.communicate()
    return p.pid


def test_a_killed_readers_slot_is_cleared_by_reader_check(tmp_path):
    home = tmp_path / "home"
    bide.open(home, durability="fast").close()
    pid = kill(hold_reader(home))
    store = LMDBStore(home, durability="fast", create=False)  # its own check at open clears it
    try:
        pid2 = kill(hold_reader(home))  # killed while this store is open: nobody cleared it
        assert pid not in reader_pids(store.env.readers())
        assert pid2 in reader_pids(store.env.readers())
        assert store.reader_check() == 1
        assert pid2 not in reader_pids(store.env.readers())
        with store.reader():
            assert reader_pids(store.env.readers()) == {os.getpid()}
    finally:
        store.close()


def test_a_running_watcher_clears_a_killed_readers_slot(tmp_path):
    """No new process opens the store: the long-running watcher itself must clear the slot
    (a stale slot pins old pages, and the file grows until someone clears it)."""
    home, log = tmp_path / "home", tmp_path / "race.log"
    bide.open(home, durability="fast").close()
    watcher = start_watcher(home, log, tmp_path / "watcher.out")
    try:
        (home / "inbox" / "ping.json").write_text("{")
        assert wait_for(lambda: (home / "inbox" / "rejected" / "ping.json").exists(), 30)
        pid = kill(hold_reader(home))  # opened (and checked) the store after the watcher did
        assert wait_for(lambda: pid not in listed_readers(home), 15, step=0.2), \
            "the killed reader's slot was never cleared"
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(timeout=60)
    assert watcher.returncode == 0, (tmp_path / "watcher.out").read_text()


def test_importing_the_race_app_for_its_flow_registers_no_commit_observer():
    """This module imports the app for its flow: its commit log, a process-wide observer,
    stayed registered in the pytest process and was told every later test's commits."""
    assert "BIDE_RACE_LOG" not in os.environ  # only the workers log
    assert race_app._log_commit not in store_module._everywhere
