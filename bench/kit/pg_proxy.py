"""A TCP proxy on loopback in front of a PostgreSQL server, that injects network faults.

Tests and benches put one between each worker and the throwaway cluster
(``pg_server``, a Unix socket only): the worker connects to ``proxy.url(db)``, the
proxy to the server's socket. What it can do to the traffic:

- ``latency``: delay every chunk, both ways, by that many seconds (a slow link);
- ``cut()``: close every connection at once (a reset; the server ends the sessions);
- ``lose_commit_reply()``: the next COMMIT reaches the server, its reply is dropped
  and the connection cut (a commit whose outcome the client cannot know);
- ``partition(seconds)``: hold every byte, both ways, on every connection (new ones
  too) for that long, then deliver it all in order (a partition that heals: TCP
  retransmits; nothing is lost, everything is late);
- ``partition_after_commit(marker, seconds)``: the same, starting right after a COMMIT
  that ends a pipeline carrying ``marker`` (bytes of a record, e.g. a tool's name in
  its ``IntentPrepared``) has been sent to the server: the commit lands, its reply is
  held. This is the fault a fenced worker must survive.

It reads the client's side of the protocol (startup, then typed messages) enough to
know when a COMMIT is executed: a simple Query, or Parse/Bind/Execute of a statement
whose text is COMMIT (psycopg prepares statements it runs often, so later ones name
the statement instead of its text). ``faults`` counts what was injected.
"""

from __future__ import annotations

import collections
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

_SSL, _GSS = 80877103, 80877104  # untyped request codes before the startup message
JOIN = 5.0  # seconds a pump thread gets to end when the proxy closes


@dataclass
class Faults:
    """What the proxy did, for a test's report."""

    cuts: int = 0  # connections closed by cut()
    lost_replies: int = 0  # COMMIT replies dropped (the commit reached the server)
    partitions: int = 0
    held_commits: int = 0  # COMMITs whose reply a partition_after_commit held
    connections: int = 0  # accepted in all


@dataclass
class _Trigger:
    """A fault armed for the next COMMIT: a lost reply, or a partition (with a marker)."""

    kind: str  # "lose" | "partition"
    marker: bytes = b""
    seconds: float = 0.0


@dataclass(eq=False)
class _Pipe:
    """One direction of one connection: chunks waiting to be sent, each with its due time."""

    out: socket.socket
    queue: collections.deque[tuple[float, bytes, float | None]] = field(
        default_factory=collections.deque)
    closed: bool = False


class Proxy:
    """Listen on 127.0.0.1 (an ephemeral port), forward to ``upstream`` (a Unix socket)."""

    def __init__(self, upstream: str, *, name: str = "pg-proxy") -> None:
        self.upstream, self.name = upstream, name
        self.latency = 0.0
        self.faults = Faults()
        self._lock = threading.Condition()
        self._held_until = 0.0  # monotonic: nothing moves before it (a partition)
        self._trigger: _Trigger | None = None
        self._conns: list[_Conn] = []
        self._closing = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True)
        self._thread.start()

    def url(self, dbname: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}?sslmode=disable"

    # -- faults --------------------------------------------------------------------------
    def cut(self) -> int:
        """Close every open connection now; returns how many."""
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.close()
        with self._lock:
            self.faults.cuts += len(conns)
        return len(conns)

    def lose_commit_reply(self) -> None:
        """The next COMMIT goes through; its reply is dropped and its connection cut."""
        with self._lock:
            self._trigger = _Trigger("lose")

    def partition(self, seconds: float) -> None:
        """Hold every byte both ways for ``seconds`` from now, then deliver it."""
        with self._lock:
            self._held_until = max(self._held_until, time.monotonic() + seconds)
            self.faults.partitions += 1
            self._lock.notify_all()

    def partition_after_commit(self, marker: bytes, seconds: float) -> None:
        """Partition for ``seconds`` right after the next COMMIT of a pipeline carrying
        ``marker`` has been sent (the commit lands; its reply, and all else, waits)."""
        with self._lock:
            self._trigger = _Trigger("partition", marker, seconds)

    def armed(self) -> bool:
        """Is a COMMIT fault still waiting for its COMMIT?"""
        with self._lock:
            return self._trigger is not None

    def held(self) -> bool:
        return time.monotonic() < self._held_until

    def close(self) -> None:
        self._closing = True
        try:
            self._listener.close()
        except OSError:  # closed already
            pass
        with self._lock:
            conns, self._conns = self._conns, []
            self._held_until = 0.0
            self._lock.notify_all()
        for c in conns:
            c.close()
        self._thread.join(JOIN)

    # -- the plumbing --------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:  # the listener closed: the proxy is closing
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.upstream)
            except OSError:  # the server is down (restarting): the client sees a reset
                client.close()
                server.close()
                continue
            conn = _Conn(self, client, server)
            with self._lock:
                self._conns.append(conn)
                self.faults.connections += 1
            conn.start()

    def _forget(self, conn: _Conn) -> None:
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    def _commit_seen(self, conn: _Conn, carried: bytes) -> float | None:
        """A pipeline that executes COMMIT is on its way: fire an armed fault that fits.
        Returns the seconds of a partition to start once it has been sent (or None)."""
        with self._lock:
            t = self._trigger
            if t is None or (t.marker and t.marker not in carried
                             and t.marker.hex().encode() not in carried):  # bytea as hex text
                return None
            self._trigger = None
            if t.kind == "lose":
                conn.drop_replies = True  # set before the server can answer
                self.faults.lost_replies += 1
                return None
            self.faults.partitions += 1
            self.faults.held_commits += 1
            return t.seconds

    def _hold_from_now(self, seconds: float) -> None:
        with self._lock:
            self._held_until = max(self._held_until, time.monotonic() + seconds)
            self._lock.notify_all()

    def _wait_to_send(self, due: float) -> None:
        """Sleep until ``due`` and past any partition (the lock is held)."""
        while not self._closing:
            now = time.monotonic()
            wait = max(due, self._held_until) - now
            if wait <= 0:
                return
            self._lock.wait(wait)


class _Conn:
    """One client connection and its server connection, four threads: a reader and a
    sender each way (the senders apply latency and partitions)."""

    def __init__(self, proxy: Proxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy, self.client, self.server = proxy, client, server
        self.up, self.down = _Pipe(server), _Pipe(client)
        self.drop_replies = False  # a lost COMMIT reply: drop what the server says, then cut
        self._parser = _ClientParser()
        self._closed = False

    def start(self) -> None:
        name = self.proxy.name
        for target, label in ((self._read_client, "c2s"), (self._read_server, "s2c"),
                              (lambda: self._send(self.up), "up"),
                              (lambda: self._send(self.down), "down")):
            threading.Thread(target=target, name=f"{name}-{label}", daemon=True).start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:  # not connected any more
                pass
            s.close()
        with self.proxy._lock:
            self.up.closed = self.down.closed = True
            self.proxy._lock.notify_all()
        self.proxy._forget(self)

    def _read_client(self) -> None:
        while True:
            chunk = _recv(self.client)
            if not chunk:
                return self.close()
            holds = [self.proxy._commit_seen(self, carried)
                     for carried in self._parser.feed(chunk)]
            hold = max((h for h in holds if h is not None), default=None)
            self._queue(self.up, chunk, then=hold)

    def _read_server(self) -> None:
        while True:
            chunk = _recv(self.server)
            if not chunk:
                return self.close()
            if self.drop_replies:  # the commit landed; its client never hears of it
                return self.close()
            self._queue(self.down, chunk)

    def _queue(self, pipe: _Pipe, chunk: bytes, then: float | None = None) -> None:
        """``then``: once ``chunk`` is sent (its COMMIT is at the server), partition."""
        with self.proxy._lock:
            pipe.queue.append((time.monotonic() + self.proxy.latency, chunk, then))
            self.proxy._lock.notify_all()

    def _send(self, pipe: _Pipe) -> None:
        lock = self.proxy._lock
        while True:
            with lock:
                while not pipe.queue and not pipe.closed:
                    lock.wait(1.0)
                if pipe.closed:
                    return
                due, chunk, then = pipe.queue[0]
                self.proxy._wait_to_send(due)
                if pipe.closed:
                    return
                pipe.queue.popleft()
            if then is not None:  # held from before this chunk leaves, its reply with it;
                self.proxy._hold_from_now(then)  # the chunk itself is past its wait
            try:
                pipe.out.sendall(chunk)
            except OSError:  # the other end went away
                return self.close()


def _recv(s: socket.socket) -> bytes:
    try:
        return s.recv(65536)
    except OSError:  # closed under us (cut)
        return b""


class _ClientParser:
    """Follows the client's messages to tell when a COMMIT is executed, and what bytes
    the pipeline that executed it carried (up to its Sync)."""

    def __init__(self) -> None:
        self._buf = b""
        self._started = False  # past the untyped startup messages
        self._statements: dict[bytes, bytes] = {}  # prepared name -> query text
        self._portals: dict[bytes, bytes] = {}  # portal -> query text
        self._carried: list[bytes] = []  # the messages since the last Sync
        self._committed = False  # a COMMIT was executed since the last Sync

    def feed(self, chunk: bytes) -> list[bytes]:
        """Take ``chunk``; the pipelines (their bytes) that ended, at a Sync, with a COMMIT."""
        self._buf += chunk
        done: list[bytes] = []
        while True:
            message = self._next()
            if message is None:
                return done
            kind, body = message
            ended = self._see(kind, body)
            if ended is not None:
                done.append(ended)

    def _next(self) -> tuple[bytes, bytes] | None:
        buf = self._buf
        if not self._started:
            if len(buf) < 8:
                return None
            size, code = struct.unpack("!II", buf[:8])
            if len(buf) < size:
                return None
            self._buf = buf[size:]
            if code not in (_SSL, _GSS):
                self._started = True  # the startup message itself
            return b"", b""
        if len(buf) < 5:
            return None
        size = struct.unpack("!I", buf[1:5])[0]
        if len(buf) < 1 + size:
            return None
        self._buf = buf[1 + size:]
        return buf[:1], buf[5:1 + size]

    def _see(self, kind: bytes, body: bytes) -> bytes | None:
        if kind == b"":
            return None
        self._carried.append(body)
        if kind == b"Q":
            text = body.split(b"\0", 1)[0]
            if _is_commit(text):
                return self._end(force=True)
        elif kind == b"P":
            name, rest = body.split(b"\0", 1)
            self._statements[name] = rest.split(b"\0", 1)[0]
        elif kind == b"B":
            portal, rest = body.split(b"\0", 1)
            statement = rest.split(b"\0", 1)[0]
            self._portals[portal] = self._statements.get(statement, b"")
        elif kind == b"E":
            portal = body.split(b"\0", 1)[0]
            if _is_commit(self._portals.get(portal, b"")):
                self._committed = True
        elif kind == b"S":
            return self._end()
        return None

    def _end(self, force: bool = False) -> bytes | None:
        carried, committed = b"".join(self._carried), self._committed or force
        self._carried, self._committed = [], False
        return carried if committed else None


def _is_commit(text: bytes) -> bool:
    return text.strip().rstrip(b";").upper() in (b"COMMIT", b"END")
