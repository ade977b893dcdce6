"""Every loop of ``bide watch`` survives an immediate PostgreSQL restart.

The bug this reproduces: the schedule thread opened its change feed (a LISTENing
connection, ``pg_follow``) once, outside any retry, so a server restart while it was
opening it (a watcher just started, under load) ended the thread with "schedules
failed (StoreError: cannot follow runs ...: server closed the connection
unexpectedly)", which stops the whole watcher. Here the server stops (immediate: as a
crash) exactly as that thread opens its feed and starts again; the watcher's rescan is
an hour away, so only the schedule thread can start the slot's run.
"""

from __future__ import annotations

import re
import sys
import threading
import time

import bide
from bide import Decision, Status
from bide.engine.human.inbox import drop_decision
from bide.engine.serve.events import home_messages, run_messages
from bide.formats import SCHEDULES_RUN, RunCreated, StatusChanged
from conftest import APPS, count_lines
from extras import need
from pg_outage_helpers import commit_elsewhere, give_up_within, server_away
from polling import wait_for

need("psycopg")
from bide.engine.postgres.store import PostgresStore  # noqa: E402  (needs psycopg)

sys.path.insert(0, str(APPS))
import schedule_app  # noqa: E402
import wake_app  # noqa: E402

DEADLINE = 30.0  # generous: a wait this long means it never happened
FAILED = re.compile(r"\bfailed \(")  # "schedules failed (...)", "wake-ups failed (...)"


def _slot(run_id: str) -> int:
    return int(run_id.rsplit("-", 1)[1])


def test_a_schedule_fires_after_a_restart_while_its_thread_opens_its_feed(
        tmp_path, pg_cluster, pg_url, monkeypatch):
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(effects))
    lines: list[str] = []
    with bide.open(pg_url, local=tmp_path, durability="durable") as eng:  # kept in a crash
        eng.register(schedule_app.flow)
        eng.schedule("beat", "tick", every=1)
        real, restarted = eng.store.change_feed, threading.Event()

        def opened_in_an_outage(run_id: str):  # the real feed, on a server that is down
            if run_id != SCHEDULES_RUN or restarted.is_set():
                return real(run_id)
            try:
                with server_away(pg_cluster):
                    return real(run_id)
            finally:
                restarted.set()

        monkeypatch.setattr(eng.store, "change_feed", opened_in_an_outage)
        watcher = bide.Watcher(eng, rescan=3600, workers=1, log=lines.append)
        serving = threading.Thread(target=watcher.serve, name="test-watcher", daemon=True)
        serving.start()
        try:
            assert wait_for(restarted.is_set, DEADLINE), lines
            after = time.time()
            assert wait_for(lambda: any(_slot(k.split()[1]) > after for k in count_lines(effects))
                            or watcher.stop.is_set(), DEADLINE), lines
            assert wait_for(lambda: any("listening for wake-ups" in x for x in lines)
                            or watcher.stop.is_set(), DEADLINE), lines  # the waker, too
            assert not watcher.stop.is_set(), lines  # nothing stopped the watcher
        finally:
            watcher.stop.set()
            serving.join(DEADLINE)
        assert not serving.is_alive()
        runs = eng.runs(flow="tick")
    assert not [line for line in lines if FAILED.search(line)], lines
    ticks = count_lines(effects)
    assert all(n == 1 for n in ticks.values()), ticks  # each slot's run's effect once
    assert len({_slot(r.run_id) for r in runs}) == len(runs)  # one run per slot


def test_the_serve_home_stream_reads_on_after_the_server_was_away(pg_cluster, pg_url):
    """``bide serve``'s home stream reads the store in a thread of its own: a read that
    fails while the server is away (longer than the store's reconnect time) is tried
    again, backing off, and the stream goes on; it once ended with the StoreError."""
    store = PostgresStore(pg_url, durability="durable", reconnect_timeout=0.2)
    said: list[str] = []
    stop = threading.Event()
    produce = home_messages(store, None, fallback=0.05)
    reading = threading.Thread(target=produce, args=(lambda m: said.append(m) or True, stop),
                               name="test-home-stream", daemon=True)
    try:
        reading.start()
        with server_away(pg_cluster):
            time.sleep(0.6)  # a few reads fail meanwhile
        commit_elsewhere(pg_url, [RunCreated(run_id="after", flow="job", at=1.0)])
        assert wait_for(lambda: any('"after"' in m for m in said) or not reading.is_alive(),
                        DEADLINE), said
        assert reading.is_alive(), said
    finally:
        stop.set()
        reading.join(DEADLINE)
        store.close()
    assert not reading.is_alive()


def test_a_decision_file_landing_while_the_server_is_away_is_taken_once_it_is_back(
        tmp_path, pg_cluster, pg_url, monkeypatch):
    """The inbox loop reads the store to check a file (its signing marker): that read
    failing (the server away longer than the store's reconnect time) once ended the
    loop and the watcher. Now the claimed file waits and is taken when the server is
    back; the run resumes once."""
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(effects))
    lines: list[str] = []
    with bide.open(pg_url, local=tmp_path, durability="durable") as eng:
        eng.register(*wake_app.flows)
        eng.start("ask", run_id="q")
        (pending,) = eng.pending()
        give_up_within(eng.store, 0.3)  # away longer than this
        watcher = bide.Watcher(eng, rescan=3600, workers=1, log=lines.append)
        serving = threading.Thread(target=watcher.serve, name="test-watcher", daemon=True)
        serving.start()
        try:
            assert wait_for(lambda: any("listening for wake-ups" in x for x in lines),
                            DEADLINE), lines
            with server_away(pg_cluster):
                drop_decision(tmp_path, pending["approval_id"], Decision.APPROVE, by="t",
                              inbox=eng.doors.inbox)
                assert wait_for(lambda: any(x.startswith("inbox: cannot") for x in lines)
                                or watcher.stop.is_set(), DEADLINE), lines
            assert wait_for(lambda: count_lines(effects).get("resumed q") == 1
                            or watcher.stop.is_set(), DEADLINE), lines
            assert not watcher.stop.is_set(), lines
        finally:
            watcher.stop.set()
            serving.join(DEADLINE)
        assert not serving.is_alive()
        assert eng.get("q").status == Status.DONE
    assert not [line for line in lines if FAILED.search(line)], lines
    assert count_lines(effects) == {"resumed q": 1}
    assert [x for x in lines if x.startswith("inbox: cannot")][1:] == []  # said once


def test_the_serve_run_stream_follows_on_after_the_server_was_away(pg_cluster, pg_url):
    """A run's stream (``follow`` in a thread) once ended with the StoreError of a read
    made while the server was away; now it follows again from its cursor."""
    store = PostgresStore(pg_url, durability="durable", reconnect_timeout=0.2)
    store.commit([RunCreated(run_id="r", flow="job", at=1.0)])
    said: list[str] = []
    stop = threading.Event()
    produce = run_messages(store, "r", None, fallback=0.05)
    reading = threading.Thread(target=produce, args=(lambda m: said.append(m) or True, stop),
                               name="test-run-stream", daemon=True)
    try:
        reading.start()
        assert wait_for(lambda: any("run_created" in m for m in said), DEADLINE), said
        with server_away(pg_cluster):
            time.sleep(0.6)  # a few reads fail meanwhile
        commit_elsewhere(pg_url, [StatusChanged(run_id="r", status=Status.DONE)])
        assert wait_for(lambda: any(m.startswith("event: end") for m in said)
                        or not reading.is_alive(), DEADLINE), said
        assert sum(m.count("event: run_created") for m in said) == 1, said  # not twice
        assert any(m.startswith("event: end") for m in said), said
    finally:
        stop.set()
        reading.join(DEADLINE)
        store.close()
    assert not reading.is_alive()


def test_a_watcher_stopped_while_its_waker_connects_in_an_outage_stops_quietly(
        tmp_path, pg_cluster, pg_url, monkeypatch):
    """A stop (SIGTERM) while the waker's LISTEN connection was still being made in an
    outage once ended ``bide watch`` with "cannot listen for wake-ups: the server is
    unreachable" (exit 1); a stop during an outage is a stop like any: quiet."""
    lines: list[str] = []
    with bide.open(pg_url, local=tmp_path, durability="durable") as eng:
        eng.register(*wake_app.flows)
        watcher = bide.Watcher(eng, rescan=3600, workers=1, log=lines.append)
        real, connecting = watcher._changes, threading.Event()
        assert real is not None

        def listened_in_an_outage(stop: threading.Event):
            with server_away(pg_cluster):
                connecting.set()
                return real(stop)  # retries until the server is back, or the stop

        monkeypatch.setattr(watcher, "_changes", listened_in_an_outage)
        failure: list[BaseException] = []

        def serve() -> None:
            try:
                watcher.serve()
            except BaseException as exc:  # the test asserts on it
                failure.append(exc)

        serving = threading.Thread(target=serve, name="test-watcher", daemon=True)
        serving.start()
        try:
            assert connecting.wait(DEADLINE)
            time.sleep(0.3)  # a few connection attempts fail meanwhile
        finally:
            watcher.stop.set()  # what SIGTERM does
            serving.join(DEADLINE)
        assert not serving.is_alive()
    assert failure == [], failure
    # (the schedules thread may say it waits for the server: it does, while it is away)
    assert not [line for line in lines if FAILED.search(line) or "cannot listen" in line
                or line.startswith("inbox: cannot")], lines


def test_a_connection_dropped_while_it_is_set_up_is_made_again(pg_cluster, pg_url,
                                                              monkeypatch):
    """A new connection the server ends before its first statements (a restart under way)
    raised the raw psycopg error out of ``reader()`` and ``commit`` — no caller expects
    it, and it stopped a watcher's schedules thread ("schedules failed (OperationalError:
    consuming input failed ...)"); now it is made again, as a refused one is."""
    import psycopg
    from bide.engine.postgres import store as pg_store

    store = PostgresStore(pg_url, durability="durable", reconnect_timeout=5.0)
    store.commit([RunCreated(run_id="r", flow="job", at=1.0)])
    store._pool.close()  # no idle connection: the next read makes a new one
    real, ended = pg_store.connect, []

    def ended_at_once(url, **kwargs):
        conn = real(url, **kwargs)
        if not ended:  # the first one: its server process ends before it is set up
            pid = conn.info.backend_pid
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            ended.append(pid)
        return conn

    monkeypatch.setattr(pg_store, "connect", ended_at_once)
    try:
        with store.reader() as r:
            assert r.head("r") is not None
        assert len(ended) == 1
    finally:
        store.close()
