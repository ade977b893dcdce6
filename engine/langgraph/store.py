"""LangGraph threads in a bide store, as bytes: the part of the saver that needs no LangGraph.

``langgraph.saver.BideSaver`` turns LangGraph's objects into serialized
``(type tag, bytes)`` pairs and back; this module stores and finds them, and
does retention (delete, prune, copy). The CLI may use it on a home without the
``langgraph`` extra installed.

Channel values are stored once per (channel, version). A list channel that only
grew since its last stored version (``operator.add`` reducers: messages, logs)
is stored as the appended items on top of that version: the serialized list's
items are a byte prefix of the new one's, so the delta is exact and is undone
by concatenating bytes. A whole value is written again when the chain would
exceed ``MAX_CHAIN`` deltas or the deltas would outweigh the whole value, so
storage grows linearly and a read walks a bounded chain.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ...formats import Record, RunCreated
from ...formats.langgraph_records import LGBlob, LGCheckpoint, LGWrites, Version
from ..base.errors import NotALangGraphThread, StoreError
from ..storage.index import RUNLOG, runlog_key
from ..storage.langgraph_index import (
    LG,
    blob_key,
    blob_seq,
    ckpt_key,
    ckpt_prefix,
    is_checkpoint,
    parse_ckpt,
    parse_write,
    runs_prefix,
    seq_from,
    seqs_prefix,
    split_ckpt_key,
    split_run_key,
    write_key,
    writes_prefix,
)
from ..storage.store import Later, Reader, Store

FLOW = "langgraph"
MAX_CHAIN = 32
MIN_DELTA_ROOM = 4096
CACHE_BYTES = 64 << 20
Typed = tuple[str, bytes]


@dataclass
class Stored:
    """One checkpoint as stored: its record, channel values and pending writes (serialized)."""

    thread: str
    ns: str
    record: LGCheckpoint
    values: dict[str, Typed]
    writes: list[tuple[str, str, Typed]]


@dataclass
class _Chain:
    """What the last stored version of a list channel was, to append a delta to it."""

    seq: int
    body: bytes
    count: int
    length: int
    since: int
    whole: int


def _text(*parts: str) -> list[str]:
    """Ids and names become key parts separated by NUL: refuse one that holds NUL."""
    for text in parts:
        if "\x00" in text:
            raise ValueError(f"LangGraph ids and channel names may not contain NUL: {text!r}")
    return list(parts)


def _checkpoints(r: Reader, prefix: bytes, *,
                 reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """Checkpoint entries under ``prefix``, without the entries stored beside them."""
    return ((k, v) for k, v in r.scan(LG, prefix, reverse=reverse) if is_checkpoint(k))


# -- msgpack arrays, byte-wise ------------------------------------------------
def _array(data: bytes) -> tuple[int, int] | None:
    """``(item count, header size)`` if ``data`` is a msgpack array, else None."""
    if not data:
        return None
    b0 = data[0]
    if 0x90 <= b0 <= 0x9F:
        return b0 & 0x0F, 1
    if b0 == 0xDC and len(data) >= 3:
        return struct.unpack_from(">H", data, 1)[0], 3
    if b0 == 0xDD and len(data) >= 5:
        return struct.unpack_from(">I", data, 1)[0], 5
    return None


def _array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + struct.pack(">H", count)
    return b"\xdd" + struct.pack(">I", count)


def _join(parts: Sequence[bytes]) -> bytes:
    """Concatenate msgpack arrays into one array of all their items."""
    count, bodies = 0, []
    for data in parts:
        found = _array(data)
        assert found is not None, "a stored delta is not a msgpack array"
        count += found[0]
        bodies.append(data[found[1]:])
    return _array_header(count) + b"".join(bodies)


class Threads:
    """LangGraph threads stored in ``store``; every method is one transaction.

    Thread-safe: one lock serializes this object's use of the store (map growth
    cancels this process's open transactions, so reads wait for writes too).
    """

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store, self.clock = store, clock
        self.lock = threading.RLock()
        self._chains: dict[tuple[str, str, str], _Chain] = {}
        self._chain_bytes = 0

    # -- writing ---------------------------------------------------------------
    def put(self, *, thread: str, ns: str, checkpoint_id: str, parent_id: str | None,
            checkpoint: Typed, metadata: Typed, versions: dict[str, Version],
            updated: list[str] | None, step: int, source: str, meta_run_id: str | None,
            blobs: Sequence[tuple[str, Version, Typed]],
            fence: tuple[str, int] | None = None,
            extra: Callable[[Reader], list[Record]] | None = None) -> None:
        """Store a checkpoint and the values of the channels it changed, in one commit.

        ``fence``: the commit's ``fence=`` (a worker's lease on the thread); ``extra``:
        more records, given the transaction's reader, in the same commit."""
        _text(thread, ns, checkpoint_id, parent_id or "", *(b[0] for b in blobs))
        now = self.clock()
        chains: dict[str, _Chain | None] = {}

        def build(r: Reader) -> list[Record]:
            chains.clear()
            records = self._created(r, thread, now)
            if extra is not None:  # first: _remember finds the blobs just before the checkpoint
                records.extend(extra(r))
            for channel, version, (vtype, value) in blobs:
                blob = self._blob(r, thread, ns, parent_id, channel, version, vtype, value,
                                  chains, now)
                if blob is not None:
                    records.append(blob)
            records.append(LGCheckpoint(
                run_id=thread, ns=ns, checkpoint_id=checkpoint_id, parent_id=parent_id,
                checkpoint_type=checkpoint[0], checkpoint=checkpoint[1],
                metadata_type=metadata[0], metadata=metadata[1], versions=versions,
                updated=updated, step=step, source=source, meta_run_id=meta_run_id, at=now))
            return records

        with self.lock:
            seqs = self.store.commit(build, fence=fence)
            self._remember(thread, ns, chains, seqs)

    def put_writes(self, *, thread: str, ns: str, checkpoint_id: str, task_id: str,
                   task_path: str, writes: Sequence[tuple[int, str, Typed]], replace: bool,
                   error: str | None = None, fence: tuple[str, int] | None = None,
                   ask: Callable[[Reader], tuple[list[Record], list[str], str]] | None = None,
                   ) -> None:
        """Store a task's writes; without ``replace`` a (task, idx) already stored is kept.

        ``ask``: the requests an interrupt among them makes, given the transaction's
        reader: ``(new records, every request id, the status it gives)``, written in
        the same commit (``LGWrites.asks``)."""
        _text(thread, ns, checkpoint_id, task_id)
        now = self.clock()

        def build(r: Reader) -> list[Record]:
            kept, seen = [], set()
            for idx, channel, (vtype, value) in writes:
                if not replace:
                    if idx in seen or r.get(LG, write_key(
                            thread, ns, checkpoint_id, task_id, idx)) is not None:
                        continue  # the SQLite saver's INSERT OR IGNORE
                    seen.add(idx)
                kept.append((idx, channel, vtype, value))
            if not kept:
                return []
            asked: list[Record] = []
            asks: list[str] = []
            waits = ""
            if ask is not None:
                asked, asks, waits = ask(r)
            return [*self._created(r, thread, now), *asked, LGWrites(
                run_id=thread, ns=ns, checkpoint_id=checkpoint_id, task_id=task_id,
                task_path=task_path, writes=kept, replace=replace, error=error, at=now,
                asks=asks, waits=waits)]

        with self.lock:
            self.store.commit(build, fence=fence)

    def wait_stored(self, thread: str, checkpoints: Sequence[tuple[str, str]], *,
                    timeout: float = 60.0, check: Callable[[], None] | None = None) -> None:
        """Return once every ``(ns, checkpoint id)`` of ``thread`` is stored: LangGraph
        (``durability="async"``) may still be writing one on another thread.

        Raises:
            StoreError: one is still missing after ``timeout`` seconds.
        """
        deadline, pause = time.monotonic() + timeout, 0.001
        while True:
            with self.store.reader() as r:
                missing = [(ns, cid) for ns, cid in checkpoints
                           if r.get(LG, ckpt_key(thread, ns, cid)) is None]
            if not missing:
                return
            if check is not None:
                check()  # raises when waiting is pointless (the worker lost its lease)
            if time.monotonic() > deadline:
                raise StoreError(f"thread {thread}: checkpoint {missing[0][1]} (namespace "
                                 f"{missing[0][0]!r}) its tool call runs from was not stored "
                                 f"within {timeout:.0f}s; the call is not made")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _created(self, r: Reader, thread: str, now: float) -> list[Record]:
        head = r.head(thread)
        if head is None:
            return [RunCreated(run_id=thread, flow=FLOW, at=now)]
        if head.flow != FLOW:
            raise NotALangGraphThread(thread, head.flow)
        return []

    def _blob(self, r: Reader, thread: str, ns: str, parent_id: str | None, channel: str,
              version: Version, vtype: str, value: bytes, chains: dict[str, _Chain | None],
              now: float) -> LGBlob | None:
        """The record for one channel value: None if stored already, a delta if it can be."""
        key = blob_key(thread, ns, channel, version)
        found = r.get(LG, key)
        if found is not None and self._value(r, blob_seq(key, found)) == (vtype, value):
            return None
        chains[channel] = None
        whole = LGBlob(run_id=thread, ns=ns, channel=channel, version=version,
                       value_type=vtype, value=value, at=now)
        new = _array(value) if vtype == "msgpack" else None
        if new is None:
            return whole
        body = value[new[1]:]
        chains[channel] = _Chain(-1, body, new[0], 0, 0, len(value))
        chain = next((c for c in self._bases(r, thread, ns, parent_id, channel)
                      if c.count <= new[0] and body.startswith(c.body)), None)
        if chain is None:
            return whole
        tail = _array_header(new[0] - chain.count) + body[len(chain.body):]
        if chain.length >= MAX_CHAIN or chain.since + len(tail) > max(chain.whole,
                                                                       MIN_DELTA_ROOM):
            return whole
        chains[channel] = _Chain(-1, body, new[0], chain.length + 1,
                                 chain.since + len(tail), chain.whole)
        return msgspec.structs.replace(whole, value=tail, base=chain.seq)

    def _bases(self, r: Reader, thread: str, ns: str, parent_id: str | None,
               channel: str) -> Iterator[_Chain]:
        """Stored lists the new value may extend: the last one written by this process,
        then the parent checkpoint's (after a restart, or a fork from an older checkpoint)."""
        chain = self._chains.get((thread, ns, channel))
        if chain is not None and r.get(RUNLOG, runlog_key(thread, chain.seq)) is not None:
            yield chain  # seqs are never reused: the record is still the one we wrote
        key = b"" if parent_id is None else ckpt_key(thread, ns, parent_id)
        raw = r.get(LG, key) if key else None
        if raw is None:
            return
        parent = r.record(parse_ckpt(key, raw)[0])
        assert isinstance(parent, LGCheckpoint)
        version = parent.versions.get(channel)
        if version is None:
            return
        key = blob_key(thread, ns, channel, version)
        found = r.get(LG, key)
        at = None if found is None else blob_seq(key, found)
        if at is not None and (chain is None or at != chain.seq):
            loaded = self._load_chain(r, at)
            if loaded is not None:
                yield loaded

    def _load_chain(self, r: Reader, seq: int) -> _Chain | None:
        parts, length, since, at = [], 0, 0, seq
        while True:
            rec = r.record(at)
            assert isinstance(rec, LGBlob)
            parts.append(rec.value)
            if rec.base < 0:
                break
            length, since, at = length + 1, since + len(rec.value), rec.base
        if rec.value_type != "msgpack" or _array(rec.value) is None:
            return None
        value = _join(parts[::-1])
        count, size = _array(value)  # type: ignore[misc]
        return _Chain(seq, value[size:], count, length, since, len(rec.value))

    def _remember(self, thread: str, ns: str, chains: dict[str, _Chain | None],
                  seqs: list[int]) -> None:
        """Keep each list channel just written, so the next put can append to it."""
        blob_seqs = iter(seqs[-len(chains) - 1:-1]) if chains else iter(())
        for channel, chain in chains.items():
            key = (thread, ns, channel)
            old = self._chains.pop(key, None)
            if old is not None:
                self._chain_bytes -= len(old.body)
            seq = next(blob_seqs)
            if chain is None:
                continue
            chain.seq = seq
            self._chains[key] = chain
            self._chain_bytes += len(chain.body)
        while self._chain_bytes > CACHE_BYTES and self._chains:
            oldest = next(iter(self._chains))
            self._chain_bytes -= len(self._chains.pop(oldest).body)

    # -- reading -----------------------------------------------------------------
    def _value(self, r: Reader, seq: int) -> Typed:
        """A blob's whole value, following its delta chain."""
        rec = r.record(seq)
        assert isinstance(rec, LGBlob)
        if rec.base < 0:
            return rec.value_type, rec.value
        parts = [rec.value]
        while rec.base >= 0:
            rec = r.record(rec.base)
            assert isinstance(rec, LGBlob)
            parts.append(rec.value)
        return rec.value_type, _join(parts[::-1])

    def get(self, thread: str, ns: str, checkpoint_id: str | None) -> Stored | None:
        """The checkpoint ``checkpoint_id``, or the latest of (thread, ns) when None."""
        with self.lock, self.store.reader() as r:
            if checkpoint_id is not None:
                key = ckpt_key(thread, ns, checkpoint_id)
                raw = r.get(LG, key)
            else:
                key, raw = next(_checkpoints(r, ckpt_prefix(thread, ns), reverse=True),
                                (b"", None))
            return None if raw is None else self._load(r, key, raw)

    def _load(self, r: Reader, key: bytes, raw: bytes,
              keep: Callable[[LGCheckpoint], bool] | None = None) -> Stored | None:
        thread, ns, cid = split_ckpt_key(key)
        rec = r.record(parse_ckpt(key, raw)[0])
        assert isinstance(rec, LGCheckpoint)
        if keep is not None and not keep(rec):
            return None
        values = {}
        for channel, version in rec.versions.items():
            bkey = blob_key(thread, ns, channel, version)
            found = r.get(LG, bkey)
            if found is not None:
                values[channel] = self._value(r, blob_seq(bkey, found))
        return Stored(thread, ns, rec, values, self._writes(r, thread, ns, cid))

    def _writes(self, r: Reader, thread: str, ns: str, cid: str) -> list[tuple[str, str, Typed]]:
        """Pending writes in LangGraph's order: (task_path, task_id, idx)."""
        rows, records = [], dict[int, Record]()
        for key, raw in r.scan(LG, writes_prefix(thread, ns, cid)):
            seq, position = parse_write(key, raw)
            rec = records.get(seq) or records.setdefault(seq, r.record(seq))
            assert isinstance(rec, LGWrites)
            idx, channel, vtype, value = rec.writes[position]
            rows.append(((rec.task_path, rec.task_id, idx), rec.task_id, channel, (vtype, value)))
        rows.sort(key=lambda row: row[0])
        return [(task, channel, typed) for _, task, channel, typed in rows]

    def keys(self, thread: str | None, ns: str | None, checkpoint_id: str | None = None,
             before: str | None = None) -> list[bytes]:
        """Checkpoint keys in scope, newest checkpoint id first (LangGraph's ``list`` order)."""
        prefix = ckpt_prefix() if thread is None else ckpt_prefix(thread) if ns is None \
            else ckpt_prefix(thread, ns)
        with self.lock, self.store.reader() as r:
            found = []
            for key, _ in _checkpoints(r, prefix):
                t, n, cid = split_ckpt_key(key)
                if checkpoint_id is not None and cid != checkpoint_id:
                    continue
                if before is not None and cid >= before:
                    continue
                found.append((cid, t, n, key))
        found.sort(reverse=True)
        return [row[3] for row in found]

    def load(self, keys: Iterable[bytes],
             keep: Callable[[LGCheckpoint], bool] | None = None) -> Iterator[Stored]:
        """The checkpoints at ``keys`` that still exist and pass ``keep``, a batch per read."""
        batch: list[bytes] = []
        for key in keys:
            batch.append(key)
            if len(batch) == 32:
                yield from self._load_batch(batch, keep)
                batch = []
        yield from self._load_batch(batch, keep)

    def _load_batch(self, keys: list[bytes],
                    keep: Callable[[LGCheckpoint], bool] | None) -> list[Stored]:
        out = []
        with self.lock, self.store.reader() as r:
            for key in keys:
                raw = r.get(LG, key)
                stored = None if raw is None else self._load(r, key, raw, keep)
                if stored is not None:
                    out.append(stored)
        return out

    # -- retention ---------------------------------------------------------------
    def delete_threads(self, threads: Iterable[str]) -> int:
        """Remove every record of each thread; the threads vanish from ``bide runs``."""
        wanted = _text(*threads)
        if not wanted:
            return 0

        def select(r: Reader) -> list[int]:
            doomed = []
            for thread in wanted:
                head = r.head(thread)
                if head is not None and head.flow != FLOW:
                    raise NotALangGraphThread(thread, head.flow)
                doomed += [seq for seq, _ in r.run_entries(thread)]
            return doomed

        with self.lock:
            return len(self.store.delete(select))

    def delete_for_runs(self, run_ids: Iterable[str]) -> int:
        """Remove the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their
        writes and the channel values no remaining checkpoint uses."""
        wanted = _text(*run_ids)
        if not wanted:
            return 0

        def select(r: Reader) -> set[int]:
            doomed: set[int] = set()
            threads: set[str] = set()
            for run in wanted:
                for key, _ in r.scan(LG, runs_prefix(run)):
                    _, thread, ns, cid = split_run_key(key)
                    ckey = ckpt_key(thread, ns, cid)
                    raw = r.get(LG, ckey)
                    if raw is None or parse_ckpt(ckey, raw)[3] != run:
                        continue  # put again under another run id since
                    threads.add(thread)
                    doomed |= self._checkpoint_seqs(r, thread, ns, cid)
            for thread in threads:
                live = [parse_ckpt(k, raw)[0] for k, raw in _checkpoints(r, ckpt_prefix(thread))]
                live = [s for s in live if s not in doomed]
                doomed |= self._garbage(r, thread, live)
            return doomed

        with self.lock:
            return len(self.store.delete(select))

    def prune(self, threads: Iterable[str], strategy: str = "keep_latest") -> int:
        """``keep_latest``: keep each namespace's latest checkpoint, its writes and the
        values it uses; ``delete``: remove the threads."""
        if strategy == "delete":
            return self.delete_threads(threads)
        if strategy != "keep_latest":
            raise ValueError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        wanted = _text(*threads)
        if not wanted:
            return 0

        def select(r: Reader) -> set[int]:
            doomed: set[int] = set()
            for thread in wanted:
                latest: dict[str, tuple[str, int]] = {}
                for key, raw in _checkpoints(r, ckpt_prefix(thread)):
                    _, ns, cid = split_ckpt_key(key)
                    latest[ns] = (cid, parse_ckpt(key, raw)[0])  # keys ascend: the last wins
                keep = {s for s, t in r.run_entries(thread) if t == RunCreated.TYPE}
                for ns, (cid, _) in latest.items():
                    keep |= self._checkpoint_seqs(r, thread, ns, cid)
                keep |= self._reachable(r, thread, [seq for _, seq in latest.values()])
                doomed |= {s for s, _ in r.run_entries(thread) if s not in keep}
            return doomed

        with self.lock:
            return len(self.store.delete(select))

    def _checkpoint_seqs(self, r: Reader, thread: str, ns: str, cid: str) -> set[int]:
        return {seq_from(key[-8:]) for key, _ in r.scan(LG, seqs_prefix(thread, ns, cid))}

    def _reachable(self, r: Reader, thread: str, checkpoints: Iterable[int]) -> set[int]:
        """Blob seqs the given checkpoint records use, with the delta chains under them."""
        out: set[int] = set()
        for seq in checkpoints:
            rec = r.record(seq)
            assert isinstance(rec, LGCheckpoint)
            for channel, version in rec.versions.items():
                key = blob_key(thread, rec.ns, channel, version)
                found = r.get(LG, key)
                at = None if found is None else blob_seq(key, found)
                while at is not None and at not in out:
                    out.add(at)
                    blob = r.record(at)
                    assert isinstance(blob, LGBlob)
                    at = blob.base if blob.base >= 0 else None
        return out

    def _garbage(self, r: Reader, thread: str, live: list[int]) -> set[int]:
        used = self._reachable(r, thread, live)
        return {s for s, t in r.run_entries(thread) if t == LGBlob.TYPE and s not in used}

    def copy(self, source: str, target: str) -> int:
        """Copy every record of ``source`` to ``target`` (same checkpoint ids); returns count."""
        _text(source, target)
        if source == target:
            return 0
        now = self.clock()

        def build(r: Reader) -> list[Record | Later]:
            entries = [s for s, t in r.run_entries(source) if t != RunCreated.TYPE]
            if not entries:
                return []
            records: list[Record | Later] = [*self._created(r, target, now)]
            moved: dict[int, int] = {}  # a source seq -> its copy's place in the batch
            for old in entries:
                rec = msgspec.structs.replace(r.record(old), run_id=target)
                if isinstance(rec, LGBlob) and rec.base >= 0:
                    records.append(_rebased(rec, moved[rec.base]))
                else:
                    records.append(rec)
                moved[old] = len(records) - 1
            return records

        with self.lock:
            return len(self.store.commit(build))

    # -- inspection ----------------------------------------------------------------
    def summary(self, thread: str) -> dict[str, Any] | None:
        """Checkpoints per namespace, the latest one's step, channels and writes (for CLIs)."""
        with self.lock, self.store.reader() as r:
            head = r.head(thread)
            if head is None or head.flow != FLOW:
                return None
            namespaces: dict[str, int] = {}
            for key, _ in _checkpoints(r, ckpt_prefix(thread)):
                ns = split_ckpt_key(key)[1]
                namespaces[ns] = namespaces.get(ns, 0) + 1
            out: dict[str, Any] = {"thread_id": thread, "status": head.status,
                                   "checkpoints": namespaces, "records": head.records,
                                   "bytes": head.bytes}
            key, raw = next(_checkpoints(r, ckpt_prefix(thread, ""), reverse=True),
                            (b"", None))
            if raw is not None:
                stored = self._load(r, key, raw)
                assert stored is not None
                out["latest"] = {
                    "checkpoint_id": stored.record.checkpoint_id, "step": stored.record.step,
                    "source": stored.record.source,
                    "channels": {ch: len(v[1]) for ch, v in stored.values.items()},
                    "pending_writes": [(t, ch) for t, ch, _ in stored.writes],
                }
            return out


def _rebased(blob: LGBlob, base_at: int) -> Later:
    """A copied delta, on the copy of its base: the batch item at ``base_at``, whose seq
    only the store knows (PostgreSQL's have gaps)."""
    return lambda seqs: msgspec.structs.replace(blob, base=seqs[base_at])


def needed(items: Sequence[tuple[int, int, Record]], keep: int = 1) -> set[int]:
    """The seqs of one thread's records a retention keeping ``keep`` checkpoints keeps.

    For ``maintenance.prune`` over decoded records ``(seq, size, record)`` of a
    thread (flow ``"langgraph"``): its ``RunCreated``; the ``keep`` newest
    checkpoints of each namespace with every record stored under their ids
    (writes included); and the channel values they use with the delta chains
    under them. ``Threads.prune`` is the same with ``keep=1``.
    """
    newest: dict[str, list[str]] = {}
    current: dict[tuple[str, str], int] = {}
    blobs: dict[tuple[str, str, Any], int] = {}
    records = {seq: rec for seq, _, rec in items}
    for seq, rec in records.items():
        if isinstance(rec, LGCheckpoint):
            current[(rec.ns, rec.checkpoint_id)] = seq  # a put again replaces
        elif isinstance(rec, LGBlob):
            blobs[(rec.ns, rec.channel, msgspec.msgpack.encode(rec.version))] = seq
    for ns, cid in current:
        newest.setdefault(ns, []).append(cid)
    kept_ids = {(ns, cid) for ns, cids in newest.items() for cid in sorted(cids)[-keep:]}
    kept = {seq for seq, rec in records.items() if isinstance(rec, RunCreated)
            or (isinstance(rec, (LGCheckpoint, LGWrites)) and (rec.ns, rec.checkpoint_id)
                in kept_ids)}
    for key in kept_ids:
        rec = records[current[key]]
        assert isinstance(rec, LGCheckpoint)
        for channel, version in rec.versions.items():
            at = blobs.get((rec.ns, channel, msgspec.msgpack.encode(version)))
            while at is not None and at not in kept:
                kept.add(at)
                blob = records[at]
                assert isinstance(blob, LGBlob)
                at = blob.base if blob.base >= 0 else None
    return kept
