"""``bide serve`` on a real socket beside its watcher: runs submitted and decided over HTTP
finish, and the event streams say so as it happens (keepalives, Last-Event-ID, a client
that leaves)."""

from __future__ import annotations

import logging
import threading
import time

import bide
import pytest
from conftest import open_on
from polling import wait_for
from serve_world import FLOWS, Stream, live, request


@pytest.fixture(params=["lmdb", pytest.param("postgres", marks=pytest.mark.slow)])
def eng(request, home):
    with open_on(request.param, request, home, time.time) as e:
        e.register(*FLOWS)
        yield e


def status(server: bide.Server, run_id: str) -> str:
    code, doc = request(server, "GET", f"/runs/{run_id}")
    assert code == 200, doc
    return doc["status"]


def test_a_run_submitted_and_approved_over_http_finishes(eng):
    with live(eng) as server:
        home_stream = Stream(server, "/events")
        try:
            code, doc = request(server, "POST", "/runs", {"flow": "gated", "run_id": "r1"})
            assert (code, doc["status"]) == (202, bide.Status.PENDING)
            assert wait_for(lambda: status(server, "r1") == bide.Status.WAITING_APPROVAL, 20)
            _, pending = request(server, "GET", "/pending")
            [item] = pending["pending"]
            code, doc = request(server, "POST", f"/decisions/{item['approval_id']}",
                                {"decision": "approve", "by": "ann"})
            assert code == 200, doc
            assert wait_for(lambda: status(server, "r1") == bide.Status.DONE, 20)
            seen = home_stream.until_data(status=bide.Status.DONE)
        finally:
            home_stream.close()
    kinds = [m["event"] for m in seen if "event" in m]
    assert kinds[0] == "run_created" and "approval_decided" in kinds
    assert all(m["data"]["run_id"] == "r1" for m in seen if "data" in m)
    assert all(int(m["id"]) == m["data"]["seq"] for m in seen if "data" in m)


def test_a_runs_stream_goes_through_its_pause_and_ends_when_it_is_done(eng):
    aid = eng.start("gated", {}, run_id="r1").waiting["approval_id"]
    with live(eng) as server:
        stream = Stream(server, "/runs/r1/events")
        try:
            before = stream.until_data(type="approval_requested")
            code, _ = request(server, "POST", f"/decisions/{aid}", {"decision": "approve"})
            assert code == 200
            after = stream.until("end")
            with pytest.raises(EOFError):
                stream.next()  # the stream closed after its end
        finally:
            stream.close()
    assert after[-1]["data"] == {"run_id": "r1", "status": bide.Status.DONE}
    seqs = [int(m["id"]) for m in before + after if "id" in m]
    assert seqs == sorted(set(seqs))  # in order, none twice
    assert [e["seq"] for e in eng.log("r1")] == seqs


def test_the_home_stream_sends_keepalives_and_goes_on_after_last_event_id(eng):
    eng.start("plain", {}, run_id="r1")
    logged = [e["seq"] for e in eng.log("r1")]
    with live(eng, keepalive=0.2) as server:
        stream = Stream(server, "/events", last_event_id=logged[1])
        try:
            replayed = stream.until_data(seq=logged[-1])
            assert stream.next() == {"comment": "keepalive"}  # nothing else happened
        finally:
            stream.close()
    assert [int(m["id"]) for m in replayed] == logged[2:]


def test_a_client_that_leaves_ends_its_streams_thread(eng):
    eng.start("gated", {}, run_id="r1")
    with live(eng, keepalive=0.1, fallback=0.1) as server:
        streams = [Stream(server, "/events"), Stream(server, "/runs/r1/events")]
        streams[1].until_data(type="approval_requested")
        assert wait_for(lambda: len(sse_threads()) == 2, 10), sse_threads()
        for s in streams:
            s.close()
        assert wait_for(lambda: not sse_threads(), 10), sse_threads()
        assert status(server, "r1") == bide.Status.WAITING_APPROVAL  # still serving


def sse_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("bide-serve-sse")]


class Errors(logging.Handler):
    """uvicorn's error log, kept: what it says when it had to cancel a request."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


def test_stopping_the_server_ends_open_streams(eng):
    """They end at once, cleanly: uvicorn never has to cancel them after its grace."""
    eng.start("gated", {}, run_id="r1")
    errors = Errors()
    with live(eng, keepalive=30) as server:
        logging.getLogger("uvicorn.error").addHandler(errors)  # after uvicorn set its logging
        try:
            streams = [Stream(server, "/events"), Stream(server, "/runs/r1/events")]
            streams[1].until_data(type="approval_requested")
            server.stop()  # before the watcher: the streams end, not the grace period
            try:
                for s in streams:
                    with pytest.raises(EOFError):
                        while True:
                            s.next()
            finally:
                for s in streams:
                    s.close()
        finally:
            logging.getLogger("uvicorn.error").removeHandler(errors)
        assert not server._thread.is_alive()
        assert wait_for(lambda: not sse_threads(), 10), sse_threads()
    assert errors.said == []


def test_the_home_stream_hears_another_process_commit(eng, request, tmp_path):
    """A run submitted by `bide submit` in another process shows on /events (LMDB: the
    data file's inotify; PostgreSQL: the stream's re-read), and the server runs it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    on_pg = request.node.callspec.params["eng"] == "postgres"
    home = request.getfixturevalue("pg_url") if on_pg else str(eng.home)
    with live(eng) as server:
        stream = Stream(server, "/events")
        try:
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
            done = subprocess.run([sys.executable, "-m", "bide.cli", "submit", "plain", "--home",
                                   home, "--app", "serve_world:FLOWS", "--run-id", "other"],
                                  env=env, cwd=tmp_path, capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr
            seen = stream.until_data(run_id="other", kind="run_created")
        finally:
            stream.close()
        assert wait_for(lambda: status(server, "other") == bide.Status.DONE, 20)
    assert seen[-1]["data"]["status"] == bide.Status.PENDING
