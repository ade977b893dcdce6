"""Derived entries of LangGraph threads, folded from ``formats.langgraph_records``.

``index.apply`` calls :func:`fold_tables` and :func:`fold_head` for every LangGraph
record; they only get and put, so a rebuild from the log gives the same entries.
Retention clears :func:`keys_of` of a thread's records and replays what it keeps
(``Store.delete``); :func:`retain` is what ``prune --keep`` keeps of a thread.
``LANGGRAPH`` hands all of this to the core index as an extension
(``extensions.py``). Nothing here imports LangGraph.

All entries live in ONE derived table, ``langgraph``, and what one commit writes
sits together: a checkpoint's entry, its writes, its flags and the thread's
"latest" mark share a key prefix, so a commit dirties few pages (each is fsynced).
Text parts never hold NUL (nor byte 0xff: UTF-8); numbers are fixed-width
big-endian, so keys sort the way lookups walk them. With C = ``c thread ␀ ns ␀``::

    C checkpoint_id                       -> seq(8) step(8) flag(1) meta_run_id
    C checkpoint_id ␀ s seq(8)            -> b"c" | b"w"        every record of it
    C checkpoint_id ␀ w task ␀ idx(8)     -> seq(8) position(4)  its pending writes
    C checkpoint_id ␀ f                   -> bits(1) error text  its special writes
    C checkpoint_id ␀ a                   -> msgpack [waits, ids] its interrupts' requests
    c thread ␀ ␀ 0xff                     -> checkpoint_id       newest of ns ""
    v thread ␀ ns ␀ msgpack(version) channel -> seq(8)           a channel value's blob
    r meta_run_id ␀ thread ␀ ns ␀ checkpoint_id -> b""           (stale ones: check C)

Every value is framed with a checksum (``formats.envelope.frame_index``: ``0xc1 |
crc32 | body``); :func:`body` checks it and raises ``CorruptIndex`` naming the key.
A value written before (store format 1) never starts with 0xc1 (a big-endian seq
below 2**62, ``c``/``w``, empty, UTF-8 text or flag bits), so it still reads.

LangGraph may store a checkpoint's writes before the checkpoint itself (its
default ``durability="async"``), so a thread's status is a function of its latest
root checkpoint and the special writes against it, not of the order records came in.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import msgspec

from ...formats import pack
from ...formats.envelope import frame_index, unframe_index
from ...formats.errors import CorruptIndex
from ...formats.langgraph_records import (
    LANGGRAPH_RECORDS,
    LGBlob,
    LGCheckpoint,
    LGWrites,
    Version,
)
from ..base.vocabulary import Status
from .extension import Extension

LG = "langgraph"
LG_TABLES = (LG,)
CKPT, BLOBS, RUNS = b"c", b"v", b"r"
_SEQS, _WRITES, _FLAGS, _ASKS, _LATEST = b"\x00s", b"\x00w", b"\x00f", b"\x00a", b"\xff"

ERROR, INTERRUPT, RESUME = "__error__", "__interrupt__", "__resume__"
_BITS = {ERROR: 1, INTERRUPT: 2, RESUME: 4}
# channels whose update means LangGraph has a next task to run (StateGraph edges,
# joins, Send): a checkpoint that updated none of them is where a run ended
_TRIGGER_PREFIXES = ("branch:to:", "join:", "__start__", "__pregel_tasks")

_SEQ = struct.Struct(">Q")
_CKPT = struct.Struct(">Qqc")
_WRITE = struct.Struct(">QI")
_IDX_BIAS = 1 << 63


class Tables(Protocol):
    def get(self, table: str, key: bytes) -> bytes | None: ...
    def put(self, table: str, key: bytes, value: bytes) -> None: ...


# -- keys ------------------------------------------------------------------
def part(*texts: str) -> bytes:
    """``a ␀ b ␀ ... ␀``: a prefix that never matches a longer text part."""
    return b"".join(t.encode() + b"\x00" for t in texts)


def seq_bytes(seq: int) -> bytes:
    return _SEQ.pack(seq)


def seq_from(raw: bytes) -> int:
    """The seq at the start of a key's tail or of a checked value body."""
    return _SEQ.unpack_from(raw)[0]


# -- values ------------------------------------------------------------------
def body(key: bytes, raw: bytes) -> bytes:
    """The checked body of a value at ``key`` (a format-1 value as it is).

    Raises:
        CorruptIndex: the checksum fails or the value is truncated; names the key.
    """
    try:
        checked = unframe_index(raw)
    except ValueError as exc:
        raise CorruptIndex(LG, key, str(exc)) from None
    return raw if checked is None else bytes(checked)


def blob_seq(key: bytes, raw: bytes) -> int:
    """The log seq of a channel value's blob, from its entry."""
    return _SEQ.unpack(body(key, raw))[0]


def ckpt_key(thread: str, ns: str, checkpoint_id: str) -> bytes:
    return CKPT + part(thread, ns) + checkpoint_id.encode()


def ckpt_prefix(*texts: str) -> bytes:
    """Checkpoint entries (and theirs) of every thread (), one thread, or one (thread, ns)."""
    return CKPT + part(*texts)


def is_checkpoint(key: bytes) -> bool:
    """Whether a key under ``ckpt_prefix`` is a checkpoint's own entry."""
    rest = key.split(b"\x00", 2)[2]
    return b"\x00" not in rest and rest != _LATEST


def seqs_prefix(thread: str, ns: str, checkpoint_id: str) -> bytes:
    return ckpt_key(thread, ns, checkpoint_id) + _SEQS


def writes_prefix(thread: str, ns: str, checkpoint_id: str) -> bytes:
    return ckpt_key(thread, ns, checkpoint_id) + _WRITES


def runs_prefix(meta_run_id: str) -> bytes:
    return RUNS + part(meta_run_id)


def latest_key(thread: str) -> bytes:
    return CKPT + part(thread, "") + _LATEST


def flags_key(thread: str, ns: str, checkpoint_id: str) -> bytes:
    return ckpt_key(thread, ns, checkpoint_id) + _FLAGS


def asks_key(thread: str, ns: str, checkpoint_id: str) -> bytes:
    return ckpt_key(thread, ns, checkpoint_id) + _ASKS


def ckpt_value(seq: int, step: int, running: bool, meta_run_id: str | None) -> bytes:
    head = _CKPT.pack(seq, step, b"R" if running else b"D")
    return head + (meta_run_id or "").encode()


def parse_ckpt(key: bytes, raw: bytes) -> tuple[int, int, bool, str | None]:
    """``(seq, step, running, meta_run_id)`` of the checkpoint entry at ``key``."""
    data = body(key, raw)
    seq, step, flag = _CKPT.unpack_from(data)
    run = data[_CKPT.size:].decode()
    return seq, step, flag == b"R", run or None


def idx_bytes(idx: int) -> bytes:
    """Order-preserving for LangGraph's negative special indexes too."""
    return _SEQ.pack(idx + _IDX_BIAS)


def write_key(thread: str, ns: str, checkpoint_id: str, task_id: str, idx: int) -> bytes:
    return writes_prefix(thread, ns, checkpoint_id) + part(task_id) + idx_bytes(idx)


def write_value(seq: int, position: int) -> bytes:
    return _WRITE.pack(seq, position)


def parse_write(key: bytes, raw: bytes) -> tuple[int, int]:
    """``(seq, position)`` of the pending write entry at ``key``."""
    return _WRITE.unpack(body(key, raw))


def blob_key(thread: str, ns: str, channel: str, version: Version) -> bytes:
    # version first: the channels a step changed have versions of that step, side by side
    return BLOBS + part(thread, ns) + pack(version) + channel.encode()


def run_key(meta_run_id: str, thread: str, ns: str, checkpoint_id: str) -> bytes:
    return RUNS + part(meta_run_id, thread, ns) + checkpoint_id.encode()


def split_ckpt_key(key: bytes) -> tuple[str, str, str]:
    thread, ns, cid = key[1:].split(b"\x00", 2)
    return thread.decode(), ns.decode(), cid.decode()


def split_run_key(key: bytes) -> tuple[str, str, str, str]:
    run, thread, ns, cid = key[1:].decode().split("\x00", 3)
    return run, thread, ns, cid


def has_next(updated: list[str] | None) -> bool:
    """Whether a checkpoint leaves work to do, judged from its updated channels.

    Unknown (None) counts as work left. A graph whose nodes trigger on plain
    state channels (raw Pregel) may look finished between steps: status only.
    """
    if updated is None:
        return True
    return any(ch.startswith(_TRIGGER_PREFIXES) for ch in updated)


# -- folding -----------------------------------------------------------------
def _get(tables: Tables, key: bytes) -> bytes | None:
    raw = tables.get(LG, key)
    return None if raw is None else body(key, raw)


def _put(tables: Tables, key: bytes, value: bytes) -> None:
    tables.put(LG, key, frame_index(value))


def fold_tables(tables: Tables, seq: int, record: Any) -> None:
    """Fold one LangGraph record into the ``langgraph`` table (no-op for other records)."""
    match record:
        case LGCheckpoint():
            _fold_checkpoint(tables, seq, record)
        case LGWrites():
            _fold_writes(tables, seq, record)
        case LGBlob():
            _put(tables, blob_key(record.run_id, record.ns, record.channel, record.version),
                 seq_bytes(seq))


def _fold_checkpoint(tables: Tables, seq: int, r: LGCheckpoint) -> None:
    # a put again of the same id replaces it (SQLite: INSERT OR REPLACE)
    key = ckpt_key(r.run_id, r.ns, r.checkpoint_id)
    _put(tables, key, ckpt_value(seq, r.step, has_next(r.updated), r.meta_run_id))
    if r.meta_run_id is not None:
        _put(tables, run_key(r.meta_run_id, r.run_id, r.ns, r.checkpoint_id), b"")
    _put(tables, seqs_prefix(r.run_id, r.ns, r.checkpoint_id) + seq_bytes(seq), b"c")
    if r.ns == "":
        latest = _get(tables, latest_key(r.run_id))
        if latest is None or r.checkpoint_id >= latest.decode():
            _put(tables, latest_key(r.run_id), r.checkpoint_id.encode())


def _fold_writes(tables: Tables, seq: int, r: LGWrites) -> None:
    bits = _bits(r)
    if bits:
        key = flags_key(r.run_id, r.ns, r.checkpoint_id)
        old = _get(tables, key) or b"\x00"
        error = r.error.encode() if bits & 1 and r.error is not None else old[1:]
        _put(tables, key, bytes([old[0] | bits]) + error)
    if r.asks:  # kept per checkpoint: the checkpoint itself may come after (async)
        key = asks_key(r.run_id, r.ns, r.checkpoint_id)
        old_asks = _get(tables, key)
        waits, ids = msgspec.msgpack.decode(old_asks) if old_asks else ("", [])
        ids = [*ids, *(a for a in r.asks if a not in ids)]
        waits = r.waits if r.waits == Status.NEEDS_RECONCILIATION or not waits else waits
        _put(tables, key, msgspec.msgpack.encode([waits, ids]))
    for position, (idx, _channel, _type, _value) in enumerate(r.writes):
        key = write_key(r.run_id, r.ns, r.checkpoint_id, r.task_id, idx)
        if not r.replace and tables.get(LG, key) is not None:
            continue  # first write wins
        _put(tables, key, write_value(seq, position))
    _put(tables, seqs_prefix(r.run_id, r.ns, r.checkpoint_id) + seq_bytes(seq), b"w")


def _bits(r: LGWrites) -> int:
    bits = 0
    for w in r.writes:
        bits |= _BITS.get(w[1], 0)
    return bits


def fold_head(tables: Tables, head: Any, seq: int, record: Any) -> None:
    """What a LangGraph record says about its thread's ``RunHead``."""
    if not isinstance(record, (LGCheckpoint, LGWrites)) or record.ns != "":
        return
    latest = _get(tables, latest_key(record.run_id))
    if latest is None or latest.decode() != record.checkpoint_id:
        return  # about a checkpoint that is not (or not yet) the thread's newest
    key = ckpt_key(record.run_id, "", record.checkpoint_id)
    found = tables.get(LG, key)
    if found is None:
        return
    ckpt_seq, step, running, _ = parse_ckpt(key, found)
    head.checkpoint = head.base = ckpt_seq
    head.superstep, head.state_version = step, max(step + 1, 0)
    flags = _get(tables, flags_key(record.run_id, "", record.checkpoint_id)) or b"\x00"
    asked = _asked(head, record.checkpoint_id)
    if isinstance(record, LGWrites) and record.asks:  # newer than an earlier try's error
        ids = [*asked, *(a for a in record.asks if a not in asked)]
        head.status, head.error = record.waits or Status.WAITING_INPUT, None
        head.waiting = {"type": "interrupt", "checkpoint_id": record.checkpoint_id,
                        "approval_id": ids[0], "approval_ids": ids}
        return
    if isinstance(record, LGWrites) and asked and not flags[0] & 1:
        return  # another task's writes (a resume of some of them): still waiting for the rest
    early = _get(tables, asks_key(record.run_id, "", record.checkpoint_id))
    if isinstance(record, LGCheckpoint) and early is not None and not flags[0] & 1:
        waits, ids = msgspec.msgpack.decode(early)  # its interrupts were stored before it
        head.status, head.error = waits or Status.WAITING_INPUT, None
        head.waiting = {"type": "interrupt", "checkpoint_id": record.checkpoint_id,
                        "approval_id": ids[0], "approval_ids": list(ids)}
        return
    head.waiting = head.error = None
    if flags[0] & 1:
        head.status, head.error = Status.FAILED, flags[1:].decode() or None
    elif flags[0] & 2 and not flags[0] & 4:
        head.status = Status.INTERRUPTED
        head.waiting = {"type": "interrupt", "checkpoint_id": record.checkpoint_id}
    else:
        head.status = Status.RUNNING if running else Status.DONE


def _asked(head: Any, checkpoint_id: str) -> list[str]:
    """The approvals a thread waits on at this checkpoint, as its head says (none when a
    resume through bide took it since: ``StatusChanged`` RUNNING clears ``waiting``)."""
    w = head.waiting or {}
    if w.get("type") != "interrupt" or w.get("checkpoint_id") != checkpoint_id:
        return []
    return list(w.get("approval_ids") or [])


def keys_of(seq: int, record: Any) -> list[tuple[str, bytes]]:
    """Every ``(table, key)`` the folds above may write for ``record``."""
    match record:
        case LGCheckpoint():
            r = record
            keys = [ckpt_key(r.run_id, r.ns, r.checkpoint_id),
                    seqs_prefix(r.run_id, r.ns, r.checkpoint_id) + seq_bytes(seq)]
            if r.meta_run_id is not None:
                keys.append(run_key(r.meta_run_id, r.run_id, r.ns, r.checkpoint_id))
            if r.ns == "":
                keys.append(latest_key(r.run_id))
        case LGWrites():
            rw = record
            keys = [seqs_prefix(rw.run_id, rw.ns, rw.checkpoint_id) + seq_bytes(seq),
                    *(write_key(rw.run_id, rw.ns, rw.checkpoint_id, rw.task_id, w[0])
                      for w in rw.writes)]
            if _bits(rw):
                keys.append(flags_key(rw.run_id, rw.ns, rw.checkpoint_id))
            if rw.asks:
                keys.append(asks_key(rw.run_id, rw.ns, rw.checkpoint_id))
        case LGBlob():
            keys = [blob_key(record.run_id, record.ns, record.channel, record.version)]
        case _:
            keys = []
    return [(LG, key) for key in keys]


def read_value(key: bytes, raw: bytes) -> Any:
    """Decode the value at ``key`` by what the key says it is (doctor, the format upgrade).

    Raises:
        CorruptIndex: the checksum fails, or the body has the wrong shape for its key.
    """
    data = body(key, raw)
    try:
        return _decode(key, data)
    except (struct.error, ValueError, IndexError) as exc:  # UnicodeDecodeError: ValueError
        raise CorruptIndex(LG, key, f"not a {_kind(key)} entry ({exc})") from None


def _kind(key: bytes) -> str:
    if key[:1] != CKPT:
        return {BLOBS: "channel value", RUNS: "run"}.get(key[:1], "unknown")
    rest = key.split(b"\x00", 2)[2]
    if rest == _LATEST:
        return "latest"
    tail = rest.partition(b"\x00")[2]
    return {b"": "checkpoint", b"s": "record", b"w": "write", b"f": "flags",
            b"a": "asks"}.get(
        tail[:1], "unknown")


def _decode(key: bytes, data: bytes) -> Any:
    match _kind(key):
        case "checkpoint" if data[_CKPT.size - 1:_CKPT.size] in (b"R", b"D"):
            return parse_ckpt(key, data)
        case "channel value":
            return _SEQ.unpack(data)[0]
        case "write":
            return _WRITE.unpack(data)
        case "record" if data in (b"c", b"w"):
            return data
        case "run" if data == b"":
            return data
        case "latest":
            return data.decode()
        case "flags" if data:
            return data[0], data[1:].decode()
        case "asks":
            waits, ids = msgspec.msgpack.decode(data)
            return str(waits), [str(i) for i in ids]
    raise ValueError(f"unexpected value {data[:16]!r}")


# -- retention ------------------------------------------------------------------
def retain(items: list[tuple[int, int, Any]], keep: int) -> set[int]:
    """Of one thread's records, the LangGraph ones ``prune --keep`` keeps.

    Each namespace keeps its ``keep`` newest checkpoints (by id, as "latest" is
    folded), every write against them or against a checkpoint not stored (yet:
    LangGraph may write before it checkpoints), and the blobs their channel
    versions read, with the delta chains under them. Blobs newer than the
    thread's last checkpoint are kept for the checkpoint they were written for.
    """
    cps: dict[str, dict[str, list[int]]] = {}
    newest: dict[tuple[str, str], LGCheckpoint] = {}
    blobs: dict[bytes, int] = {}
    records: dict[int, Any] = {}
    for seq, _, r in items:
        records[seq] = r
        if isinstance(r, LGCheckpoint):
            cps.setdefault(r.ns, {}).setdefault(r.checkpoint_id, []).append(seq)
            newest[(r.ns, r.checkpoint_id)] = r  # a put again of an id replaces it
        elif isinstance(r, LGBlob):
            blobs[blob_key(r.run_id, r.ns, r.channel, r.version)] = seq  # last one wins
    kept_ids = {(ns, cid) for ns, by_id in cps.items() for cid in sorted(by_id)[-keep:]}
    last_cp = max((s for by_id in cps.values() for seqs in by_id.values() for s in seqs),
                  default=-1)
    kept: set[int] = set()
    for seq, _, r in items:
        if isinstance(r, LGWrites) and ((r.ns, r.checkpoint_id) in kept_ids
                                        or r.checkpoint_id not in cps.get(r.ns, {})):
            kept.add(seq)
        elif isinstance(r, LGBlob) and seq > last_cp:
            kept.add(seq)
    for ns, cid in kept_ids:
        kept.update(cps[ns][cid])
        cp = newest[(ns, cid)]
        for channel, version in cp.versions.items():
            at = blobs.get(blob_key(cp.run_id, ns, channel, version))
            while at is not None and at not in kept and at in records:
                kept.add(at)
                base = records[at].base
                at = base if base >= 0 else None
    return kept


LANGGRAPH = Extension(name="langgraph", tables=LG_TABLES, records=LANGGRAPH_RECORDS,
                      fold_tables=fold_tables, fold_head=fold_head, keys_of=keys_of,
                      retain=retain, read_value=read_value)
