"""A watcher that says what it does (issue 17, item 1): one line per run event, JSON
lines with ``--log-json``, readiness for supervisors, a second Ctrl-C that exits."""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import bide
import pytest
from bide.cli import main
from bide.engine.ops.readiness import notify
from bide.formats import LeaseAcquired, StatusChanged
from click.testing import CliRunner
from conftest import APPS

DEADLINE = 20.0


def events(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines]


def of(evs: list[dict], run_id: str) -> list[str]:
    return [e["event"] for e in evs if e.get("run_id") == run_id
            and e["event"].startswith("run_")]


@pytest.fixture
def eng(tmp_path):
    with bide.open(tmp_path / "home", durability="fast") as e:
        yield e


def test_once_says_every_run_event_as_json(eng):
    ok, boom, ask = bide.Flow("ok"), bide.Flow("boom"), bide.Flow("ask")
    ok.node(lambda s, ctx: {"x": 1}, name="work", start=True)

    @boom.node(start=True)
    def explode(state, ctx):
        raise ValueError("disk on fire")

    @ask.node(start=True)
    def gate(state, ctx):
        return {"ok": ctx.approve("deploy")}

    steal = bide.Flow("steal")

    @steal.node(start=True)
    def taken(state, ctx):  # another worker takes the lease over while this node runs
        eng.store.commit([LeaseAcquired(run_id=ctx.run_id, owner="thief:1:x", token=99,
                                        expires_at=time.time() + 60)])
        return {"x": 1}

    eng.register(ok, boom, ask, steal)
    for flow in ("ok", "boom", "ask", "steal"):
        eng.submit(flow, run_id=f"r-{flow}")
    eng.submit("ok", run_id="r-held")
    eng.store.commit([LeaseAcquired(run_id="r-held", owner="other:7:y", token=1,
                                    expires_at=time.time() + 60),
                      StatusChanged(run_id="r-held", status=bide.Status.RUNNING,
                                    at=time.time())])
    lines: list[str] = []
    bide.Watcher(eng, events=bide.WatchLog(lines.append, as_json=True)).once()
    evs = events(lines)
    assert evs[0]["event"] == "watch_started" and evs[0]["flows"] == ["ask", "boom", "ok",
                                                                       "steal"]
    for e in evs:  # an absolute ISO-8601 time with its zone
        assert datetime.datetime.fromisoformat(e["ts"]).tzinfo is not None
    assert of(evs, "r-ok") == ["run_started", "run_finished"]
    done = next(e for e in evs if e["event"] == "run_finished")
    assert (done["status"], done["flow"]) == ("DONE", "ok")
    assert of(evs, "r-boom") == ["run_started", "run_failed"]
    failed = next(e for e in evs if e["event"] == "run_failed")
    assert failed["status"] == "FAILED" and "ValueError: disk on fire" in failed["reason"]
    assert of(evs, "r-ask") == ["run_started", "run_paused"]
    paused = next(e for e in evs if e["event"] == "run_paused")
    aid = eng.get("r-ask").waiting["approval_id"]
    assert paused["status"] == "WAITING_APPROVAL" and aid in paused["reason"]
    assert of(evs, "r-steal") == ["run_started", "run_fenced"]  # not "skipped" as well
    assert of(evs, "r-held") == ["run_skipped"]
    held = next(e for e in evs if e["event"] == "run_skipped")
    assert held["holder"] == "other:7:y" and "other:7:y holds its lease" in held["reason"]


def test_text_lines_name_statuses_in_upper_case(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(APPS))
    home = tmp_path / "home"
    with bide.open(home, durability="fast") as e:
        from watch_log_app import flows
        e.register(*flows)
        e.submit("ok", run_id="r-ok")
        e.submit("boom", run_id="r-boom")
    out = CliRunner().invoke(main, ["watch", "--home", str(home), "--once",
                                    "--app", "watch_log_app:flows"])
    assert out.exit_code == 0, out.output
    lines = [line.split(" ", 1)[1] for line in out.output.splitlines()]
    assert lines[0].startswith(f"watching {home}: flows boom, hang, ok; inbox ")
    assert "run r-ok: started (flow ok)" in lines and "run r-ok: DONE" in lines
    assert "run r-boom: FAILED: node 'explode' failed: ValueError: disk on fire" in lines
    assert not any(word in out.output for word in (": done", ": failed"))


def test_only_the_watcher_that_recorded_a_decision_says_so(eng):
    ask = bide.Flow("ask")

    @ask.node(start=True)
    def gate(state, ctx):
        return {"ok": ctx.approve("deploy")}

    eng.register(ask)
    eng.submit("ask", run_id="r1")
    bide.Watcher(eng, log=lambda _line: None).once()
    aid = eng.get("r1").waiting["approval_id"]
    said: list[list[dict]] = []
    for name in ("a.json", "b.json"):  # the same decision twice: the second is a no-op
        (eng.doors.inbox / name).write_text(json.dumps({"approval_id": aid,
                                                        "decision": "approve"}))
        lines: list[str] = []
        bide.Watcher(eng, events=bide.WatchLog(lines.append, as_json=True)).once()
        said.append(events(lines))
    first, second = ([e["event"] for e in evs if "file" in e] for evs in said)
    assert first == ["decision_recorded"] and second == ["file_duplicate"]
    assert of(said[0], "r1") == ["run_resumed", "run_finished"]
    assert of(said[1], "r1") == []  # the second watcher did nothing to the run


def test_serving_tells_the_ready_file_and_systemd(eng, tmp_path, monkeypatch):
    sock_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(sock_path))
        sock.settimeout(DEADLINE)
        monkeypatch.setenv("NOTIFY_SOCKET", str(sock_path))
        ready = tmp_path / "ready"
        lines: list[str] = []
        watcher = bide.Watcher(eng, events=bide.WatchLog(lines.append, as_json=True),
                               readiness=bide.Readiness(ready))
        t = threading.Thread(target=watcher.serve, name="test-serve", daemon=True)
        t.start()
        try:
            assert sock.recv(64) == b"READY=1"
            assert json.loads(ready.read_text())["pid"] == os.getpid()
            assert [e["event"] for e in events(lines)][-1] == "ready"
        finally:
            watcher.stop.set()
            assert watcher._events is not None
            watcher._events.wake()
            t.join(DEADLINE)
        assert not t.is_alive()
        assert sock.recv(64) == b"STOPPING=1"
    assert not ready.exists()  # a stopped watcher does not look ready


def test_notify_reaches_an_abstract_socket_and_is_quiet_without_one(tmp_path):
    name = f"bide-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(DEADLINE)
        assert notify("READY=1", environ={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(64) == b"READY=1"
    assert not notify("READY=1", environ={})


def test_a_second_ctrl_c_exits_at_once(tmp_path):
    home, ready = tmp_path / "home", tmp_path / "ready"
    running = tmp_path / "running"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(APPS), *sys.path]),
           "WATCH_LOG_RUNNING": str(running)}
    subprocess.run([sys.executable, "-m", "bide.cli", "submit", "hang", "--home", str(home),
                    "--run-id", "r-hang", "--app", "watch_log_app:flows"], env=env,
                   check=True, capture_output=True, timeout=60)
    proc = subprocess.Popen([sys.executable, "-m", "bide.cli", "watch", "--home", str(home),
                             "--app", "watch_log_app:flows", "--log-json",
                             "--ready-file", str(ready)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        _until(running.exists, "the node to run")
        proc.send_signal(signal.SIGINT)
        _until(lambda: any('"stopping"' in line for line in lines), "the first Ctrl-C")
        time.sleep(0.2)
        assert proc.poll() is None  # the node still runs: the watcher waits for it
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130
        assert time.monotonic() - began < 10  # not the 30 s grace
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    reader.join(DEADLINE)
    assert proc.stdout is not None
    proc.stdout.close()
    evs = events(lines)
    assert [e["event"] for e in evs][-2:] == ["stopping", "forced_exit"]
    assert "ready" in [e["event"] for e in evs]
    assert not ready.exists()


def _until(cond, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
