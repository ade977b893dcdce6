"""``BideSaver``: a LangGraph checkpointer on a bide home (needs ``pip install bide[langgraph]``).

    from bide.langgraph import BideSaver

    with BideSaver.from_home(".bide") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})

Each thread is a bide run of flow ``"langgraph"`` (thread id = run id) in the same
log as bide's own runs, so ``bide runs``/``bide log``/``bide doctor`` see it. The
home is a directory (LMDB) or a ``postgresql://`` URL (``pip install bide[postgres]``):
the same records, in the database every host shares.
Channel values are stored once per (channel, version), lists that only grew as
the appended items (``engine/langgraph/store.py``); writes keep LangGraph's order
with fixed-width indexes and follow the SQLite saver's rules.

``durability`` is bide's: ``"durable"`` fsyncs every commit (survives power
loss), ``"fast"`` does not (survives a killed process); on PostgreSQL they are
``synchronous_commit`` on and off. It is not LangGraph's
``durability=`` argument of ``invoke``, which says *when* the graph calls the saver.

Sync and async methods are both native: the async ones run the same code on
one worker thread per saver, so the event loop never waits on an fsync (nor on
the database server).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..base.errors import CorruptRecord, MissingExtra, StoreError

try:  # the langgraph extra: the class below subclasses LangGraph's saver
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        INTERRUPT,
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        DeltaChannelHistory,
        PendingWrite,
        SerializerProtocol,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
except ModuleNotFoundError as exc:
    raise MissingExtra("bide.langgraph.BideSaver", extra="langgraph",
                       module=exc.name or "langgraph") from exc

from ..base import faults
from ..base.permissions import private_dir
from ..base.vocabulary import Decision, Waiting
from ..postgres.home import is_url, open_store
from ..run.approvals import decided, write_request_file
from ..run.host import Doors
from ..storage.lmdb_store import DEFAULT_MAP_SIZE, DEFAULT_MAX_SIZE, LMDBStore
from ..storage.store import Reader, Store
from .held import fence_for
from .interrupts import pushed_index
from .interrupts import requests as interrupt_requests
from .store import Stored, Threads

TASKS = "__pregel_tasks"  # the channel of a step's Sends (langgraph.constants.TASKS)
_ERROR = "__error__"
_BATCH = 32


class _Shared:
    """What every copy of a saver shares (``with_allowlist`` makes shallow copies)."""

    def __init__(self, store: Store, *, owned: bool = True) -> None:
        self.store = store
        self.threads = Threads(store)
        self.owned = owned  # False: an engine's store, closed by the engine
        self.closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self.closed:
                raise StoreError(f"the saver of {self.store.home} is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="bide-saver")
            return self._executor

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        if self.owned:
            with self.threads.lock:
                self.store.close()


def _where(config: RunnableConfig) -> tuple[str, str]:
    """``(thread_id, checkpoint_ns)`` of a config, as the store keys them."""
    conf = config["configurable"]
    thread, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns") or "")
    if "\x00" in thread or "\x00" in ns:
        raise ValueError(f"thread_id and checkpoint_ns may not contain NUL: {thread!r} {ns!r}")
    return thread, ns


def _checkpoint_id(config: RunnableConfig) -> str | None:
    """The config's checkpoint id; an empty one means "the latest", as in LangGraph's savers."""
    return get_checkpoint_id(config) or None


def _interrupts(value: Any) -> list[Any]:
    """The ``Interrupt`` objects of an ``__interrupt__`` write (a tuple of them)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [i for i in items if hasattr(i, "id") and hasattr(i, "value")]


def unanswered(r: Reader, thread: str, now: float) -> list[Any]:
    """A new checkpoint of a thread that waited at interrupts: it went on without bide
    (its caller resumed it with ``Command(resume=...)``), so the requests still open
    are closed as answered elsewhere; ``bide pending`` shows only what still waits."""
    head = r.head(thread)
    waiting = (head.waiting or {}) if head is not None else {}
    if waiting.get("type") != "interrupt":
        return []
    closed = []
    for aid in waiting.get("approval_ids") or []:
        req = r.approval(aid)
        if req is not None and req.decision is None and req.kind in (Waiting.INPUT,
                                                                     Waiting.APPROVAL):
            closed.append(decided(req, Decision.ANSWER, by="langgraph",
                                  reason="the thread was resumed by its caller", at=now))
    return closed


def _take(items: Iterator[Any], n: int) -> list[Any]:
    out = []
    for item in items:
        out.append(item)
        if len(out) == n:
            break
    return out


class BideSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver that keeps threads in a bide home.

    Its ``interrupt()``s become requests in the home's inbox, and bide tools
    (``durable_tool``) of its graphs record their calls in the thread's run.

    Args:
        home: the bide home directory (created if missing), or a ``postgresql://``
            URL (its store is created if missing); default ``$BIDE_HOME`` or ``./.bide``.
        durability: ``"durable"`` (fsync per commit) or ``"fast"`` (no fsync).
        serde: LangGraph serializer; default ``JsonPlusSerializer``.
        map_size: initial LMDB map size; the map grows by itself when full.
        max_size: the size the map may grow to (neither applies to PostgreSQL).
        interrupt_ttl: seconds an ``interrupt()``'s request waits for a decision
            before it expires (and the thread resumes with a rejection); None: for ever.

    Raises:
        NotAHome: ``home`` exists and is not a bide home.
        StoreError: the home is open in this process with another durability, or
            the PostgreSQL server cannot be reached.
        ImportError: a PostgreSQL home without psycopg installed.
    """

    is_bide_saver = True  # what a bide tool looks for in its graph's config (tools.py)

    def __init__(self, home: str | os.PathLike[str] | None = None, *,
                 durability: str = "durable", serde: SerializerProtocol | None = None,
                 map_size: int = DEFAULT_MAP_SIZE, max_size: int = DEFAULT_MAX_SIZE,
                 interrupt_ttl: float | None = None) -> None:
        super().__init__(serde=serde)
        home = home if home is not None else os.environ.get("BIDE_HOME") or ".bide"
        store: Store
        doors = None
        if is_url(home):
            store = open_store(str(home), durability=durability, create=True, clock=time.time)
        else:
            store = LMDBStore(home, durability=durability, map_size=map_size,
                              max_size=max_size)
            doors = Doors.of(Path(home))
            for door in (doors.inbox, doors.requests):  # where decisions come in, as an engine's
                if door is not None:
                    private_dir(door)
        self._setup(_Shared(store), doors, interrupt_ttl)

    def _setup(self, shared: _Shared, doors: Doors | None, interrupt_ttl: float | None) -> None:
        self.home, self.durability = shared.store.home, shared.store.durability
        self._shared, self.doors, self.interrupt_ttl = shared, doors, interrupt_ttl

    @classmethod
    def on_store(cls, store: Store, *, doors: Doors | None = None,
                 serde: SerializerProtocol | None = None,
                 interrupt_ttl: float | None = None) -> BideSaver:
        """A saver on a store already open (an engine's: ``bide.langgraph.saver_for``);
        closing it leaves the store open."""
        saver = cls.__new__(cls)
        BaseCheckpointSaver.__init__(saver, serde=serde)
        saver._setup(_Shared(store, owned=False), doors, interrupt_ttl)
        return saver

    @classmethod
    @contextmanager
    def from_home(cls, home: str | os.PathLike[str] | None = None,
                  **options: Any) -> Iterator[BideSaver]:
        """Open a saver for the ``with`` block and close it after (options as ``__init__``)."""
        saver = cls(home, **options)
        try:
            yield saver
        finally:
            saver.close()

    def __enter__(self) -> BideSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store (for this saver and every copy of it). Idempotent."""
        self._shared.close()

    @property
    def threads(self) -> Threads:
        """The byte-level thread store under this saver (retention, inspection)."""
        return self._shared.threads

    # -- sync API ----------------------------------------------------------------
    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store a checkpoint with the values of the channels in ``new_versions``.

        Returns:
            The config of the stored checkpoint (thread, namespace, checkpoint id).
        """
        thread, ns = _where(config)
        rest: dict[str, Any] = dict(checkpoint)
        values = rest.pop("channel_values", None) or {}
        versions = dict(rest.pop("channel_versions", None) or {})
        meta = get_checkpoint_metadata(config, metadata)
        step, source, run = meta.get("step"), meta.get("source"), meta.get("run_id")
        updated = checkpoint.get("updated_channels")
        dumps = self.serde.dumps_typed
        now = self.threads.clock()
        self.threads.put(
            fence=fence_for(thread),
            extra=None if ns else lambda r: unanswered(r, thread, now),
            thread=thread, ns=ns, checkpoint_id=checkpoint["id"],
            parent_id=config["configurable"].get("checkpoint_id"),
            checkpoint=dumps(rest), metadata=dumps(meta), versions=versions,
            updated=list(updated) if updated is not None else None,
            step=step if type(step) is int else 0,
            source=source if isinstance(source, str) else "",
            meta_run_id=run if isinstance(run, str) else None,
            blobs=[(ch, v, dumps(values[ch])) for ch, v in new_versions.items() if ch in values],
        )
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Store a task's writes against the checkpoint in ``config``.

        As the SQLite saver: when every write is to a special channel (error,
        interrupt, resume, scheduled) they replace earlier ones at the same
        (task, index); otherwise a (task, index) already stored is kept.
        """
        thread, ns = _where(config)
        dumps = self.serde.dumps_typed
        error = next((repr(v)[:500] for ch, v in writes if ch == _ERROR), None)
        found = [i for ch, v in writes if ch == INTERRUPT for i in _interrupts(v)]
        asked: list[Any] = []
        ask = None
        if found and not ns:  # a subgraph's interrupts reach the root's writes too
            now, ttl = self.threads.clock(), self.interrupt_ttl
            node = self._pushed_node(config, task_path)

            def ask(r: Any) -> tuple[list[Any], list[str], str]:
                head = r.head(thread)
                got = interrupt_requests(
                    r, thread=thread, task_id=task_id, task_path=task_path,
                    interrupts=found, state_version=0 if head is None else head.state_version,
                    now=now, ttl=ttl, node=node)
                asked[:] = got.records
                return list(got.records), got.ids, got.status
        self.threads.put_writes(
            thread=thread, ns=ns, checkpoint_id=str(config["configurable"]["checkpoint_id"]),
            task_id=task_id, task_path=task_path,
            writes=[(WRITES_IDX_MAP.get(ch, i), ch, dumps(v)) for i, (ch, v) in enumerate(writes)],
            replace=all(ch in WRITES_IDX_MAP for ch, _ in writes), error=error,
            fence=fence_for(thread), ask=ask,
        )
        if asked:
            faults.point("after_pause_committed")
            if self.doors is not None:
                for req in asked:
                    write_request_file(self.doors, req)

    def _pushed_node(self, config: RunnableConfig, task_path: str) -> str:
        """The node a pushed task (a ``Send``, e.g. a tool call of ``create_agent``) runs:
        its path holds only the Send's index in the checkpoint's tasks channel."""
        index = pushed_index(task_path)
        if index is None:
            return ""
        thread, ns = _where(config)
        try:  # LangGraph (durability "async") may still be storing that checkpoint
            self.threads.wait_stored(thread, [(ns, str(config["configurable"]["checkpoint_id"]))],
                                     timeout=5.0)
        except StoreError:
            return ""  # the request is asked all the same, without its node's name
        stored = self.get_tuple(config)
        sends = stored.checkpoint["channel_values"].get(TASKS) if stored is not None else None
        if not isinstance(sends, list) or not 0 <= index < len(sends):
            return ""
        return str(getattr(sends[index], "node", "") or "")

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest; None if there is none."""
        thread, ns = _where(config)
        checkpoint_id = _checkpoint_id(config)
        stored = self.threads.get(thread, ns, checkpoint_id)
        if stored is None:
            return None
        return self._tuple(stored, config if checkpoint_id else None)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of one thread (and namespace, if the config has one),
        or of every thread when ``config`` is None.

        Args:
            filter: metadata keys that must all be equal.
            before: only checkpoints with an id below this config's checkpoint id.
            limit: at most this many (counted after filtering).
        """
        if limit is not None and limit <= 0:
            return
        thread = ns = checkpoint_id = None
        if config is not None:
            thread = str(config["configurable"]["thread_id"])
            raw_ns = config["configurable"].get("checkpoint_ns")
            ns = None if raw_ns is None else str(raw_ns)
            checkpoint_id = _checkpoint_id(config)
        keys = self.threads.keys(thread, ns, checkpoint_id,
                                 _checkpoint_id(before) if before else None)
        keep = None
        if filter:
            def keep(rec: Any) -> bool:
                meta = self.serde.loads_typed((rec.metadata_type, rec.metadata))
                return all(meta.get(k) == v for k, v in filter.items())
        count = 0
        for stored in self.threads.load(keys, keep):
            yield self._tuple(stored, None)
            count += 1
            if limit is not None and count >= limit:
                return

    def get_delta_channel_history(self, *, config: RunnableConfig,
                                  channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Per channel: the writes on the parent chain above ``config``'s checkpoint, oldest
        first, down to the nearest ancestor that stores the channel's value (its ``seed``).

        The base class's walk, with one difference: a parent chain that loops (a
        checkpoint put again under a descendant) raises instead of running forever.

        Raises:
            CorruptRecord: the chain reaches a checkpoint it has already passed.
        """
        if not channels:
            return {}
        writes: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        for tup in self._ancestors(config):
            for write in reversed(tup.pending_writes or []):
                if write[1] in remaining:
                    writes[write[1]].append(write)
            values = tup.checkpoint["channel_values"]
            for ch in [ch for ch in remaining if ch in values]:
                seeds[ch] = values[ch]
                remaining.discard(ch)
            if not remaining:
                break
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            result[ch] = {"writes": writes[ch][::-1]}
            if ch in seeds:
                result[ch]["seed"] = seeds[ch]
        return result

    def _ancestors(self, config: RunnableConfig) -> Iterator[CheckpointTuple]:
        """The checkpoints above ``config``'s, nearest first, each once."""
        target = self.get_tuple(config)
        if target is None:
            return
        start = target.config["configurable"]
        path = [start["checkpoint_id"]]
        seen = set(path)
        cursor = target.parent_config
        while cursor is not None:
            checkpoint_id = cursor["configurable"]["checkpoint_id"]
            if checkpoint_id in seen:
                shown = path if len(path) <= 8 else [*path[:4], "...", *path[-3:]]
                raise CorruptRecord(
                    (start["thread_id"], start["checkpoint_ns"], checkpoint_id),
                    f"the parent chain of checkpoint {path[0]} loops back to {checkpoint_id}: "
                    + " -> ".join([*shown, checkpoint_id]))
            path.append(checkpoint_id)
            seen.add(checkpoint_id)
            tup = self.get_tuple(cursor)
            if tup is None:
                return
            yield tup
            cursor = tup.parent_config

    def delete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint, write and value of the thread (all namespaces)."""
        self.threads.delete_threads([str(thread_id)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints whose metadata ``run_id`` is in ``run_ids``, in every thread."""
        self.threads.delete_for_runs([str(r) for r in run_ids])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (same ids), write and value of a thread to another thread."""
        self.threads.copy(str(source_thread_id), str(target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's latest checkpoint; ``delete``: all."""
        self.threads.prune([str(t) for t in thread_ids], strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The SQLite saver's versions: zero-padded counter, random suffix (sortable)."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"

    def _tuple(self, stored: Stored, config: RunnableConfig | None) -> CheckpointTuple:
        loads, rec = self.serde.loads_typed, stored.record
        checkpoint = loads((rec.checkpoint_type, rec.checkpoint))
        checkpoint["channel_values"] = {ch: loads(v) for ch, v in stored.values.items()}
        checkpoint["channel_versions"] = dict(rec.versions)
        where = {"thread_id": stored.thread, "checkpoint_ns": stored.ns}
        return CheckpointTuple(
            config=config or {"configurable": {**where, "checkpoint_id": rec.checkpoint_id}},
            checkpoint=checkpoint,
            metadata=loads((rec.metadata_type, rec.metadata)),
            parent_config={"configurable": {**where, "checkpoint_id": rec.parent_id}}
            if rec.parent_id else None,
            pending_writes=[(task, ch, loads(v)) for task, ch, v in stored.writes],
        )

    # -- async API: the same code on the saver's worker thread ------------------------
    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._shared.executor(),
                                          functools.partial(fn, *args, **kwargs))

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        """Async ``put``."""
        return await self._call(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        """Async ``put_writes``."""
        await self._call(self.put_writes, config, writes, task_id, task_path)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        return await self._call(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None, before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``: loads batches on the worker thread, yields them here."""
        items = self.list(config, filter=filter, before=before, limit=limit)
        while True:
            batch = await self._call(_take, items, _BATCH)
            for item in batch:
                yield item
            if len(batch) < _BATCH:
                return

    async def aget_delta_channel_history(
            self, *, config: RunnableConfig,
            channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Async ``get_delta_channel_history``."""
        return await self._call(self.get_delta_channel_history, config=config,
                                channels=channels)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread``."""
        await self._call(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        await self._call(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        await self._call(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        await self._call(self.prune, thread_ids, strategy=strategy)


__all__ = ["BideSaver"]
