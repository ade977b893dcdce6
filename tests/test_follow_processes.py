"""Following across processes: a commit made by another process (``bide resume``, ``bide
watch``) reaches this one's ``follow`` through the store's wake-up, not by polling (the
fallback re-read is set to an hour); ``bide log --follow`` and ``bide run`` print live
and stop on Ctrl-C; a worker SIGKILLed mid-run is taken over while followed, and every
record still arrives once, in order, as ``bide log --json`` prints them afterwards.

Every subprocess and thread has a deadline; effects are counted outside the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bide
import pytest
from bide import Event, Status
from bide.engine.base.render import to_json
from bide.engine.read.scripting import iso_times
from conftest import APPS, count_lines
from extras import need
from polling import wait_for

sys.path.insert(0, str(APPS))
import follow_app  # noqa: E402

DEADLINE = 60.0
HOUR = 3600.0  # the follower's fallback re-read: polling cannot explain an event in time


class Place:
    """Where a test's processes meet: a home (an LMDB directory or a PostgreSQL URL with
    a local directory), the effects file, and how to start ``bide`` subprocesses there."""

    def __init__(self, root: Path, url: str | None) -> None:
        self.root, self.url = root, url
        self.local = root / "local"
        self.home = url if url is not None else str(root / "home")
        self.effects, self.gate = root / "effects.log", root / "gate"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
        self.env.update(PYTHONPATH=str(APPS), BIDE_TEST_EFFECTS=str(self.effects),
                        BIDE_TEST_GATE=str(self.gate))
        self.procs: list[subprocess.Popen[str]] = []

    def open(self) -> bide.Engine:
        eng = bide.open(self.home, durability="fast",
                        local=self.local if self.url is not None else None)
        eng.register(*follow_app.flows)
        return eng

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "bide.cli", *args], cwd=self.root,
                                env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bide.cli", *args], cwd=self.root,
                              env=self.env, capture_output=True, text=True, timeout=DEADLINE)

    def log_json(self, run_id: str) -> list[dict[str, Any]]:
        done = self.run("log", run_id, "--home", self.home, "--json")
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.communicate(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate(timeout=DEADLINE)


@pytest.fixture(params=["lmdb", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    url = None
    if request.param == "postgres":
        need("psycopg")
        url = request.getfixturevalue("pg_url")
    p = Place(tmp_path, url)
    yield p
    p.stop_all()


@pytest.fixture
def lmdb_place(tmp_path: Path) -> Iterator[Place]:
    p = Place(tmp_path, None)
    yield p
    p.stop_all()


class Follower:
    """``follow`` in a thread of this process; ``wait_for`` a kind of event."""

    def __init__(self, eng: bide.Engine, run_id: str, **options: Any) -> None:
        self.events: list[Event] = []
        self.error: BaseException | None = None
        options.setdefault("fallback", HOUR)
        options.setdefault("timeout", DEADLINE)
        self.timeout, self.started = options["timeout"], time.monotonic()
        self.ended: float | None = None
        self._events = eng.follow(run_id, **options)
        self.thread = threading.Thread(target=self._run, name="test-follower", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self._events:
                self.events.append(event)
        except BaseException as exc:  # checked by the test
            self.error = exc
        self.ended = time.monotonic()

    def saw(self, text: str) -> bool:
        return any(text in e.summary for e in list(self.events))

    def join(self) -> list[Event]:
        self.thread.join(DEADLINE + 10)
        assert not self.thread.is_alive(), "the follower did not stop"
        assert self.error is None, self.error
        # at its deadline a follow reads once more: ending there means a wake-up was missed
        assert self.ended is not None and self.ended - self.started < self.timeout - 1, \
            "the follow ended only at its deadline: a wake-up was missed"
        return self.events


def dicts(events: list[Event]) -> list[dict[str, Any]]:
    """The events as ``--json`` prints them (JSON has no tuples; times are ISO-8601)."""
    return [json.loads(to_json(iso_times(e.to_dict()), indent=None)) for e in events]


def test_a_commit_in_another_process_wakes_the_follow(place):
    with place.open() as eng:
        run_id = eng.submit("steps", {"topic": "t"})
        follower = Follower(eng, run_id)
        assert wait_for(lambda: len(follower.events) == 2, DEADLINE)  # read once: waiting now
        worker = place.start("resume", run_id, "--home", place.home, "--app",
                             "follow_app:flows")
        assert worker.wait(DEADLINE) == 0, worker.communicate()
        events = follower.join()  # only wake-ups could deliver these within the deadline
        assert events[-1].kind == "lease_released"
        assert eng.get(run_id).status == Status.DONE
    assert dicts(events) == place.log_json(run_id)


def test_without_a_wake_up_the_follow_would_not_see_it(lmdb_place, monkeypatch):
    """The control: the same follow with a feed that never wakes sees nothing of the
    worker's commits (its fallback is an hour), so the test above can fail."""
    place = lmdb_place
    deaf_until = threading.Event()

    class Deaf:
        def wait(self, timeout: float) -> bool:
            deaf_until.wait(timeout)  # never woken by a commit
            return False

        def close(self) -> None:
            pass

    with place.open() as eng:
        run_id = eng.submit("steps")
        monkeypatch.setattr(eng.store, "change_feed", lambda run_id: Deaf())
        follower = Follower(eng, run_id)
        assert wait_for(lambda: len(follower.events) == 2, DEADLINE)
        worker = place.start("resume", run_id, "--home", place.home, "--app",
                             "follow_app:flows")
        assert worker.wait(DEADLINE) == 0
        assert not wait_for(lambda: len(follower.events) > 2, 1.0)
        deaf_until.set()  # now it reads again, and sees the whole run
        assert dicts(follower.join()) == place.log_json(run_id)


def test_a_run_served_by_bide_watch_is_followed_to_its_end(place):
    with place.open() as eng:
        run_ids = [eng.submit("steps", {"topic": str(i)}) for i in range(3)]
        followers = {r: Follower(eng, r) for r in run_ids}
        assert wait_for(lambda: all(len(f.events) == 2 for f in followers.values()), DEADLINE)
        place.start("watch", "--home", place.home, "--app", "follow_app:flows",
                    "--durability", "fast", "--rescan", "3600")
        got = {r: f.join() for r, f in followers.items()}
        assert all(eng.get(r).status == Status.DONE for r in run_ids)
    for run_id, events in got.items():
        assert dicts(events) == place.log_json(run_id)  # every record, once, in order
    effects = count_lines(place.effects)
    assert all(effects[f"{n} {r}"] == 1 for r in run_ids for n in ("plan", "search",
                                                                       "summarize"))


def _lines(proc: subprocess.Popen[str], n: int, *, stderr: bool = False) -> list[str]:
    """The next ``n`` lines of a subprocess's stdout (or stderr), within the deadline."""
    got: list[str] = []
    pipe: Any = proc.stderr if stderr else proc.stdout
    reader = threading.Thread(target=lambda: got.extend(pipe.readline() for _ in range(n)),
                              daemon=True)
    reader.start()
    reader.join(DEADLINE)
    assert len(got) == n and all(got), (got, proc.poll())
    return got


def test_bide_log_follow_prints_live_and_ends_with_the_run(lmdb_place):
    place = lmdb_place
    with place.open() as eng:
        run_id = eng.submit("gated")
    shown = place.start("log", run_id, "--home", place.home, "--follow", "--json")
    first = _lines(shown, 2)  # run_created, checkpoint
    worker = place.start("resume", run_id, "--home", place.home, "--app", "follow_app:flows")
    live = first + _lines(shown, 3)  # lease, RUNNING, and first's checkpoint...
    assert "next wait_gate" in json.loads(live[-1])["summary"]
    assert worker.poll() is None  # ...printed while the run waits at its gate
    place.gate.touch()
    out, err = shown.communicate(timeout=DEADLINE)
    assert shown.returncode == 0, err
    assert worker.wait(DEADLINE) == 0
    assert [json.loads(line) for line in live + out.splitlines()] == place.log_json(run_id)


def test_ctrl_c_ends_bide_log_follow_with_130(lmdb_place):
    place = lmdb_place
    with place.open() as eng:
        run_id = eng.submit("steps")
    shown = place.start("log", run_id, "--home", place.home, "--follow")
    _lines(shown, 2)
    shown.send_signal(signal.SIGINT)
    _, err = shown.communicate(timeout=DEADLINE)
    assert shown.returncode == 130 and "Traceback" not in err, err


def test_ctrl_c_stops_bide_run_at_the_next_boundary_resumable(lmdb_place, monkeypatch):
    place = lmdb_place
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(place.effects))  # the resume below runs here
    running = place.start("run", "gated", "--home", place.home, "--app", "follow_app:flows",
                          "--run-id", "r-gated")
    assert "next wait_gate" in _lines(running, 4)[-1]  # created (3 records), first's checkpoint
    running.send_signal(signal.SIGINT)  # the node waits for its gate: stop after it
    assert "stopping at the next boundary" in _lines(running, 1, stderr=True)[0]
    place.gate.touch()
    out, err = running.communicate(timeout=DEADLINE)
    assert running.returncode == 130, (out, err)
    assert "Traceback" not in err
    with place.open() as eng:
        assert eng.get("r-gated").status == Status.INTERRUPTED
        assert eng.resume("r-gated").status == Status.DONE
    effects = count_lines(place.effects)
    assert effects["wait_gate r-gated"] == 1 and effects["last r-gated"] == 1


def test_bide_run_prints_events_then_the_final_state_and_its_exit_code(place):
    done = place.run("run", "steps", "--home", place.home, "--app", "follow_app:flows",
                     "--input", '{"topic": "go"}', "--run-id", "r-steps", "--json")
    assert done.returncode == 0, done.stderr
    *events, outcome = [json.loads(line) for line in done.stdout.splitlines()]
    assert events == place.log_json("r-steps")
    assert outcome["status"] == Status.DONE and outcome["state"]["summary"] == "GO 0; GO 1"
    paused = place.run("run", "asks", "--home", place.home, "--app", "follow_app:flows")
    assert paused.returncode == 4 and "bide approve a-" in paused.stderr, paused.stderr
    asleep = place.run("run", "naps", "--home", place.home, "--app", "follow_app:flows")
    assert asleep.returncode == 4 and "SLEEPING" in asleep.stdout, asleep.stderr
    assert "bide watch" in asleep.stderr and "(in 59m" in asleep.stderr, asleep.stderr
    failed = place.run("run", "breaks", "--home", place.home, "--app", "follow_app:flows")
    assert failed.returncode == 1 and "this node always fails" in failed.stdout
    again = place.run("run", "steps", "--home", place.home, "--app", "follow_app:flows",
                      "--run-id", "r-steps")
    assert again.returncode == 1 and "already exists" in again.stderr
    bad = place.run("run", "steps", "--home", place.home, "--app", "follow_app:flows",
                    "--input", "[1]")
    assert bad.returncode == 2 and "--input must be a JSON object" in bad.stderr


def test_a_worker_killed_mid_run_is_taken_over_while_followed(lmdb_place):
    place = lmdb_place
    with place.open() as eng:
        run_id = eng.submit("gated")
        follower = Follower(eng, run_id)
        worker = place.start("resume", run_id, "--home", place.home, "--app",
                             "follow_app:flows")
        assert wait_for(lambda: follower.saw("next wait_gate"), DEADLINE)
        worker.send_signal(signal.SIGKILL)  # inside wait_gate, its lease held
        worker.wait(DEADLINE)
        place.gate.touch()
        place.start("watch", "--home", place.home, "--app", "follow_app:flows",
                    "--durability", "fast", "--rescan", "0.2")
        events = follower.join()
        assert eng.get(run_id).status == Status.DONE
    assert dicts(events) == place.log_json(run_id)
    assert [e.record.token for e in events if e.kind == "lease_acquired"] == [1, 2]
    effects = count_lines(place.effects)
    assert effects[f"first {run_id}"] == 1 and effects[f"wait_gate {run_id}"] == 1


# -- PostgreSQL: who is notified, and a follower killed without closing ----------------------
@pytest.fixture
def pg_home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    need("psycopg")
    p = Place(tmp_path, request.getfixturevalue("pg_url"))
    yield p
    p.stop_all()


def _follow_rows(eng: bide.Engine) -> list[str]:
    from bide.engine.postgres.follow import PREFIX
    from bide.engine.postgres.reader import SCHEMA

    with eng.store.reader() as r:
        return sorted(k for (k,) in r.conn.execute(  # type: ignore[attr-defined]
            f"SELECT key FROM {SCHEMA}.meta WHERE starts_with(key, %s)", (PREFIX,)))


def _follow_sessions(eng: bide.Engine) -> int:
    with eng.store.reader() as r:
        return int(r.conn.execute(  # type: ignore[attr-defined]
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bide-follow'"
        ).fetchone()[0])


def test_a_commit_notifies_only_runs_someone_follows(pg_home):
    import psycopg
    from bide.engine.postgres.follow import CHANNEL, tag

    with pg_home.open() as eng, psycopg.connect(pg_home.url, autocommit=True) as ears:
        ears.execute(f"LISTEN {CHANNEL}")
        quiet, followed = eng.submit("steps"), eng.submit("steps")
        assert list(ears.notifies(timeout=0.3)) == []  # nobody follows: no NOTIFY at all
        events = eng.follow(followed, timeout=DEADLINE)
        next(events)  # registered now
        eng.resume(quiet)
        assert list(ears.notifies(timeout=0.3)) == []
        eng.resume(followed)
        heard = {n.payload for n in ears.notifies(timeout=1.0)}
        assert heard == {tag(followed)}
        events.close()


def test_a_killed_followers_row_is_swept_by_the_next_follower(pg_home):
    with pg_home.open() as eng:
        run_id = eng.submit("steps")
        shown = pg_home.start("log", run_id, "--home", pg_home.url, "--follow")
        _lines(shown, 2)
        shown.send_signal(signal.SIGKILL)  # no close: its row stays behind
        shown.wait(DEADLINE)
        assert len(_follow_rows(eng)) == 1
        assert wait_for(lambda: _follow_sessions(eng) == 0, DEADLINE)  # the server saw it die
        events = eng.follow(run_id, timeout=DEADLINE)
        next(events)
        mine = _follow_rows(eng)
        assert len(mine) == 1  # the dead session's row is gone, this one's is there
        events.close()
        assert _follow_rows(eng) == []


def test_a_follow_listens_again_after_the_server_restarts(pg_home, pg_cluster):
    with pg_home.open() as eng:
        run_id = eng.submit("steps")
        follower = Follower(eng, run_id)
        assert wait_for(lambda: len(follower.events) == 2, DEADLINE)
        pg_cluster.restart("fast")  # its LISTEN connection is dropped
        worker = pg_home.start("resume", run_id, "--home", pg_home.url, "--app",
                               "follow_app:flows")
        assert worker.wait(DEADLINE) == 0, worker.communicate()
        events = follower.join()  # fallback an hour: heard through the new connection
        assert eng.get(run_id).status == Status.DONE
    assert dicts(events) == pg_home.log_json(run_id)
