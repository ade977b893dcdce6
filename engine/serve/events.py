"""Server-Sent Events for ``bide serve``: a run's records, and every change the home sees.

Both streams are fed by a thread that reads the store (``follow`` for a run; the log
after a cursor for the home) and hands what it reads to the event loop through a
bounded queue; the response waits on that queue, with a ``: keepalive`` comment when
nothing came for ``keepalive`` seconds (proxies and browsers drop silent streams).

Each message's ``id:`` is the record's log seq, so a client that reconnects with
``Last-Event-ID`` goes on after the last record it saw. On a PostgreSQL home the
log's seqs may commit out of order across runs: the home stream is a wake-up
("something changed: read again"), never the record of what changed; a run's own
stream is exact (a run's seqs commit in order, see ``follow``). The home stream
outlives a server restart: a read that fails is tried again, backing off up to
``RETRY_MAX``, and the stream goes on from its cursor; so does a run's stream.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from ..base.errors import RecordError, StoreError
from ..base.render import to_json
from ..read.follow import Outage, follow, follow_on
from ..read.scripting import iso_times
from ..storage.change_feed import ChangeFeed, ObservedFeed
from ..storage.store import Reader, Store

KEEPALIVE = 15.0  # seconds without a message before a ": keepalive" comment
FALLBACK = 1.0  # seconds between re-reads when no wake-up comes (another host's commit)
QUEUE = 1000  # messages a slow client may lag behind before its stream is closed
BATCH = 500  # log records read per snapshot by the home stream
RETRY_MAX = 8.0  # the longest pause between reads of a home that cannot be read (restarting)
TICK = 0.25  # seconds between looks at whether the server is closing
_END = object()  # the producer is done (the run finished, or the client left)


def message(event: str, data: Any, *, seq: int | None = None) -> str:
    """One SSE message: ``id:`` (a log seq), ``event:``, and ``data:`` as one JSON line."""
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event}\ndata: {to_json(iso_times(data), indent=None)}\n\n"


async def relay(produce: Callable[[Callable[[str], bool], threading.Event], None], *,
                keepalive: float = KEEPALIVE, closing: threading.Event | None = None,
                name: str = "bide-serve-sse") -> AsyncIterator[str]:
    """The messages ``produce(put, stop)`` makes in a thread of its own, with keepalives.

    ``put(text)`` returns False once the client is gone or too far behind: the producer
    stops then, as it does when ``stop`` is set. Leaving (the client disconnected and
    the response was cancelled, or ``closing`` was set: the server stops) sets ``stop``;
    the thread ends after its current wait.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue(QUEUE)
    stop = threading.Event()
    closing = closing or threading.Event()

    def put(item: object) -> bool:
        if stop.is_set():
            return False
        try:
            loop.call_soon_threadsafe(_offer, queue, item, stop)
        except RuntimeError:  # the loop closed under us: the server is stopping
            stop.set()
        return not stop.is_set()

    def run() -> None:
        try:
            produce(put, stop)
        finally:
            put(_END)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    said = loop.time()  # when the client last heard from us
    try:
        while not closing.is_set():
            wait = min(TICK, max(0.0, said + keepalive - loop.time()))
            try:
                item = await asyncio.wait_for(queue.get(), wait)
            except asyncio.TimeoutError:
                if loop.time() >= said + keepalive:
                    said = loop.time()
                    yield ": keepalive\n\n"
                continue
            if item is _END:
                return
            assert isinstance(item, str)
            said = loop.time()
            yield item
    finally:
        stop.set()


def _offer(queue: asyncio.Queue[object], item: object, stop: threading.Event) -> None:
    """In the loop: queue ``item``; a client this far behind is dropped (it reconnects
    with ``Last-Event-ID`` and loses nothing)."""
    try:
        queue.put_nowait(item)
    except asyncio.QueueFull:
        stop.set()
        queue.get_nowait()  # room for the end: the stream closes at once
        queue.put_nowait(_END)


def run_messages(store: Store, run_id: str, since: int | None,
                 fallback: float = FALLBACK) -> Callable[[Callable[[str], bool],
                                                          threading.Event], None]:
    """A producer for ``relay``: the run's events after ``since`` (as ``bide log --json``
    prints them), through its pauses, then an ``end`` message once it finished.

    Raises UnknownRun now (before the response starts) for a run that does not exist.
    """
    follow(store, run_id, since=since).close()  # UnknownRun now, not in the thread

    def produce(put: Callable[[str], bool], stop: threading.Event) -> None:
        # the server restarting: follow again from the last event sent (follow_on)
        events = follow_on(store, run_id, Outage(fallback, RETRY_MAX), since=since,
                           through_pauses=True, fallback=fallback, stop=stop)
        try:
            for event in events:
                if not put(message(event.kind, event.to_dict(), seq=event.seq)):
                    return
            if not stop.is_set():
                put(message("end", {"run_id": run_id, "status": _status(store, run_id)}))
        finally:
            events.close()

    return produce


def _status(store: Store, run_id: str) -> str | None:
    with store.reader() as r:
        head = r.head(run_id)
    return None if head is None else head.status


def home_messages(store: Store, since: int | None,
                  fallback: float = FALLBACK) -> Callable[[Callable[[str], bool],
                                                           threading.Event], None]:
    """A producer for ``relay``: one message per record any run commits after ``since``
    (None: from now on): ``event: <record type>``, ``data: {run_id, kind, seq}`` (and the
    status a checkpoint or status change records)."""
    with store.reader() as r:
        cursor = r.last_seq() if since is None else since

    def produce(put: Callable[[str], bool], stop: threading.Event) -> None:
        nonlocal cursor
        feed = _home_feed(store)
        pause = fallback
        try:
            while not stop.is_set():
                try:
                    for seq, data in _changes(store, cursor):
                        if not put(message(data["kind"], data, seq=seq)):
                            return
                        cursor = seq
                except StoreError:  # the server restarting: read again, backing off
                    stop.wait(pause)
                    pause = min(pause * 2, RETRY_MAX)
                    continue
                pause = fallback
                feed.wait(fallback)
        finally:
            feed.close()

    return produce


def _home_feed(store: Store) -> ChangeFeed:
    """Wake-ups for any commit: LMDB's feed hears every process's (it watches the data
    file, whatever the run); elsewhere this process's commits, and ``fallback`` re-reads
    find the others'."""
    if getattr(store, "changes", None) is not None:  # PostgreSQL: its feeds are per run
        return ObservedFeed(store.on_commit)
    return store.change_feed("")


def _changes(store: Store, cursor: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records after ``cursor``, a batch at a time, each as the home stream says it."""
    while True:
        with store.reader() as r:
            batch = []
            for seq, _raw in r.log(cursor + 1):
                batch.append((seq, _said(r, seq)))
                if len(batch) == BATCH:
                    break
        yield from batch
        if len(batch) < BATCH:
            return
        cursor = batch[-1][0]


def _said(r: Reader, seq: int) -> dict[str, Any]:
    """What the home stream says of the record at ``seq`` (a record it cannot read is
    said too, as ``unreadable``: the stream goes on past it)."""
    try:
        record = r.record(seq)
    except (RecordError, KeyError):  # damaged, or pruned since the log was listed
        return {"run_id": None, "kind": "unreadable", "seq": seq}
    data: dict[str, Any] = {"run_id": getattr(record, "run_id", None), "kind": record.TYPE,
                            "seq": seq}
    if isinstance(getattr(record, "status", None), str):
        data["status"] = record.status  # type: ignore[attr-defined]
    return data
