"""``bide bench serve``: what the HTTP door costs against the doors it stands beside,
measured back to back on one ``bide serve`` subprocess.

- reads: ``GET /runs/{id}`` per second over a real uvicorn socket (one keep-alive
  connection, requests one after another), against the same answer computed
  in-process (``engine.show`` turned into the JSON ``bide show --json`` prints);
- decisions: from sending ``POST /decisions/{id}`` to the run running again (its
  node, after the approval, writes the time), against a decision file renamed into
  the inbox of the same server, one of each in turn.

Every number is a rate or a latency measured in the same run; no fixed time from
elsewhere is compared with it.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bide

from ..engine.base.render import to_json
from ..engine.read.scripting import iso_times
from .watch import _file, _Home

READY_DEADLINE = 60.0


class _Served(_Home):
    """The watch bench's home and app, served by a ``bide serve`` subprocess."""

    def serve(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        ready = self.root / "ready"
        self.token_file = self.root / "serve.token"
        cmd = [sys.executable, "-m", "bide.cli", "serve", "--home", str(self.home), "--app",
               "watch_bench_app:flows", "--durability", self.durability, "--port",
               str(self.port), "--token-file", str(self.token_file), "--ready-file",
               str(ready)]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_DEADLINE
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("bide serve did not get ready")
            time.sleep(0.02)
        self.token = self.token_file.read_text().strip()

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def call(self, conn: http.client.HTTPConnection, method: str, path: str,
             body: bytes | None = None) -> bytes:
        conn.request(method, path, body, {"Authorization": f"Bearer {self.token}",
                                          "Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{method} {path}: {resp.status} {data[:200]!r}")
        return data


def reads(root: Path, *, seconds: float = 3.0) -> dict[str, Any]:
    """``GET /runs/{id}`` per second over the socket, then the same answer in-process."""
    h = _Served(root)
    (run_id, _aid), = h.paused(1, "read").items()
    h.serve()
    try:
        conn = h.connection()
        try:
            http_rps = _rate(lambda: h.call(conn, "GET", f"/runs/{run_id}"), seconds)
        finally:
            conn.close()
        with bide.open(h.home, create=False) as eng:
            local_rps = _rate(lambda: to_json(iso_times(eng.show(run_id)), indent=None),
                              seconds)
    finally:
        h.stop()
    return {"http_rps": http_rps, "in_process_rps": local_rps,
            "http_share": http_rps / local_rps}


def _rate(call: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``call`` over ``seconds`` (after a few to warm up)."""
    for _ in range(20):
        call()
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        call()
        n += 1
    return n / elapsed


def decisions(root: Path, *, each: int = 20) -> dict[str, Any]:
    """Decision -> running again, over HTTP and by an inbox file, in turn on one server."""
    h = _Served(root)
    waiting = h.paused(2 * each, "d")
    (root / "staging" / "inbox").mkdir(parents=True, exist_ok=True)
    h.serve()
    took: dict[str, list[float]] = {"http": [], "file": []}
    try:
        conn = h.connection()
        try:
            h.call(conn, "GET", "/pending")  # the server's thread pool starts: not measured
            for i, (run_id, aid) in enumerate(waiting.items()):
                door = "http" if i % 2 == 0 else "file"
                if door == "http":
                    body = json.dumps({"decision": "approve", "by": "bench"}).encode()
                    t0 = time.time()
                    h.call(conn, "POST", f"/decisions/{aid}", body)
                else:
                    dot, final = _file(h.home, aid, i)
                    t0 = time.time()
                    os.rename(dot, final)
                took[door].append(h.wait_marks({run_id})[run_id] - t0)
                time.sleep(0.02)
        finally:
            conn.close()
    finally:
        h.stop()
    return {"each": each, **{f"{door}_{stat}_ms": fn(values) * 1000
                             for door, values in took.items()
                             for stat, fn in (("p50", statistics.median), ("max", max))}}


def run(*, quick: bool = False, home: Path | None = None,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every row of ``bide bench serve``; quick: a second of reads, 5 decisions a door."""
    root = Path(tempfile.mkdtemp(prefix="bide-bench-serve-", dir=home))
    out: dict[str, Any] = {"reads": reads(root / "reads", seconds=1.0 if quick else 5.0)}
    say(f"reads: {out['reads']}")
    out["decisions"] = decisions(root / "decisions", each=5 if quick else 25)
    say(f"decisions: {out['decisions']}")
    return out


def render(out: dict[str, Any]) -> str:
    r, d = out["reads"], out["decisions"]
    return "\n".join([
        "bide serve: GET /runs/{id} over one keep-alive connection",
        f"  HTTP {r['http_rps']:.0f}/s; in-process (engine.show as JSON) "
        f"{r['in_process_rps']:.0f}/s; HTTP is {r['http_share']:.0%} of it",
        "",
        f"bide serve: decision -> run running again (ms), {d['each']} of each door in turn",
        f"{'door':>14} {'p50':>7} {'max':>7}",
        f"{'POST /decisions':>14} {d['http_p50_ms']:>7.1f} {d['http_max_ms']:>7.1f}",
        f"{'inbox file':>14} {d['file_p50_ms']:>7.1f} {d['file_max_ms']:>7.1f}",
    ])
