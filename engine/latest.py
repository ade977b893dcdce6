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

    P                  -> {"at": checkpoint seq, "keys": {name: None | [closed, tail]}}
    P N                -> the value of a key that is not a list
    P N start(4)       -> a segment of a list: the items of closed chunks start..
    P N ff ff ff ff    -> the list's open tail chunk (absent when empty)

A list is cut into chunks greedily, item by item: a chunk closes once its
items' encoded bytes reach ``CHUNK_BYTES`` (``tail`` counts the open one's).
Closed chunks are kept in segments sized like the binary digits of their
count (up to ``SEGMENT_CHUNKS`` chunks each), so a list of n chunks is read in
O(n / SEGMENT_CHUNKS + log n) values, an append rewrites the small tail, and a
chunk closing merges segments the way a binary counter carries (each item is
rewritten O(log SEGMENT_CHUNKS) times over the run's life, never the whole list).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import msgspec

from ..formats import Checkpoint, PendingWrite, Record, check_serializable, pack_value, unpack_value
from ..formats.errors import CorruptIndex
from .keys import run_prefix

STATE = "state"
CHUNK_BYTES = 1024
SEGMENT_CHUNKS = 64
DEFERRED = -1  # in Checkpoint.writes: the checkpoint's own ``deferred`` ops
Op = tuple[str, str, Any]
_LEN, _START = struct.Struct(">H"), struct.Struct(">I")
_TAIL = b"\xff\xff\xff\xff"


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


def value_key(run_id: str, name: str) -> bytes:
    raw = name.encode("utf-8", "surrogatepass")
    return run_prefix(run_id) + _LEN.pack(len(raw)) + raw


def segments(closed: int) -> list[tuple[int, int]]:
    """``(first chunk, chunks)`` of each segment holding ``closed`` closed chunks, in order."""
    full = closed // SEGMENT_CHUNKS * SEGMENT_CHUNKS
    out = [(s, SEGMENT_CHUNKS) for s in range(0, full, SEGMENT_CHUNKS)]
    start, rest = full, closed - full
    for bit in reversed(range(SEGMENT_CHUNKS.bit_length())):
        if rest & (1 << bit):
            out.append((start, 1 << bit))
            start += 1 << bit
    return out


def _segment_key(run_id: str, name: str, start: int) -> bytes:
    return value_key(run_id, name) + _START.pack(start)


def _tail_key(run_id: str, name: str) -> bytes:
    return value_key(run_id, name) + _TAIL


def load_directory(tables: Getter, run_id: str) -> Directory | None:
    key = directory_key(run_id)
    raw = tables.get(STATE, key)
    return None if raw is None else unpack_value(raw, Directory, table=STATE, key=key)


def keys_of_run(tables: Getter, run_id: str) -> list[bytes]:
    """Every key this table holds for ``run_id`` (retention clears them before a refold)."""
    found = load_directory(tables, run_id)
    return [] if found is None else _keys_in(run_id, found)


def _keys_in(run_id: str, found: Directory) -> list[bytes]:
    keys = [directory_key(run_id)]
    for name, spec in found.keys.items():
        keys += _entry_keys(run_id, name, spec)
    return keys


def _entry_keys(run_id: str, name: str, spec: list[int] | None) -> list[bytes]:
    if spec is None:
        return [value_key(run_id, name)]
    keys = [_segment_key(run_id, name, s) for s, _ in segments(spec[0])]
    return keys + ([_tail_key(run_id, name)] if spec[1] else [])


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
        return _get(tables, value_key(run_id, name))
    items: list[Any] = []
    for key in _entry_keys(run_id, name, spec):
        items.extend(_get(tables, key))
    return items


def _get(tables: Getter, key: bytes) -> Any:
    raw = tables.get(STATE, key)
    if raw is None:  # the directory names it: a missing entry is damage (doctor says so too)
        raise CorruptIndex(STATE, key, "named by the run's state directory but missing")
    return unpack_value(raw, table=STATE, key=key)


# -- folding ----------------------------------------------------------------------------
def delta_ops(record: Callable[[int], Record], cp: Checkpoint) -> Iterator[Op]:
    """The ops a delta checkpoint applies, in replay order: the pending writes it
    absorbed (``record`` reads them from the log), then its own ``ops``.

    Raises:
        KeyError: an absorbed pending write is not in the log.
    """
    for wseq in cp.writes:
        if wseq == DEFERRED:
            ops = cp.deferred
        else:
            write = record(wseq)
            if not isinstance(write, PendingWrite):
                raise KeyError(f"seq {wseq} is not a pending write")
            ops = write.ops
        yield from (op for op in ops if op[1] != "custom")  # their result comes as a `set`
    yield from cp.ops


def fold(tables: Tables, seq: int, cp: Checkpoint) -> None:
    """Fold one checkpoint into its run's latest state.

    A delta the index cannot fold (no entry for the run, an absorbed pending write
    gone from the log, an op a replay could not apply either) leaves the run with
    no entry: no entry beats a wrong one, and reads then replay the log.
    """
    run_id = cp.run_id
    old = load_directory(tables, run_id)
    if cp.full:
        for key in [] if old is None else _keys_in(run_id, old):
            tables.delete(STATE, key)
        found = Directory(at=seq)
        for name, value in (cp.state or {}).items():
            _set(tables, run_id, found, name, value)
        tables.put(STATE, directory_key(run_id), pack_value(found))
        return
    if old is None:
        return
    stored = _keys_in(run_id, old)
    try:
        for name, kind, value in delta_ops(tables.record, cp):
            _apply(tables, run_id, old, name, kind, value)
    except (KeyError, TypeError):
        for gone in {*stored, *_keys_in(run_id, old)}:
            tables.delete(STATE, gone)
        return
    old.at = seq
    tables.put(STATE, directory_key(run_id), pack_value(old))


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
    """Replace a key's value, dropping its old entries."""
    if name in found.keys:
        for key in _entry_keys(run_id, name, found.keys.pop(name)):
            tables.delete(STATE, key)
    if type(value) is list:
        found.keys[name] = [0, 0]
        _append(tables, run_id, found, name, value)
    else:
        found.keys[name] = None
        tables.put(STATE, value_key(run_id, name), pack_value(value))


def _append(tables: Tables, run_id: str, found: Directory, name: str, items: list[Any]) -> None:
    """Add items to a chunked list: fill its tail; each chunk that closes joins the segments."""
    spec = found.keys[name]
    assert spec is not None
    closed, tail_bytes = spec
    tail: list[Any] = _get(tables, _tail_key(run_id, name)) if tail_bytes else []
    for item in items:
        tail.append(item)
        tail_bytes += len(check_serializable(item, name))
        if tail_bytes >= CHUNK_BYTES:
            _close(tables, run_id, name, closed, tail)
            closed, tail, tail_bytes = closed + 1, [], 0
    if tail:
        tables.put(STATE, _tail_key(run_id, name), pack_value(tail))
    elif spec[1]:
        tables.delete(STATE, _tail_key(run_id, name))
    found.keys[name] = [closed, tail_bytes]


def _close(tables: Tables, run_id: str, name: str, closed: int, chunk: list[Any]) -> None:
    """Add the chunk numbered ``closed`` to the segments, merging them as a carry does."""
    before, after = segments(closed), segments(closed + 1)
    same = 0
    while same < len(before) and before[same] == after[same]:
        same += 1
    items: list[Any] = []
    for start, _ in before[same:]:
        key = _segment_key(run_id, name, start)
        items.extend(_get(tables, key))
        tables.delete(STATE, key)
    (start, _), = after[same:]
    tables.put(STATE, _segment_key(run_id, name, start), pack_value(items + chunk))
