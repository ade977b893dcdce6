"""Every record the store keeps, as versioned msgspec structs.

Rules (msgspec schema evolution): new fields get defaults; a field's type never
changes in place; a type tag is never reused. A breaking change bumps the
class's ``VERSION`` and adds a migration in ``formats/migrations.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

# One op of a state update: (key, kind, value). kind is "set", "append",
# "merge" (dict update) or "custom" (the value is the reducer's input; the
# checkpoint that absorbs it carries the reduced value as a "set").
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


class Checkpoint(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A consistent cut of a run after ``version`` supersteps.

    A full checkpoint carries ``state``; a delta carries ``writes`` (log seqs of
    the pending writes it absorbed, replayed through their ops) and ``ops``
    (updates not stored elsewhere), on top of the full checkpoint at ``base``.
    A ``-1`` in ``writes`` stands for ``deferred``: the output of the task that
    finished last, committed here instead of as its own pending write.
    Pending writes of the superstep to run next are searched from ``scan_from``
    (-1: after this checkpoint; a pause keeps the writes that came before it).
    """

    TYPE: ClassVar[str] = "checkpoint"
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("state", "waiting")
    OP_FIELDS: ClassVar[tuple[str, ...]] = ("deferred", "ops")
    run_id: str
    version: int
    superstep: int
    status: str
    full: bool = False
    state: dict[str, Any] | None = None
    base: int = -1
    writes: list[int] = []
    deferred: list[Op] = []
    ops: list[Op] = []
    committed: list[str] = []
    next: list[str] = []
    counts: dict[str, int] = {}
    seen: dict[str, dict[str, int]] = {}
    waiting: dict[str, Any] | None = None
    scan_from: int = -1
    flow: str = ""
    fingerprint: str = ""
    at: float = 0.0


class PendingWrite(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One task's finished output, durable before its superstep is folded."""

    TYPE: ClassVar[str] = "pending_write"
    OP_FIELDS: ClassVar[tuple[str, ...]] = ("ops",)
    run_id: str
    task: str
    superstep: int
    node: str
    ops: list[Op] = []
    at: float = 0.0


class IntentPrepared(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A tool call is about to happen (written before the call)."""

    TYPE: ClassVar[str] = "intent_prepared"
    run_id: str
    key: str
    task: str
    node: str
    index: int
    tool: str
    args_digest: str
    idempotency_key: str
    attempt: int = 1
    args_preview: str = ""
    at: float = 0.0


class IntentCompleted(Record, frozen=True, kw_only=True, omit_defaults=True):
    """The outcome of a tool call: a result or an error. ``via`` says who knew."""

    TYPE: ClassVar[str] = "intent_completed"
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("result",)
    run_id: str
    key: str
    attempt: int = 1
    ok: bool = True
    result: Any = None
    error: str | None = None
    error_type: str | None = None
    via: str = "call"
    at: float = 0.0


class ApprovalRequested(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A run waits for a human: an approval, or a reconciliation of a tool call."""

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


class ApprovalDecided(Record, frozen=True, kw_only=True, omit_defaults=True):
    """Someone decided: who, what, why, and from which file."""

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
    """A worker took the right to advance a run; ``token`` fences older workers."""

    TYPE: ClassVar[str] = "lease_acquired"
    run_id: str
    owner: str
    token: int
    expires_at: float
    attempts: int = 0
    at: float = 0.0


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
