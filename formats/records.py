"""Every record the store keeps, as versioned msgspec structs.

Rules (msgspec schema evolution): new fields get defaults; a field's type never
changes in place; a type tag is never reused. A breaking change bumps the
class's ``VERSION`` and adds a migration in ``formats/migrations.py``.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

import msgspec

# One op of a state update: (key, kind, value). kind is "set", "append",
# "merge" (dict update) or "custom" (the value is the reducer's input; the
# checkpoint that absorbs it carries the reduced value as a "set"). A version-5
# checkpoint's deferred op may be "@": set the key to the recorded result of the
# tool call its value names, [task, index] (engine/storage/call_refs.py).
Op = tuple[str, str, Any]


class Record(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of stored records. ``TYPE`` is the tag in the frame, ``VERSION`` the schema."""

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    # Fields holding user values (``Any`` somewhere inside): the codec stores
    # their kept types (formats/values.py) as extension values. ``OP_FIELDS``
    # are lists of ops whose third item is such a value.
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ()
    OP_FIELDS: ClassVar[tuple[str, ...]] = ()

    def view(self) -> dict[str, Any]:
        """The record's fields by name, as a reader sees them (compact ones expand)."""
        return msgspec.structs.asdict(self)


class RunCreated(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A run exists: its flow, input and checkpoint policy."""

    TYPE: ClassVar[str] = "run_created"
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("input", "policy")
    run_id: str
    flow: str
    fingerprint: str = ""
    input: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    status: str = "RUNNING"
    parent: str | None = None
    parent_version: int | None = None
    at: float = 0.0


class StatusChanged(Record, frozen=True, kw_only=True, omit_defaults=True):
    """The run's status moved (failed, cancelled, interrupted, expired...).

    Version 2 split version 1's single ``message`` into ``reason`` and ``error``.
    """

    TYPE: ClassVar[str] = "status_changed"
    VERSION: ClassVar[int] = 2
    run_id: str
    status: str
    reason: str | None = None
    error: str | None = None
    node: str | None = None
    at: float = 0.0


class Checkpoint(Record, frozen=True, kw_only=True, omit_defaults=True, array_like=True):
    """A consistent cut of a run after ``version`` supersteps.

    A full checkpoint carries ``state``; a delta carries ``writes`` (log seqs of
    the pending writes it absorbed, replayed through their ops) and ``ops``
    (updates not stored elsewhere), on top of the full checkpoint at ``base``.
    A ``-1`` in ``writes`` stands for ``deferred``: the output of the task that
    finished last, committed here instead of as its own pending write.
    Pending writes of the superstep to run next are searched from ``scan_from``
    (-1: after this checkpoint; a pause keeps the writes that came before it).

    Version 2 is the same fields as an array (no field names): one is written
    per superstep, and the names were a third of a small delta's bytes.

    Version 3 adds ``sends``: the map tasks of the superstep to run next,
    ``[node, arg]`` in the order the routes sent them (after ``next``'s tasks).
    A bide that predates it must refuse such a checkpoint, not drop its map.

    Version 4 adds ``sends_at``: the seq of the checkpoint that planned this
    superstep's Sends, which a later checkpoint of the same superstep (a pause,
    say) refers to instead of storing them again (-1: its own ``sends``). A map
    whose items pause one by one then writes bytes linear in its items.


    Version 5 is written in a short frame (formats/envelope.py) with its fields in
    the order a step's delta uses them, and the defaults at the end left out: what
    a delta does not use costs nothing (``status`` defaults to ``RUNNING``).
    """

    TYPE: ClassVar[str] = "checkpoint"
    VERSION: ClassVar[int] = 5
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("state", "waiting", "sends")
    OP_FIELDS: ClassVar[tuple[str, ...]] = ("deferred", "ops")
    run_id: str
    version: int
    superstep: int
    base: int = -1
    writes: list[int] = []
    deferred: list[Op] = []
    committed: list[str] = []
    next: list[str] = []
    at: float = 0.0
    status: str = "RUNNING"
    ops: list[Op] = []
    full: bool = False
    state: dict[str, Any] | None = None
    counts: dict[str, int] = {}
    seen: dict[str, dict[str, int]] = {}
    waiting: dict[str, Any] | None = None
    scan_from: int = -1
    flow: str = ""
    fingerprint: str = ""
    sends: list[list[Any]] = []
    sends_at: int = -1


class PendingWrite(Record, frozen=True, kw_only=True, omit_defaults=True, array_like=True):
    """One task's finished output, durable before its superstep is folded.

    Version 2 is the same fields as an array (no field names), like ``Checkpoint``.
    """

    TYPE: ClassVar[str] = "pending_write"
    VERSION: ClassVar[int] = 2
    OP_FIELDS: ClassVar[tuple[str, ...]] = ("ops",)
    run_id: str
    task: str
    superstep: int
    node: str
    ops: list[Op] = []
    at: float = 0.0


class IntentPrepared(Record, frozen=True, kw_only=True, omit_defaults=True, array_like=True):
    """A tool call is about to happen (written before the call).

    Version 2 is compact, as it is written once per call: an array, not a map;
    the intent key, node and idempotency key are derived from ``run_id``,
    ``task`` and ``index`` instead of stored; the args digest is 16 raw bytes.
    ``fixups`` keeps any version-1 value that derivation would not give back.

    Version 3 is written in a short frame, ``attempt`` after ``at``, and the
    defaults at the end left out.
    """

    TYPE: ClassVar[str] = "intent_prepared"
    VERSION: ClassVar[int] = 3
    run_id: str
    task: str
    index: int
    tool: str
    digest: bytes
    args_preview: str = ""
    at: float = 0.0
    attempt: int = 1
    fixups: dict[str, str] | None = None

    @property
    def key(self) -> str:
        return _fixed(self.fixups, "key") or intent_key(self.task, self.index)

    @property
    def node(self) -> str:
        return _fixed(self.fixups, "node") or node_of(self.task)

    @property
    def idempotency_key(self) -> str:
        return _fixed(self.fixups, "idempotency_key") or idempotency_key(self.run_id, self.key)

    @property
    def args_digest(self) -> str:
        return _fixed(self.fixups, "args_digest") or expand_digest(self.digest)

    def view(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "key": self.key, "task": self.task, "node": self.node,
                "index": self.index, "tool": self.tool, "args_digest": self.args_digest,
                "idempotency_key": self.idempotency_key, "attempt": self.attempt,
                "args_preview": self.args_preview, "at": self.at}


class IntentCompleted(Record, frozen=True, kw_only=True, omit_defaults=True, array_like=True):
    """The outcome of a tool call: a result or an error. ``via`` says who knew.

    Version 2 is compact (an array; the intent key as ``task`` and ``index``),
    like ``IntentPrepared`` version 2.

    Version 3 is written in a short frame with the result first and the defaults
    at the end left out, and says when as ``took``: the milliseconds since the
    call's prepare (``at`` is the prepare's plus that; a record that could not
    say so, as a reconciled one, keeps ``at``). A call that went as planned and
    fast is its key and its result.
    """

    TYPE: ClassVar[str] = "intent_completed"
    VERSION: ClassVar[int] = 3
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("result",)
    run_id: str
    task: str
    index: int
    result: Any = None
    took: int = 0
    at: float = 0.0
    ok: bool = True
    error: str | None = None
    error_type: str | None = None
    attempt: int = 1
    via: str = "call"
    fixups: dict[str, str] | None = None

    @property
    def key(self) -> str:
        return _fixed(self.fixups, "key") or intent_key(self.task, self.index)

    def view(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "key": self.key, "attempt": self.attempt, "ok": self.ok,
                "result": self.result, "error": self.error, "error_type": self.error_type,
                "via": self.via, "at": self.at} | ({"took": self.took} if self.took else {})


def intent_key(task: str, index: int) -> str:
    """A tool call's key: its task and its index among the task's calls."""
    return f"{task}#{index}"


def split_intent_key(key: str) -> tuple[str, int] | None:
    """``(task, index)`` of an intent key, or None if it is not of that form."""
    task, sep, index = key.rpartition("#")
    if not sep or not index.isdigit() or index != str(int(index)):
        return None
    return task, int(index)


def node_of(task: str) -> str:
    """The node of a task id ``superstep:node:fan-out``."""
    head, sep, _ = task.rpartition(":")
    return head.partition(":")[2] if sep else ""


def idempotency_key(run_id: str, key: str) -> str:
    """Stable across re-runs and processes: derived from run id and intent key only."""
    return "bide-" + hashlib.sha256(f"{run_id}\x00{key}".encode()).hexdigest()[:32]


_DIGEST_PREFIX = "sha256:"


def compact_digest(args_digest: str) -> bytes | None:
    """``sha256:`` + 32 hex digits as 16 raw bytes; None for a digest of another form."""
    hexpart = args_digest.removeprefix(_DIGEST_PREFIX)
    if args_digest.startswith(_DIGEST_PREFIX) and len(hexpart) == 32 and \
            hexpart == hexpart.lower():
        try:
            return bytes.fromhex(hexpart)
        except ValueError:
            pass
    return None


def expand_digest(digest: bytes) -> str:
    return _DIGEST_PREFIX + digest.hex()


def _fixed(fixups: dict[str, str] | None, name: str) -> str | None:
    return None if fixups is None else fixups.get(name)


class ApprovalRequested(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A run waits for a human: an approval, a reconciliation of a tool call, or a
    question (kind ``input``: ``action`` is the question, ``schema`` the JSON Schema
    its answer must match, None for any JSON value)."""

    TYPE: ClassVar[str] = "approval_requested"
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("payload",)
    run_id: str
    approval_id: str
    kind: str = "approval"
    node: str
    task: str
    action: str
    payload: Any = None
    digest: str
    state_version: int = 0
    allowed: list[str] = []
    tool: str | None = None
    intent: str | None = None
    requested_at: float = 0.0
    expires_at: float | None = None
    schema: dict[str, Any] | None = None


class ApprovalDecided(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Someone decided: who, what, why, and from which file. ``result`` holds what the
    node receives: a reconciled call's result (mark_done), or a question's answer."""

    TYPE: ClassVar[str] = "approval_decided"
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("result",)
    run_id: str
    approval_id: str
    decision: str
    by: str | None = None
    reason: str | None = None
    result: Any = None
    file: str | None = None
    content_digest: str | None = None
    at: float = 0.0


class LeaseAcquired(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A worker took the right to advance a run; ``token`` fences older workers.

    ``ttl`` (seconds), when given, is how long the lease lasts from its commit: the
    store writes ``expires_at`` as its own ``now()`` plus ``ttl`` inside the commit
    (PostgreSQL: the server's clock), so no host's clock decides when a lease ends.
    """

    TYPE: ClassVar[str] = "lease_acquired"
    run_id: str
    owner: str
    token: int
    expires_at: float
    attempts: int = 0
    at: float = 0.0
    # the worker's run span, "<trace id>-<span id>" in hex, when its engine traces
    # (engine/run/tracing.py): the worker that resumes the run links its span to it
    trace: str = ""
    ttl: float = 0.0


class LeaseReleased(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A worker let go of a run at a boundary."""

    TYPE: ClassVar[str] = "lease_released"
    run_id: str
    owner: str
    token: int
    at: float = 0.0


RECORD_TYPES: dict[str, type[Record]] = {
    cls.TYPE: cls
    for cls in (
        RunCreated,
        StatusChanged,
        Checkpoint,
        PendingWrite,
        IntentPrepared,
        IntentCompleted,
        ApprovalRequested,
        ApprovalDecided,
        LeaseAcquired,
        LeaseReleased,
    )
}


def register(cls: type[Record]) -> type[Record]:
    """Add a record type defined elsewhere (e.g. the LangGraph saver's records)."""
    existing = RECORD_TYPES.get(cls.TYPE)
    if existing is not None and existing is not cls:
        raise ValueError(f"record type tag {cls.TYPE!r} is already used by {existing.__name__}")
    RECORD_TYPES[cls.TYPE] = cls
    return cls
