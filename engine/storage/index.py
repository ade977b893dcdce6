"""Derived indexes: what the log implies, kept beside it in the same transaction.

``apply`` is the only code that writes indexes, both at commit time and when
``bide doctor --rebuild`` replays the whole log, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import Any, Protocol

import msgspec

from ...formats import (
    ApprovalDecided,
    ApprovalRequested,
    Checkpoint,
    IntentCompleted,
    IntentPrepared,
    LeaseAcquired,
    LeaseReleased,
    Record,
    RunCreated,
    StatusChanged,
    decode,
    pack_value,
    unpack_value,
)
from ...formats.codec import pack_plain
from ...formats.envelope import INDEX_MAGIC, frame_index, unframe_index
from ...formats.errors import CorruptIndex
from ...formats.records import intent_key as call_key
from ...formats.values import to_wire
from ..base.vocabulary import FINISHED, WAITING, Decision, IntentStatus, Status, Waiting
from . import attention, call_refs
from .attention import ATTENTION
from .call_refs import Called
from .extensions import EXTENSIONS, owner
from .kept import KeptByBytes
from .keys import intent_key as intent_key  # the key shapes, re-exported for the stores
from .keys import run_prefix as run_prefix
from .keys import runlog_key as runlog_key
from .keys import seq_key as seq_key
from .keys import seq_of as seq_of
from .latest import SEGMENTS, STATE, keys_of_run
from .latest import fold as fold_latest

RUNS, RUNLOG, INTENTS, APPROVALS = "runs", "runlog", "intents", "approvals"
DERIVED = (RUNS, RUNLOG, INTENTS, APPROVALS, ATTENTION, STATE, SEGMENTS,
           *(t for ext in EXTENSIONS for t in ext.tables))


class RunHead(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The latest facts about a run, so listing runs never walks the log."""

    run_id: str
    flow: str
    status: str
    fingerprint: str = ""
    policy: dict[str, Any] = {}
    created_at: float = 0.0
    updated_at: float = 0.0
    state_version: int = 0
    superstep: int = 0
    checkpoint: int = -1
    base: int = -1
    committed: list[str] = []
    waiting: dict[str, Any] | None = None
    error: str | None = None
    reason: str | None = None
    node: str | None = None
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires: float = 0.0
    attempts: int = 0
    parent: str | None = None
    parent_version: int | None = None
    records: int = 0
    bytes: int = 0
    # a request of the run's current state version decided since its last resume: a
    # map's paused items each wait on their own request, and ``waiting`` names only one
    woken: str | None = None


class IntentState(msgspec.Struct, kw_only=True, omit_defaults=True):
    run_id: str
    key: str
    tool: str
    task: str
    node: str
    index: int
    args_digest: str
    idempotency_key: str
    status: str = IntentStatus.PREPARED
    attempts: int = 1
    prepared_at: float = 0.0
    result: Any = None
    error: str | None = None
    error_type: str | None = None
    via: str | None = None
    approval_id: str | None = None
    decision: str | None = None
    by: str | None = None
    reason: str | None = None


class ApprovalState(msgspec.Struct, kw_only=True, omit_defaults=True):
    approval_id: str
    run_id: str
    kind: str
    node: str
    task: str
    action: str
    digest: str
    payload: Any = None
    state_version: int = 0
    allowed: list[str] = []
    tool: str | None = None
    intent: str | None = None
    requested_at: float = 0.0
    expires_at: float | None = None
    decision: str | None = None
    by: str | None = None
    reason: str | None = None
    result: Any = None
    decided_at: float | None = None
    file: str | None = None
    content_digest: str | None = None
    schema: dict[str, Any] | None = None


# Tables of structs, framed with a checksum by ``pack_value`` (store format 2); the run
# log's type tags (``runlog_value``) and every extension's table values are framed too.
CHECKSUMMED: dict[str, type] = {RUNS: RunHead, INTENTS: IntentState, APPROVALS: ApprovalState,
                                ATTENTION: attention.Attention}
_EXTENSION_OF = {table: ext for ext in EXTENSIONS for table in ext.tables}
FRAMED = (*CHECKSUMMED, RUNLOG, STATE, SEGMENTS, *_EXTENSION_OF)


class Tables(Protocol):
    """Key/value access to the derived tables inside one write transaction."""

    def get(self, table: str, key: bytes) -> bytes | None: ...
    def put(self, table: str, key: bytes, value: bytes) -> None: ...
    def delete(self, table: str, key: bytes) -> None: ...
    def record(self, seq: int) -> Record:
        """The log record at ``seq`` (the latest-state fold reads absorbed pending writes).

        Raises:
            KeyError: no record at ``seq``.
        """


_RUNLOG_VALUES: dict[str, bytes] = {}


def runlog_value(rtype: str) -> bytes:
    """A run log entry's value: the record's type tag, with a checksum (made once per tag)."""
    value = _RUNLOG_VALUES.get(rtype)
    if value is None:
        value = _RUNLOG_VALUES[rtype] = frame_index(rtype.encode())
    return value


def runlog_type(raw: bytes, key: bytes) -> str:
    """The type tag of a run log entry (framed, or as written before index checksums).

    Raises:
        CorruptIndex: the checksum fails or the tag is not ascii.
    """
    try:
        body = unframe_index(raw)
        return (raw if body is None else bytes(body)).decode("ascii")
    except (ValueError, UnicodeDecodeError) as exc:  # UnicodeDecodeError is a ValueError
        shown = f"{key[:-9].decode(errors='replace')}@{seq_of(key)}" if len(key) > 9 else None
        raise CorruptIndex(RUNLOG, key, str(exc), shown) from None


def read_index(table: str, key: bytes, raw: bytes) -> Any:
    """Decode any checksummed index value (what doctor and the format upgrade check)."""
    if table == RUNLOG:
        return runlog_type(raw, key)
    if table in _EXTENSION_OF:
        return _EXTENSION_OF[table].read_value(key, raw)
    return unpack_value(raw, CHECKSUMMED.get(table, Any), table=table, key=key)


def with_checksum(table: str, key: bytes, raw: bytes) -> bytes | None:
    """A value written before index checksums, framed; None if it needs nothing.

    A value that does not decode is left as it is (None): a checksum must not
    bless damaged bytes; reads and ``bide doctor`` report it.
    """
    if raw[:1] == INDEX_MAGIC:
        return None
    try:
        read_index(table, key, raw)
    except CorruptIndex:
        return None
    return frame_index(raw)


# ``pack_head``: a head's fields a user's value reaches (walked for kept types); every
# other field holds a scalar or a word (a str enum msgspec writes as its value, the very
# bytes ``pack_value`` stores for it), checked at C speed before the head is written as is
_HEAD_USER = ("policy", "committed", "waiting")
_head_user = itemgetter(*(RunHead.__struct_fields__.index(name) for name in _HEAD_USER))
_head_scalars = itemgetter(*(i for i, name in enumerate(RunHead.__struct_fields__)
                             if name not in _HEAD_USER))
_SCALARS_OR_WORDS = frozenset({str, int, float, bool, type(None), bytes,
                               Status, IntentStatus, Decision, Waiting})


def pack_head(head: RunHead) -> bytes:
    """``pack_value(head)``: the same bytes, without a Python walk of its ~25 fields
    (a commit packs the head at every superstep)."""
    values = msgspec.structs.astuple(head)
    if not _SCALARS_OR_WORDS.issuperset(map(type, _head_scalars(values))):
        return pack_value(head)
    changes = {}
    for name, value in zip(_HEAD_USER, _head_user(values), strict=True):
        if value is not None and (wire := to_wire(value)) is not value:
            changes[name] = wire
    return pack_plain(msgspec.structs.replace(head, **changes) if changes else head)


# The head each run's last commit folded (engine/storage/kept.py): the commit fence decoded the
# head it had just written at every step
_kept_heads: KeptByBytes[RunHead] = KeptByBytes(1024)


def take_head(raw: bytes, key: bytes) -> RunHead:
    """The head ``raw`` decodes to, the caller's own to change."""
    kept = _kept_heads.take(key, raw)
    return kept if kept is not None else unpack_value(raw, RunHead, table=RUNS, key=key)


def keep_head(key: bytes, raw: bytes, head: RunHead) -> None:
    """``head`` is what ``raw`` (just stored at ``key``) decodes to; nobody else holds it.

    Its lists and dicts must be its own: ``committed`` came from a checkpoint record, so
    it is copied (a list of names); a ``waiting`` (a pause's) is never kept; ``policy``
    is only ever set by a ``RunCreated``, which makes a new head, never a fenced one.
    Its times are made floats, as decoding ``raw`` makes them: a clock that gives ints
    would otherwise be packed as ints at the next commit (other bytes, equal values)."""
    head.committed = list(head.committed)
    head.created_at = float(head.created_at)
    head.updated_at = float(head.updated_at)
    head.lease_expires = float(head.lease_expires)
    _kept_heads.keep(key, raw, head)


def load(tables: Tables, table: str, key: bytes, cls: type) -> Any:
    raw = tables.get(table, key)
    return None if raw is None else unpack_value(raw, cls, table=table, key=key)


def apply(tables: Tables, seq: int, size: int, record: Record,
          head: RunHead | None = None) -> RunHead | None:
    """Fold one log record into the derived tables.

    Args:
        head: the record's run head exactly as stored now, already decoded (a fenced
            commit read it): folded onto instead of read again, and changed.

    Returns:
        The run's head as stored after the record (None: the run has no head).
    """
    run_id: str = record.run_id  # type: ignore[attr-defined]
    tables.put(RUNLOG, runlog_key(run_id, seq), runlog_value(record.TYPE))
    if (ext := owner(record)) is not None:
        ext.fold_tables(tables, seq, record)
    if isinstance(record, RunCreated):
        head = RunHead(
            run_id=run_id, flow=record.flow, status=record.status,
            fingerprint=record.fingerprint, policy=record.policy, created_at=record.at,
            parent=record.parent, parent_version=record.parent_version,
        )
    elif head is None:
        head = load(tables, RUNS, run_id.encode(), RunHead)
        if head is None:
            return None  # an orphan record (its run was pruned); the log keeps it, no head to fold
    was = None if isinstance(record, RunCreated) else head.status
    head.records += 1
    head.bytes += size
    head.updated_at = max(head.updated_at, getattr(record, "at", 0.0) or 0.0)
    _fold(tables, head, seq, record)
    tables.put(RUNS, run_id.encode(), pack_head(head))
    if head.status != was:  # the table changes only with the status: skip the read otherwise
        attention.fold(tables, run_id, None if head.status in FINISHED else head.status)
    return head


def _fold(tables: Tables, head: RunHead, seq: int, record: Record) -> None:
    match record:
        case Checkpoint():
            if record.version != head.state_version:
                head.woken = None  # the superstep moved on: its decisions were consumed
            head.status = record.status
            head.state_version = record.version
            head.superstep = record.superstep
            head.checkpoint = seq
            head.base = seq if record.full else record.base
            head.committed = record.committed
            head.waiting = record.waiting
            if record.status != Status.FAILED:
                head.error = None
            fold_latest(tables, seq, record, call_results(tables))
        case StatusChanged():
            head.status = record.status
            head.reason = record.reason
            head.error = record.error
            head.node = record.node
            if record.status not in WAITING:
                head.waiting = None
            if record.status == Status.RUNNING:
                head.woken = None  # a resume took the run: it sees every decision so far
        case LeaseAcquired():
            head.lease_owner = record.owner
            head.lease_token = record.token
            head.lease_expires = record.expires_at
            head.attempts = record.attempts
        case LeaseReleased():
            if head.lease_token == record.token:
                head.lease_owner = None
                head.lease_expires = 0.0
        case IntentPrepared():
            _fold_intent_prepared(tables, record)
        case IntentCompleted():
            _fold_intent_completed(tables, record)
        case ApprovalRequested():
            _fold_approval_requested(tables, record)
        case ApprovalDecided():
            state = _fold_approval_decided(tables, record)
            # an expiry a running node records itself (engine/run/context.py) it also consumes
            own = head.status == Status.RUNNING and record.by == "bide"
            if state is not None and state.state_version == head.state_version and not own:
                head.woken = state.approval_id
        case _ if (ext := owner(record)) is not None:
            ext.fold_head(tables, head, seq, record)


def call_results(tables: Tables) -> Called:
    """What a checkpoint's op naming a tool call's result resolves to, read from the
    intents table: folded from the log before the checkpoint (engine/storage/call_refs.py)."""
    def called(run_id: str, task: str, index: int) -> Any:
        state = load(tables, INTENTS, intent_key(run_id, call_key(task, index)), IntentState)
        return call_refs.recorded(state, run_id, task, index)
    return called


class RunRecords(Protocol):
    """What ``refold`` reads: a run's log entries and their bytes."""

    def run_entries(self, run_id: str, start: int = 0) -> Iterator[tuple[int, str]]: ...
    def raw(self, seq: int) -> bytes | None: ...


def refold(reader: RunRecords, tables: Tables, run_id: str, doomed: dict[int, Record]) -> None:
    """Clear one run's derived entries and replay the records it keeps (every backend's
    ``delete`` after removing ``doomed``), so its tables equal a rebuild's."""
    items = {seq: (0, r) for seq, r in doomed.items()
             if r.run_id == run_id}  # type: ignore[attr-defined]
    for seq, _ in list(reader.run_entries(run_id)):
        raw = reader.raw(seq)
        if raw is not None and seq not in items:
            items[seq] = (len(raw), decode(raw, key=seq))
    for table, key in keys_of_run(tables, run_id):
        tables.delete(table, key)
    for seq, (_, record) in items.items():
        for table, key in keys_of(seq, record):
            tables.delete(table, key)
    for seq in sorted(items):
        if seq not in doomed:
            apply(tables, seq, *items[seq])


def refold_without(reader: RunRecords, tables: Tables, seqs: Iterable[int]) -> dict[int, Record]:
    """Refold every run that has a record among ``seqs`` as if those records were gone
    (the index half of every backend's ``delete``; the caller removes them from its log).

    Returns:
        The records found at ``seqs`` (missing seqs are skipped), by seq.
    """
    doomed: dict[int, Record] = {}
    for seq in set(seqs):
        raw = reader.raw(seq)
        if raw is not None:
            doomed[seq] = decode(raw, key=seq)
    for run_id in sorted({r.run_id for r in doomed.values()}):  # type: ignore[attr-defined]
        refold(reader, tables, run_id, doomed)
    return doomed


def keys_of(seq: int, record: Record) -> list[tuple[str, bytes]]:
    """Every ``(table, key)`` that ``apply`` may write for this record.

    Retention (``LMDBStore.delete``) clears these for all of a run's records and
    replays the ones it keeps, so the tables equal a rebuild. A new fold that
    writes another key must add it here.
    """
    run_id: str = record.run_id  # type: ignore[attr-defined]
    keys = [(RUNLOG, runlog_key(run_id, seq)), (RUNS, run_id.encode()),
            (ATTENTION, run_id.encode())]
    match record:
        case IntentPrepared() | IntentCompleted():
            keys.append((INTENTS, intent_key(run_id, record.key)))
        case ApprovalRequested():
            keys.append((APPROVALS, record.approval_id.encode()))
            if record.intent is not None:
                keys.append((INTENTS, intent_key(run_id, record.intent)))
        case ApprovalDecided():  # its intent is named by the request, in the same run
            keys.append((APPROVALS, record.approval_id.encode()))
    ext = owner(record)
    return keys + (ext.keys_of(seq, record) if ext is not None else [])


def _fold_intent_prepared(tables: Tables, r: IntentPrepared) -> None:
    key = intent_key(r.run_id, r.key)
    old = load(tables, INTENTS, key, IntentState)
    state = IntentState(
        run_id=r.run_id, key=r.key, tool=r.tool, task=r.task, node=r.node, index=r.index,
        args_digest=r.args_digest, idempotency_key=r.idempotency_key, attempts=r.attempt,
        prepared_at=r.at,
    )
    if old is not None:  # a new attempt keeps who resolved earlier ones, as history
        state.decision, state.by, state.reason = old.decision, old.by, old.reason
    tables.put(INTENTS, key, pack_value(state))


def _fold_intent_completed(tables: Tables, r: IntentCompleted) -> None:
    key = intent_key(r.run_id, r.key)
    state = load(tables, INTENTS, key, IntentState)
    if state is None:
        return
    state.status = IntentStatus.COMPLETED if r.ok else IntentStatus.FAILED
    state.result, state.error, state.error_type, state.via = r.result, r.error, r.error_type, r.via
    tables.put(INTENTS, key, pack_value(state))


def _fold_approval_requested(tables: Tables, r: ApprovalRequested) -> None:
    state = ApprovalState(
        approval_id=r.approval_id, run_id=r.run_id, kind=r.kind, node=r.node, task=r.task,
        action=r.action, digest=r.digest, payload=r.payload, state_version=r.state_version,
        allowed=r.allowed, tool=r.tool, intent=r.intent, requested_at=r.requested_at,
        expires_at=r.expires_at, schema=r.schema,
    )
    tables.put(APPROVALS, r.approval_id.encode(), pack_value(state))
    if r.intent is not None:
        ikey = intent_key(r.run_id, r.intent)
        intent = load(tables, INTENTS, ikey, IntentState)
        if intent is not None and intent.status == IntentStatus.PREPARED:
            intent.status, intent.approval_id = IntentStatus.UNKNOWN, r.approval_id
            tables.put(INTENTS, ikey, pack_value(intent))


def _fold_approval_decided(tables: Tables, r: ApprovalDecided) -> ApprovalState | None:
    state = load(tables, APPROVALS, r.approval_id.encode(), ApprovalState)
    if state is None:
        return None
    state.decision, state.by, state.reason, state.result = r.decision, r.by, r.reason, r.result
    state.decided_at, state.file, state.content_digest = r.at, r.file, r.content_digest
    tables.put(APPROVALS, r.approval_id.encode(), pack_value(state))
    if state.intent is not None:
        ikey = intent_key(r.run_id, state.intent)
        intent = load(tables, INTENTS, ikey, IntentState)
        if intent is not None:
            intent.status = IntentStatus.RESOLVED
            intent.decision, intent.by, intent.reason = r.decision, r.by, r.reason
            if r.decision == Decision.MARK_DONE:
                intent.result = r.result
            tables.put(INTENTS, ikey, pack_value(intent))
    return state
