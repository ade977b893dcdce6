"""``bide serve`` as a process (issue 18): ready when it says so, a run submitted and
approved over HTTP finishes, SIGTERM stops it cleanly; and a decision it answered 200
for survives a kill -9 of the server: a new server finishes the run, the tool once."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import APPS, count_lines
from extras import need
from polling import wait_for

need("starlette")
need("uvicorn")

DEADLINE = 60.0
PORT_TRIES = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A ``bide serve`` subprocess on a free port, ready (its ready file) or failed."""

    def __init__(self, home: str, tmp: Path, env: dict[str, str], *extra: str) -> None:
        self.ready, self.token_file = tmp / f"ready-{time.monotonic_ns()}", tmp / "serve.token"
        for _ in range(PORT_TRIES):  # a free port can be taken (another test worker's
            self.port = free_port()  # connection) before the server binds it: another one
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bide.cli", "serve", "--home", home, "--app",
                 "serve_app:flows", "--port", str(self.port), "--token-file",
                 str(self.token_file), "--ready-file", str(self.ready), "--durability", "fast",
                 "--lease-ttl", "2", *extra], env=env, cwd=tmp, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)
            if not wait_for(lambda: self.ready.exists() or self.proc.poll() is not None,
                            DEADLINE):
                self.stop(signal.SIGKILL)
                raise AssertionError("bide serve was not ready in time")
            if self.proc.poll() is None:
                break
            out = self.proc.communicate()[0]
            assert "address already in use" in out, out
        else:
            raise AssertionError(f"every port tried was taken: {out}")
        self.token = self.token_file.read_text().strip()

    def call(self, method: str, path: str, body: object = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, None if body is None else json.dumps(body),
                         {"Authorization": f"Bearer {self.token}",
                          "Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def status(self, run_id: str) -> str:
        code, doc = self.call("GET", f"/runs/{run_id}")
        assert code == 200, doc
        return doc["status"]

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out = self.proc.communicate(timeout=DEADLINE)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out = self.proc.communicate(timeout=DEADLINE)[0]
        return self.proc.returncode, out


@pytest.fixture(params=["lmdb", pytest.param("postgres", marks=pytest.mark.slow)])
def where(request, tmp_path):
    """The home (a directory, or the test PostgreSQL server with a local inbox), and the
    environment a server process of it needs."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BIDE_")},
           "PYTHONPATH": str(APPS), "BIDE_TEST_EFFECTS": str(tmp_path / "effects.log")}
    if request.param == "postgres":
        need("psycopg")
        return request.getfixturevalue("pg_url"), ["--inbox", str(tmp_path / "inbox")], env
    return str(tmp_path / "home"), [], env


def test_a_run_submitted_and_approved_over_http_finishes_then_sigterm_stops(where, tmp_path):
    home, extra, env = where
    server = Served(home, tmp_path, env, *extra)
    try:
        code, doc = server.call("POST", "/runs", {"flow": "shipping", "input": {"to": "mars"},
                                                  "run_id": "r1"})
        assert (code, doc["status"]) == (202, "PENDING"), doc
        assert wait_for(lambda: server.status("r1") == "WAITING_APPROVAL", DEADLINE)
        _, pending = server.call("GET", "/pending")
        [item] = [p for p in pending["pending"] if p["run_id"] == "r1"]
        code, doc = server.call("POST", f"/decisions/{item['approval_id']}",
                                {"decision": "approve", "by": "ann",
                                 "digest": item["digest"], "run_id": "r1"})
        assert code == 200, doc
        assert wait_for(lambda: server.status("r1") == "DONE", DEADLINE)
        _, state = server.call("GET", "/runs/r1/state")
        assert state["state"]["result"] == "shipped to mars"
    finally:
        code, out = server.stop()
    assert code == 0, out
    assert "serving http://127.0.0.1:" in out
    assert count_lines(tmp_path / "effects.log") == {"ship mars": 1}


def test_a_decision_answered_200_survives_a_killed_server(where, tmp_path):
    """kill -9 right after the 200, before the run ships (BIDE_TEST_SLOW): the decision was
    durable before the answer, so a new server resumes the run and ships once."""
    home, extra, env = where
    first = Served(home, tmp_path, {**env, "BIDE_TEST_SLOW": "1"}, *extra)
    try:
        first.call("POST", "/runs", {"flow": "shipping", "input": {"to": "venus"},
                                     "run_id": "r2"})
        assert wait_for(lambda: first.status("r2") == "WAITING_APPROVAL", DEADLINE)
        _, pending = first.call("GET", "/pending")
        [item] = [p for p in pending["pending"] if p["run_id"] == "r2"]
        code, doc = first.call("POST", f"/decisions/{item['approval_id']}",
                               {"decision": "approve", "by": "ann"})
        first.proc.send_signal(signal.SIGKILL)
    finally:
        first.stop(signal.SIGKILL)
    assert code == 200 and doc["decision"] == "approve", doc
    assert count_lines(tmp_path / "effects.log") == {}  # killed before it shipped
    second = Served(home, tmp_path, env, *extra)
    try:
        assert wait_for(lambda: second.status("r2") == "DONE", DEADLINE)
    finally:
        code, out = second.stop()
    assert code == 0, out
    assert count_lines(tmp_path / "effects.log") == {"ship venus": 1}
