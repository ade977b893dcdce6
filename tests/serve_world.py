"""What the ``bide serve`` tests share: flows, an app client with the token, a live server.

``client(engine)`` drives the app in-process (Starlette's TestClient: no socket);
``live(engine)`` serves it on a real uvicorn socket beside a watcher, for what only a
running server shows (event streams, runs resumed by the watcher).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import bide
from extras import need

need("starlette")
need("uvicorn")
need("httpx")

from bide.engine.serve.app import make_app  # noqa: E402 - after the extra's skip
from starlette.testclient import TestClient  # noqa: E402

TOKEN = "t-" + "x" * 40


def gated() -> bide.Flow:
    """Asks a person before it ships; returns what was decided."""
    flow = bide.Flow("gated")

    @flow.node(start=True)
    def gate(state, ctx):
        return {"ok": ctx.approve("ship", payload={"to": state.get("to", "prod")})}

    return flow


def asked() -> bide.Flow:
    """Asks a question whose answer is a whole number."""
    flow = bide.Flow("asked")

    @flow.node(start=True)
    def ask(state, ctx):
        return {"n": ctx.ask("how many?", schema=int)}

    return flow


def plain() -> bide.Flow:
    flow = bide.Flow("plain")

    @flow.node(start=True)
    def one(state, ctx):
        return {"done": True}

    return flow


FLOWS = (gated(), asked(), plain())


def token_file(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "serve.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@contextmanager
def client(engine: bide.Engine, **options: Any) -> Iterator[TestClient]:
    """The app of ``engine`` in-process, sending the token with every request."""
    with TestClient(make_app(engine, TOKEN, **options), raise_server_exceptions=False,
                    headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


@contextmanager
def live(engine: bide.Engine, **options: Any) -> Iterator[bide.Server]:
    """``bide serve`` in this process: HTTP on a free port and a watcher, both stopped after."""
    watcher = bide.Watcher(engine, log=lambda _line: None)
    server = bide.Server(engine, watcher=watcher, token_file=token_file(engine.home), port=0,
                         log=lambda _line: None, **options)
    server.start()
    thread = threading.Thread(target=watcher.serve, name="test-serve-watch")
    thread.start()
    try:
        yield server
    finally:
        watcher.stop.set()
        thread.join(30)
        server.stop()
        assert not thread.is_alive(), "the watcher did not stop"


def request(server: bide.Server, method: str, path: str, body: Any = None, *,
            token: str | None = TOKEN, timeout: float = 10.0) -> tuple[int, Any]:
    """One request over the socket: its status and its JSON body."""
    assert server.url is not None
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


class Stream:
    """An SSE stream read over a real socket, message by message, each read with a deadline."""

    def __init__(self, server: bide.Server, path: str, *, last_event_id: int | None = None,
                 timeout: float = 10.0) -> None:
        assert server.url is not None
        parts = urlsplit(server.url)
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port,
                                               timeout=timeout)
        headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.conn.request("GET", path, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def next(self) -> dict[str, Any]:
        """The next message or comment: ``{"comment": text}`` or ``{"id", "event", "data"}``."""
        fields: dict[str, Any] = {}
        while True:
            line = self.resp.readline()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode().rstrip("\n")
            if text == "":
                if fields:
                    return fields
                continue
            if text.startswith(":"):
                return {"comment": text[1:].strip()}
            name, _, value = text.partition(": ")
            fields[name] = json.loads(value) if name == "data" else value

    def until(self, event: str, limit: int = 200) -> list[dict[str, Any]]:
        """Messages up to and including the first ``event`` one."""
        seen = []
        for _ in range(limit):
            seen.append(self.next())
            if seen[-1].get("event") == event:
                return seen
        raise AssertionError(f"no {event!r} event in {limit} messages: {seen}")

    def until_data(self, limit: int = 200, **wanted: Any) -> list[dict[str, Any]]:
        """Messages up to and including the first whose data has the ``wanted`` items."""
        seen = []
        for _ in range(limit):
            seen.append(self.next())
            data = seen[-1].get("data") or {}
            if all(data.get(k) == v for k, v in wanted.items()):
                return seen
        raise AssertionError(f"no message with {wanted} in {limit} messages: {seen}")

    def close(self) -> None:
        self.conn.close()


def waiting(eng: bide.Engine, run_id: str = "r1", flow: str = "gated") -> str:
    """A run paused on its request: the request's approval id."""
    run = eng.start(flow, {}, run_id=run_id)
    assert run.status in (bide.Status.WAITING_APPROVAL, bide.Status.WAITING_INPUT)
    return run.waiting["approval_id"]
