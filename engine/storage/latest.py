"""The latest-state index: each run's state at its newest checkpoint, per state key.

Reading a run's state used to replay every delta since the last full snapshot,
so it cost O(run length). This derived table keeps the state as of the run's
newest checkpoint instead, folded by ``index.apply`` from each ``Checkpoint``
(and the pending writes it absorbed, read back from the log), so reading it
costs O(state). Like every derived table it is rebuilt from the log and
``bide doctor`` compares it with a replay; reading an older version replays.

Its bytes are a function of the state alone (never of the history that made
it), so a fold, a rebuild and the format upgrade all write the same bytes.
With ``P = run ␀`` and ``N = len(name) (2 bytes, big-endian) name``::

    state           P               -> {"at": checkpoint seq, "keys": {name: None | [closed, tail]}}
    state           P N             -> the value of a key that is not a list
    state           P N ff ff ff ff -> a list's open tail chunk (absent when empty)
    state_segments  P N c index(4)  -> a closed chunk of a list
    state_segments  P N g first(4)  -> the items of chunks first .. first+SEGMENT_CHUNKS-1

Two tables, so a store can keep what every step rewrites (``state``: small) apart
from what changes only when a chunk closes (``state_segments``: large).

A list is cut into chunks greedily, item by item: a chunk closes once its
items' encoded bytes reach ``CHUNK_BYTES`` (``tail`` counts the open one's).
Each closed chunk is kept, and each full group of ``SEGMENT_CHUNKS`` of them is
kept once more as one value, unless that is over ``GROUP_BYTES`` (items that
large cost little to read one by one, and a second copy would double the
device bytes of a 10 KB payload). An append rewrites only the small tail; a read
takes O(n / SEGMENT_CHUNKS + SEGMENT_CHUNKS) values for n chunks. The chunks a
group covers stay (the index holds a list about twice): deleting many keys in
one commit made LMDB write several times the pages at every later commit
(measured: 28 pages a step instead of 11 at K = 1,000, bench/physical.py).
Every value but the groups fits in an LMDB page; a group is written once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import msgspec

from ...formats import (
    Checkpoint,
    PendingWrite,
    Record,
    check_serializable,
    pack_value,
    unpack_value,
)
from ...formats.codec import pack_plain
from ...formats.errors import CorruptIndex
from ...formats.packed_list import PackedList
from . import call_refs
from .call_refs import Called
from .kept import KeptByBytes, Memo
from .keys import run_prefix

STATE, SEGMENTS = "state", "state_segments"  # hot entries (every step), closed segments
CHUNK_BYTES = 512
SEGMENT_CHUNKS = 64
ITEM_BYTES = 512  # a run whose lists hold a larger item is not indexed (reads replay)
GROUP_BYTES = 64 << 10  # a group bigger than this is not written: its chunks are read
DEFERRED = -1  # in Checkpoint.writes: the checkpoint's own ``deferred`` ops
Op = tuple[str, str, Any]
Entry = tuple[str, bytes]  # (table, key)
_LEN, _START = struct.Struct(">H"), struct.Struct(">I")
_TAIL = b"\xff\xff\xff\xff"
_STR = frozenset({str})
_MOST_KEPT = 1024  # runs' directories, lists' tails, keys' value keys kept; past it all go
_KEPT_BYTES = 4096  # a larger directory is decoded again
# directories' stored bytes kept in all: decoded, a directory takes ~18x its bytes (1,023
# directories of 4 KB held 76 MB), so this keeps them to ~5 MB
_KEPT_DIRECTORY_BYTES = 256 << 10


class Directory(msgspec.Struct, kw_only=True):
    """Which keys a run's state has and how each is laid out, as of checkpoint ``at``."""

    at: int
    keys: dict[str, list[int] | None] = {}


class Getter(Protocol):
    def get(self, table: str, key: bytes) -> bytes | None: ...


class Tables(Getter, Protocol):
    """What the fold needs: derived-table access and the log's records."""

    def put(self, table: str, key: bytes, value: bytes) -> None: ...
    def delete(self, table: str, key: bytes) -> None: ...
    def record(self, seq: int) -> Record: ...


# -- keys ---------------------------------------------------------------------------
def directory_key(run_id: str) -> bytes:
    return run_prefix(run_id)


def _value_key(key: tuple[str, str]) -> bytes:
    run_id, name = key
    raw = name.encode("utf-8", "surrogatepass")
    return run_prefix(run_id) + _LEN.pack(len(raw)) + raw


_value_keys: Memo[tuple[str, str], bytes] = Memo(_value_key, _MOST_KEPT)  # made every step


def value_key(run_id: str, name: str) -> bytes:
    return _value_keys[run_id, name]


def _chunk(run_id: str, name: str, index: int) -> Entry:
    return SEGMENTS, value_key(run_id, name) + b"c" + _START.pack(index)


def _group(run_id: str, name: str, first: int) -> Entry:
    return SEGMENTS, value_key(run_id, name) + b"g" + _START.pack(first)


def _groups(closed: int) -> range:
    """The first chunk of each full group of ``SEGMENT_CHUNKS`` chunks."""
    return range(0, closed // SEGMENT_CHUNKS * SEGMENT_CHUNKS, SEGMENT_CHUNKS)


def _tail(run_id: str, name: str) -> Entry:
    return STATE, value_key(run_id, name) + _TAIL


def load_directory(tables: Getter, run_id: str) -> Directory | None:
    key = directory_key(run_id)
    raw = tables.get(STATE, key)
    return None if raw is None else unpack_value(raw, Directory, table=STATE, key=key)


# The directory each run's last fold wrote (engine/storage/kept.py): a fold decoded it again at
# every step
_folded: KeptByBytes[Directory] = KeptByBytes(_MOST_KEPT, _KEPT_DIRECTORY_BYTES)


def _take_directory(tables: Getter, key: bytes) -> Directory | None:
    raw = tables.get(STATE, key)
    if raw is None:
        return None
    kept = _folded.take(key, raw)
    return kept if kept is not None else unpack_value(raw, Directory, table=STATE, key=key)


def _pack_directory(found: Directory) -> bytes:
    """``pack_value(found)``: the same bytes, without a walk of its plain values."""
    return pack_plain(found) if _STR.issuperset(map(type, found.keys)) else pack_value(found)


def keys_of_run(tables: Getter, run_id: str) -> list[Entry]:
    """Every ``(table, key)`` held for ``run_id`` (retention clears them before a refold)."""
    found = load_directory(tables, run_id)
    return [] if found is None else _keys_in(run_id, found)


def _keys_in(run_id: str, found: Directory) -> list[Entry]:
    keys = [(STATE, directory_key(run_id))]
    for name, spec in found.keys.items():
        keys += _entry_keys(run_id, name, spec)
    return keys


def _entry_keys(run_id: str, name: str, spec: list[int] | None) -> list[Entry]:
    if spec is None:
        return [(STATE, value_key(run_id, name))]
    closed, tail = spec
    keys = [_chunk(run_id, name, i) for i in range(closed)]
    keys += [_group(run_id, name, first) for first in _groups(closed)]  # where written
    return keys + ([_tail(run_id, name)] if tail else [])


# -- reading --------------------------------------------------------------------------
def read(tables: Getter, run_id: str, seq: int) -> dict[str, Any] | None:
    """The state at checkpoint ``seq`` if the index holds it (it is the run's newest), else None.

    Raises:
        CorruptIndex: a value's checksum fails, or one the directory names is missing.
    """
    found = load_directory(tables, run_id)
    if found is None or found.at != seq:
        return None
    return {name: _value(tables, run_id, name, spec) for name, spec in found.keys.items()}


def _value(tables: Getter, run_id: str, name: str, spec: list[int] | None) -> Any:
    if spec is None:
        return _get(tables, (STATE, value_key(run_id, name)))
    closed, tail = spec
    items: list[Any] = []
    for first in _groups(closed):  # one value per group, or its chunks (a group too big)
        group = _group(run_id, name, first)
        if tables.get(*group) is not None:
            items.extend(_get(tables, group))
            continue
        for i in range(first, first + SEGMENT_CHUNKS):
            items.extend(_get(tables, _chunk(run_id, name, i)))
    for i in range(closed // SEGMENT_CHUNKS * SEGMENT_CHUNKS, closed):
        items.extend(_get(tables, _chunk(run_id, name, i)))
    if tail:
        items.extend(_get(tables, _tail(run_id, name)))
    return items


def _get(tables: Getter, entry: Entry) -> Any:
    table, key = entry
    raw = tables.get(table, key)
    if raw is None:  # the directory names it: a missing entry is damage (doctor says so too)
        raise CorruptIndex(table, key, "named by the run's state directory but missing")
    return unpack_value(raw, table=table, key=key)


# -- folding ----------------------------------------------------------------------------
def delta_ops(record: Callable[[int], Record], cp: Checkpoint, called: Called
              ) -> list[Op]:
    """The ops a delta checkpoint applies, in replay order: the pending writes it
    absorbed (``record`` reads them from the log), then its own ``ops``. A deferred
    op that names a tool call's result gets it from ``called`` (engine/storage/call_refs.py).
    A list, not a generator: the fold runs it at every superstep.

    Raises:
        KeyError: an absorbed pending write is not in the log, or a named call has
            no recorded result.
    """
    out: list[Op] = []
    for wseq in cp.writes:
        ops: Iterable[Op]
        if wseq == DEFERRED:
            ops = call_refs.resolve(cp.deferred, cp.run_id, cp.superstep, called)
        else:
            write = record(wseq)
            if not isinstance(write, PendingWrite):
                raise KeyError(f"seq {wseq} is not a pending write")
            ops = write.ops
        out += [op for op in ops if op[1] != "custom"]  # their result comes as a `set`
    out += cp.ops
    return out


def fold(tables: Tables, seq: int, cp: Checkpoint, called: Called = call_refs.no_calls
         ) -> None:
    """Fold one checkpoint into its run's latest state.

    A delta the index cannot fold (no entry for the run, an absorbed pending write
    gone from the log, an op a replay could not apply either) leaves the run with
    no entry: no entry beats a wrong one, and reads then replay the log. So does
    a list item over ``ITEM_BYTES``: a second copy of large payloads would cost
    more device bytes than the index saves (+25% a step at 1 KB, +85% at 10 KB,
    measured by ``bench/physical.py``); the next full snapshot tries again.
    """
    run_id = cp.run_id
    batch = _Batch(tables)
    at = directory_key(run_id)
    old = _take_directory(batch, at)
    try:
        if cp.full:
            for table, key in ([] if old is None else _keys_in(run_id, old)):
                batch.delete(table, key)
            old = Directory(at=seq)
            for name, value in (cp.state or {}).items():
                _set(batch, run_id, old, name, value)
        elif old is not None:
            for name, kind, value in coalesced(delta_ops(tables.record, cp, called)):
                _apply(batch, run_id, old, name, kind, value)
        else:
            return
    except (KeyError, TypeError, _LargeItem):
        # nothing of the batch is written yet: the tables still hold the old directory's
        # keys (listed only here and for a full snapshot: a list's chunks grow with the run)
        for table, gone in keys_of_run(tables, run_id):
            tables.delete(table, gone)
        return
    old.at = seq
    packed = _pack_directory(old)
    batch.put(STATE, at, packed)
    batch.flush()
    if len(packed) <= _KEPT_BYTES:
        _folded.keep(at, packed, old)


def coalesced(ops: Iterable[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    """``ops`` with each run of appends to one key joined into one append.

    A fan-out superstep's siblings append to the same list one after another: each
    append on its own read, decoded, re-encoded and rewrote the list's tail, four
    times per superstep for four siblings; joined, the tail is encoded once.
    """
    out: list[tuple[str, str, Any]] = []
    run: tuple[str, list[Any]] | None = None
    for name, kind, value in ops:
        if kind == "append" and run is not None and run[0] == name:
            run[1].extend(value)
            continue
        if run is not None:
            out.append((run[0], "append", run[1]))
            run = None
        if kind == "append":
            run = (name, list(value))
        else:
            out.append((name, kind, value))
    if run is not None:
        out.append((run[0], "append", run[1]))
    return out


class _LargeItem(Exception):
    """A list holds an item over ``ITEM_BYTES``: the run is left out of the index."""


_UNREAD = object()  # not in a _Batch's dicts


class _Batch:
    """One fold's writes, kept until it ends: a key written twice is written once, and
    a value rewritten with the same bytes (or deleted then put back) is not written."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.pending: dict[Entry, bytes | None] = {}
        self.stored: dict[Entry, bytes | None] = {}  # read from the tables: not read twice

    def get(self, table: str, key: bytes) -> bytes | None:
        entry = (table, key)
        found = self.pending.get(entry, _UNREAD)
        if found is _UNREAD:
            found = self.stored.get(entry, _UNREAD)
            if found is _UNREAD:
                found = self.stored[entry] = self.tables.get(table, key)
        return found  # type: ignore[return-value]

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.pending[table, key] = value

    def delete(self, table: str, key: bytes) -> None:
        self.pending[table, key] = None

    def record(self, seq: int) -> Record:
        return self.tables.record(seq)

    def flush(self) -> None:
        for (table, key), value in self.pending.items():
            stored = self.stored.get((table, key), _UNREAD)
            if stored is _UNREAD:  # written unread: compared with what is there
                stored = self.tables.get(table, key)
            if value is None and stored is not None:
                self.tables.delete(table, key)
            elif value is not None and value != stored:
                self.tables.put(table, key, value)


def _apply(tables: Tables, run_id: str, found: Directory, key: str, kind: str,
           value: Any) -> None:
    """One op, as ``state.apply_op`` applies it to a dict."""
    if kind == "set":
        _set(tables, run_id, found, key, value)
    elif kind == "append" and found.keys.get(key) is not None:
        _append(tables, run_id, found, key, list(value))
    elif kind == "append":
        old = _value(tables, run_id, key, found.keys[key]) if key in found.keys else None
        _set(tables, run_id, found, key, list(old or []) + list(value))
    elif kind == "merge":
        old = _value(tables, run_id, key, found.keys[key]) if key in found.keys else None
        _set(tables, run_id, found, key, {**(old or {}), **value})


def _set(tables: Tables, run_id: str, found: Directory, name: str, value: Any) -> None:
    """Replace a key's value, dropping its old entries (a value replacing a value is
    just put: its one key is the same)."""
    if name in found.keys:
        spec = found.keys.pop(name)  # (put back below: the name moves last, as it always did)
        if spec is not None or type(value) is list:
            for table, key in _entry_keys(run_id, name, spec):
                tables.delete(table, key)
    if type(value) is list:
        found.keys[name] = [0, 0]
        _append(tables, run_id, found, name, value)
    else:
        found.keys[name] = None
        tables.put(STATE, value_key(run_id, name), pack_value(value))


def _append(tables: Tables, run_id: str, found: Directory, name: str, items: list[Any]) -> None:
    """Add items to a chunked list: fill its tail; each chunk that closes joins the segments.

    The tail is never decoded: items are added as their encodings (``PackedList``)."""
    spec = found.keys[name]
    assert spec is not None
    closed, tail_bytes = spec
    at = _tail(run_id, name)
    tail = _take_tail(tables, at) if tail_bytes else PackedList()
    for item in items:
        encoded = check_serializable(item, name)
        if len(encoded) > ITEM_BYTES:
            raise _LargeItem(name)
        tail.add(encoded)
        tail_bytes += len(encoded)
        if tail_bytes >= CHUNK_BYTES:
            _close(tables, run_id, name, closed, tail)
            closed, tail, tail_bytes = closed + 1, PackedList(), 0
    if tail.count:
        packed = tail.packed()
        tables.put(*at, packed)
        _tails.keep(at[1], packed, tail)
    elif spec[1]:
        tables.delete(*at)
    found.keys[name] = [closed, tail_bytes]


# Each list's open tail as its last append left it (engine/storage/kept.py): an append read the
# tail back (checksum, copy, parse) at every step
_tails: KeptByBytes[PackedList] = KeptByBytes(_MOST_KEPT)


def _take_tail(tables: Getter, entry: Entry) -> PackedList:
    kept = _tails.take(entry[1], tables.get(*entry))
    return kept if kept is not None else _packed(tables, entry)


def _packed(tables: Getter, entry: Entry) -> PackedList:
    """A stored list's items, left encoded (as ``_get``: a missing entry is damage)."""
    table, key = entry
    raw = tables.get(table, key)
    if raw is None:
        raise CorruptIndex(table, key, "named by the run's state directory but missing")
    return PackedList.unpacked(raw, table=table, key=key)


def _close(tables: Tables, run_id: str, name: str, closed: int, chunk: PackedList) -> None:
    """Keep the chunk numbered ``closed``; the last of a group also writes the group."""
    tables.put(*_chunk(run_id, name, closed), chunk.packed())
    first = closed + 1 - SEGMENT_CHUNKS
    if (closed + 1) % SEGMENT_CHUNKS == 0:
        items = PackedList()
        for i in range(first, closed):
            items.extend(_packed(tables, _chunk(run_id, name, i)))
        items.extend(chunk)
        group = items.packed()
        if len(group) <= GROUP_BYTES:  # large items: reading them one by one costs little
            tables.put(*_group(run_id, name, first), group)
