"""Wake-ups on a PostgreSQL home: NOTIFY in the commit, LISTEN in ``bide watch``.

A commit announces only the runs a watcher must act on, in its own transaction;
a watcher in another process resumes a decided run through the notification
(its rescan set to an hour, so polling cannot explain it), hears again after
the server restarts, and takes over a run whose worker on "another host" (its
own UTS namespace, so the lease cannot be judged dead by pid) was SIGKILLed once
the lease expires, with the side effect done once and the dead token refused.
Every wait has a deadline.
"""

from __future__ import annotations

import os
import shutil
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
from bide import Decision, Status
from bide.formats import LeaseAcquired, LeaseReleased, RunCreated, StatusChanged
from conftest import APPS, count_lines
from extras import need
from polling import wait_for

psycopg = need("psycopg")
from bide.engine.base.errors import StaleLease  # noqa: E402
from bide.engine.postgres import store as pg_store  # noqa: E402  (needs psycopg)
from bide.engine.postgres.listen import CHANNEL  # noqa: E402
from bide.engine.postgres.store import PostgresStore  # noqa: E402
from bide.engine.run.blocking import BLOCKED  # noqa: E402

sys.path.insert(0, str(APPS))
import wake_app  # noqa: E402

DEADLINE = 30.0  # generous: a wait this long means it never happened
HOUR = "3600"  # --rescan: no periodic rescan within any test


class Watch:
    """``bide watch`` in a subprocess over a PostgreSQL home, its output in a file."""

    def __init__(self, where: Path, url: str, effects: Path, *extra: str,
                 prefix: tuple[str, ...] = (), hang: bool = False) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.out = where / "watch.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
        env.update(PYTHONPATH=str(APPS), BIDE_TEST_EFFECTS=str(effects))
        self.hang = hang
        if hang:
            env["BIDE_TEST_HANG"] = "1"
        with self.out.open("w") as fh:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", "bide.cli", "watch", "--home", url, "--app",
                 "wake_app:flows", "--durability", "fast", "--workers", "2", *extra],
                cwd=where, env=env, stdout=fh, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.out.read_text()

    def wait_log(self, text: str) -> None:
        assert wait_for(lambda: text in self.log() or self.proc.poll() is not None,
                        DEADLINE) and text in self.log(), self.log()

    def stop(self) -> None:
        if self.proc.poll() is None and self.hang:  # its node never returns: no grace
            self.proc.kill()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(DEADLINE)


@pytest.fixture
def watches() -> Iterator[list[Watch]]:
    started: list[Watch] = []
    yield started
    for w in started:
        w.stop()


def opened(url: str, where: Path, durability: str = "fast") -> bide.Engine:
    eng = bide.open(url, local=where, durability=durability)
    eng.register(*wake_app.flows)
    return eng


def status(url: str, where: Path, run_id: str) -> Status:
    with opened(url, where) as eng:
        return eng.get(run_id).status


# -- what a commit announces --------------------------------------------------------------
class Heard:
    """Every notification on the channel, as a test connection of its own receives them."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        self.conn.execute(f"LISTEN {CHANNEL}")

    def take(self, wait: float = 0.3) -> list[str]:
        """What arrived: waits ``wait`` seconds for the first, then takes the rest."""
        got = [n.payload for n in self.conn.notifies(timeout=wait, stop_after=1)]
        return got + [n.payload for n in self.conn.notifies(timeout=0.3)] if got else got


@pytest.fixture
def store_and_ears(pg_url: str) -> Iterator[tuple[PostgresStore, Heard]]:
    store = PostgresStore(pg_url, durability="fast")
    ears = Heard(pg_url)
    yield store, ears
    ears.conn.close()
    store.close()


def test_a_commit_announces_only_the_runs_a_watcher_must_act_on(store_and_ears):
    store, ears = store_and_ears
    store.commit([RunCreated(run_id="a", flow="job", at=1.0)])
    assert ears.take() == ["a"]  # submitted: PENDING
    store.commit([LeaseAcquired(run_id="a", owner="w", token=1, expires_at=9e12),
                  StatusChanged(run_id="a", status=Status.RUNNING)])
    store.commit([StatusChanged(run_id="a", status=Status.RUNNING, reason="a step")])
    store.renew_leases([("a", 1, 60.0)])
    assert ears.take() == []  # taken, stepping, renewed: nobody else has work here
    store.commit([RunCreated(run_id="b", flow="job", status=Status.RUNNING, at=1.0),
                  LeaseAcquired(run_id="b", owner="w", token=1, expires_at=9e12),
                  StatusChanged(run_id="a", status=Status.DONE),
                  LeaseReleased(run_id="a", owner="w", token=1)])
    assert ears.take() == []  # started leased; finished
    store.commit([LeaseReleased(run_id="b", owner="w", token=1),
                  StatusChanged(run_id="b", status=Status.INTERRUPTED)])
    assert ears.take() == ["b"]  # let go: any worker may take it
    store.commit([RunCreated(run_id="lg", flow="langgraph", at=1.0)])
    assert ears.take() == []  # LangGraph threads are never a watcher's
    store.commit([LeaseAcquired(run_id="b", owner="w", token=2, expires_at=9e12),
                  StatusChanged(run_id="b", status=Status.RUNNING)])
    store.commit([LeaseReleased(run_id="b", owner="w", token=2),
                  StatusChanged(run_id="b", status=Status.INTERRUPTED, reason=BLOCKED,
                                error="UnknownFlow: job")])
    assert ears.take() == []  # blocked here: two hosts failing on it must not ping-pong


def test_a_decision_announces_its_run_once_per_commit(store_and_ears, tmp_path, pg_url):
    store, ears = store_and_ears
    with opened(pg_url, tmp_path) as eng:
        eng.start("ask", run_id="q")
        assert ears.take() == []  # paused for a person: no watcher can act yet
        (pending,) = eng.pending()
        assert eng.decide(pending["approval_id"], Decision.APPROVE, by="t")
    assert ears.take() == ["q"]


def test_a_rolled_back_commit_announces_nothing(store_and_ears, monkeypatch):
    """The NOTIFY is sent, then the server refuses the transaction (as SSI may): the
    store runs it again, and only the commit that landed is heard."""
    store, ears = store_and_ears
    real, calls = pg_store._announce, []

    def refused_once(txn: Any, batch: Any) -> None:
        real(txn, batch)
        calls.append(1)
        if len(calls) == 1:
            raise psycopg.errors.SerializationFailure("refused after the NOTIFY")

    monkeypatch.setattr(pg_store, "_announce", refused_once)
    store.commit([RunCreated(run_id="once", flow="job", at=1.0)])
    assert len(calls) == 2
    assert ears.take() == ["once"]


# -- a watcher in another process ------------------------------------------------------------
def _paused(url: str, where: Path, run_id: str) -> str:
    with opened(url, where, "durable") as eng:  # kept across the server's crash
        eng.start("ask", run_id=run_id)
        (pending,) = [p for p in eng.pending() if p["run_id"] == run_id]
        return pending["approval_id"]


def _decide(url: str, where: Path, approval_id: str) -> None:
    with opened(url, where) as eng:
        assert eng.decide(approval_id, Decision.APPROVE, by="host A")


def test_a_decision_from_another_process_resumes_the_run_by_notification(
        tmp_path, pg_url, watches):
    effects = tmp_path / "effects.log"
    aid = _paused(pg_url, tmp_path / "a", "r1")
    watches.append(w := Watch(tmp_path / "b", pg_url, effects, "--rescan", HOUR))
    w.wait_log("listening for wake-ups")  # its one rescan is over: only a NOTIFY is left
    _decide(pg_url, tmp_path / "a", aid)
    assert wait_for(lambda: count_lines(effects).get("resumed r1") == 1, DEADLINE), w.log()
    assert wait_for(lambda: status(pg_url, tmp_path / "a", "r1") == Status.DONE, DEADLINE)
    assert count_lines(effects) == {"resumed r1": 1}


def _listening(cluster: Any, url: str) -> int:
    dbname = url.split("/")[3].split("?")[0]
    with psycopg.connect(cluster.url(), autocommit=True, connect_timeout=10) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                            "application_name = 'bide-listen'", (dbname,)).fetchone()[0]


def test_a_watcher_listens_again_after_an_immediate_server_restart(
        tmp_path, pg_cluster, pg_url, watches):
    effects = tmp_path / "effects.log"
    before = _paused(pg_url, tmp_path / "a", "gap")  # decided while the server is down
    after = _paused(pg_url, tmp_path / "a", "later")  # decided once it listens again
    watches.append(w := Watch(tmp_path / "b", pg_url, effects, "--rescan", HOUR))
    w.wait_log("listening for wake-ups")
    w.proc.send_signal(signal.SIGSTOP)  # frozen: it cannot reconnect before the decision
    try:
        pg_cluster.restart("immediate")
        _decide(pg_url, tmp_path / "a", before)  # its NOTIFY reaches no one
    finally:
        w.proc.send_signal(signal.SIGCONT)
    # its listening connection is dead: it reconnects, and its rescan finds the run
    assert wait_for(lambda: count_lines(effects).get("resumed gap") == 1, DEADLINE), w.log()
    assert wait_for(lambda: _listening(pg_cluster, pg_url) == 1, DEADLINE), w.log()
    _decide(pg_url, tmp_path / "a", after)
    assert wait_for(lambda: count_lines(effects).get("resumed later") == 1, DEADLINE), w.log()
    assert count_lines(effects) == {"resumed gap": 1, "resumed later": 1}


# -- a dead worker's run, taken over across hosts --------------------------------------------
def _other_host() -> tuple[str, ...]:
    """A prefix that runs a command as on another host: its own UTS namespace and name."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--uts", "true"],
                                         capture_output=True).returncode != 0:
        pytest.skip("needs unshare --uts (root) to give a worker another host name")
    return (unshare, "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', "other-host")


# no rescan, and an announced run looked at again only after its own lease time (2 min):
# within the test's deadline only the timer at the far lease's expiry can act
NEAR = ("--rescan", HOUR, "--lease-ttl", "120")


@pytest.mark.parametrize("near_knows_by", ["rescan", "notification"])
def test_a_killed_hosts_run_is_taken_over_when_its_lease_expires(
        tmp_path, pg_url, watches, near_knows_by):
    """The near watcher learns of the run by its one rescan (started after the far
    worker took it), or by the run's announcement (frozen until the far worker has
    it); after that only the lease's timer can make it take the run over."""
    effects = tmp_path / "effects.log"
    near = None
    if near_knows_by == "notification":
        watches.append(near := Watch(tmp_path / "near", pg_url, effects, *NEAR))
        near.wait_log("listening for wake-ups")
        near.proc.send_signal(signal.SIGSTOP)  # the far worker must win the run
    far = Watch(tmp_path / "far", pg_url, effects, "--lease-ttl", "2", "--rescan", HOUR,
                prefix=_other_host(), hang=True)
    watches.append(far)
    far.wait_log("listening for wake-ups")
    with opened(pg_url, tmp_path / "t") as eng:
        eng.submit("job", run_id="j")
    assert wait_for(lambda: any(k.startswith("node ship j") for k in count_lines(effects)),
                    DEADLINE), far.log()
    with opened(pg_url, tmp_path / "t") as eng:
        with eng.store.reader() as r:
            head = r.head("j")
    assert head.status == Status.RUNNING and head.lease_owner.startswith("other-host:")
    if near is None:
        watches.append(near := Watch(tmp_path / "near", pg_url, effects, *NEAR))
        near.wait_log("listening for wake-ups")
    else:
        near.proc.send_signal(signal.SIGCONT)  # the announcement waits in its socket
    time.sleep(2.5)  # more than one lease time: the far worker renews, nobody takes over
    assert status(pg_url, tmp_path / "t", "j") == Status.RUNNING
    assert sum(1 for k in count_lines(effects) if k.startswith("node ship")) == 1
    far.proc.send_signal(signal.SIGKILL)
    far.proc.wait(DEADLINE)
    assert wait_for(lambda: status(pg_url, tmp_path / "t", "j") == Status.DONE, DEADLINE), \
        near.log()
    done = count_lines(effects)
    assert done[f"node ship j {far.proc.pid}"] == 1  # the far host's, cut short
    assert sum(n for k, n in done.items() if k.startswith("node ship j")) == 2
    assert done["node pay j"] == 1
    assert sum(n for k, n in done.items() if k.startswith("tool charge")) == 1
    with opened(pg_url, tmp_path / "t") as eng:
        with pytest.raises(StaleLease):  # the far worker, were it to wake, commits nothing
            eng.store.commit([StatusChanged(run_id="j", status=Status.RUNNING, reason="late")],
                             fence=("j", head.lease_token))
        assert eng.get("j").status == Status.DONE


def test_the_lease_timer_does_not_take_over_a_live_workers_run(tmp_path, pg_url, watches):
    """The negative control of the test above: without the kill, no takeover."""
    effects = tmp_path / "effects.log"
    far = Watch(tmp_path / "far", pg_url, effects, "--lease-ttl", "1", "--rescan", HOUR,
                prefix=_other_host(), hang=True)
    watches.append(far)
    far.wait_log("listening for wake-ups")
    with opened(pg_url, tmp_path / "t") as eng:
        eng.submit("job", run_id="j")
    assert wait_for(lambda: any(k.startswith("node ship j") for k in count_lines(effects)),
                    DEADLINE), far.log()
    watches.append(near := Watch(tmp_path / "near", pg_url, effects, "--rescan", HOUR))
    near.wait_log("listening for wake-ups")
    time.sleep(3.5)  # three lease times and more: the far worker keeps renewing
    assert status(pg_url, tmp_path / "t", "j") == Status.RUNNING
    assert sum(1 for k in count_lines(effects) if k.startswith("node ship")) == 1


def _sessions(cluster: Any, url: str) -> dict[int, Any]:
    """Each bide session of the home's database: when it last sent the server a query."""
    dbname = url.split("/")[3].split("?")[0]
    with psycopg.connect(cluster.url(), autocommit=True, connect_timeout=10) as conn:
        return dict(conn.execute("SELECT pid, query_start FROM pg_stat_activity WHERE "
                                 "datname = %s AND application_name LIKE 'bide%%'",
                                 (dbname,)).fetchall())


def _settled(cluster: Any, url: str, *, still: float = 0.8, limit: float = 4.0
             ) -> dict[int, Any]:
    """``_sessions`` once they have not changed for ``still`` seconds (or after ``limit``):
    the waker says it listens after its own first scan, while the watcher's other threads
    (inbox, workers) may still be starting, later on a loaded machine."""
    deadline = time.monotonic() + limit
    seen = _sessions(cluster, url)
    while time.monotonic() < deadline:
        time.sleep(still)
        now = _sessions(cluster, url)
        if now == seen:
            return now
        seen = now
    return seen


@pytest.mark.parametrize("rescan", [(), pytest.param(("--rescan", "0.3"), id="polling")])
def test_an_idle_watcher_sends_the_server_nothing_between_rescans(
        tmp_path, pg_cluster, pg_url, watches, rescan):
    """With the default rescan (30 s) nothing is asked for seconds on end; the control
    (a rescan every 0.3 s, as a watcher without wake-ups must) is seen asking."""
    with opened(pg_url, tmp_path / "a") as eng:
        for i in range(20):
            eng.submit("job", run_id=f"f{i}")
        eng.store.commit([StatusChanged(run_id=f"f{i}", status=Status.DONE) for i in range(20)])
    watches.append(w := Watch(tmp_path / "b", pg_url, tmp_path / "effects.log", *rescan))
    w.wait_log("listening for wake-ups")
    before = _settled(pg_cluster, pg_url)  # the other threads' start-up queries are over
    assert len(before) >= 2  # its listening connection and its pooled one
    time.sleep(2.0)
    quiet = _sessions(pg_cluster, pg_url) == before
    assert quiet is (rescan == ()), w.log()


def test_a_run_id_a_notification_cannot_carry_asks_for_a_rescan(store_and_ears):
    """PostgreSQL text holds no NUL: such a run is announced as "look at everything",
    which the watcher's listener reports as missed (a full rescan)."""
    store, ears = store_and_ears
    stop = threading.Event()
    listener = store.changes(stop)
    try:
        store.commit([RunCreated(run_id="a\x00b", flow="job", at=1.0),
                      RunCreated(run_id="plain", flow="job", at=1.0)])
        assert sorted(ears.take()) == ["", "plain"]
        heard = listener.wait(DEADLINE)
        assert heard.missed and heard.runs == ("plain",)
    finally:
        listener.close()
