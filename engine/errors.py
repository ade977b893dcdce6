"""The errors bide raises, as one tree::

    BideError                      (formats.errors; root of all)
    ├── RecordError                a stored value cannot be read
    │   ├── CorruptRecord          checksum / truncation; names the key
    │   ├── CorruptIndex           a derived index value fails its checksum; names table + key
    │   ├── NewerSchema            written by a newer bide: upgrade
    │   └── UnknownRecordType
    ├── NotSerializable            a value cannot be stored
    │   └── StateNotSerializable   names the node, the state key and the type
    ├── StoreError                 the store cannot do what was asked
    │   ├── NotAHome               the directory is not a bide home
    │   ├── NewerStore             the store was written by a newer bide
    │   ├── StoreFull              the size limit or the disk is full (still readable)
    │   ├── ReadOnlyHome           the home cannot be written; reading works
    │   ├── DurabilityLost         an fsync failed: the engine stops
    │   └── StaleLease             a commit with a fencing token that lost its lease
    ├── FlowError                  flow definition or flow/run mismatch
    │   ├── UnknownFlow
    │   ├── FlowMismatch           a node the run needs no longer exists
    │   └── ReducerConflict        two parallel writes to a key without a reducer
    ├── RunError
    │   ├── UnknownRun
    │   ├── RunExists
    │   ├── UnknownVersion         the run has no checkpoint at that version
    │   ├── UnknownStatus          not a run status name (also a ValueError)
    │   ├── RunNotResumable        e.g. DONE, CANCELLED, or leased elsewhere
    │   └── NodeFailed             a node raised after its retries (run is FAILED)
    ├── ToolError                  a tool call problem
    │   ├── NotATool / ToolOutsideNode
    │   ├── ToolNeedsAwait         an async tool called with the sync ctx.tool
    │   ├── ContextClosed          a node's ctx used after the node returned
    │   ├── Nondeterminism         a re-run node called something else at a recorded index
    │   ├── ToolFailed             a recorded tool error, raised again on replay
    │   └── ReconciliationAborted
    └── ApprovalError
        ├── UnknownApproval
        ├── DecisionRefused        the decision does not fit the request
        │   └── DecisionNotAllowed  a decision this kind of request does not take
        └── ApprovalKeyError       the home requires signed decisions; the key is missing or wrong

Control flow that user code must not swallow (``Paused``) derives from
``BaseException`` on purpose: a node's ``except Exception`` must not eat a pause.
"""

from __future__ import annotations

from typing import Any

# re-exported: the whole tree is importable from here
from ..formats.errors import BideError as BideError
from ..formats.errors import CorruptIndex as CorruptIndex
from ..formats.errors import CorruptRecord as CorruptRecord
from ..formats.errors import NewerSchema as NewerSchema
from ..formats.errors import NotSerializable as NotSerializable
from ..formats.errors import RecordError as RecordError
from ..formats.errors import UnknownRecordType as UnknownRecordType


class StateNotSerializable(NotSerializable):
    """A state value (or ``input=``) bide would not read back as the same type.

    Names the node (``"(input)"`` for a run's input), the key, and the refused type.
    """

    def __init__(self, node: str, key: str, why: str, *, type_name: str | None = None,
                 trail: list[object] | None = None) -> None:
        self.node, self.key = node, key
        where = "".join(f"[{step!r}]" for step in trail or [])
        super().__init__(f"state key {key!r}{where} written by node {node!r}", why,
                         type_name=type_name, trail=trail)

    @classmethod
    def of(cls, node: str, key: str, exc: NotSerializable) -> StateNotSerializable:
        """Name ``node`` and ``key`` on a refusal from the codec."""
        return cls(node, key, exc.why, type_name=exc.type_name, trail=exc.trail)


class StoreError(BideError):
    """The store failed; the message says why."""


class NotAHome(StoreError):
    def __init__(self, path: object, why: str) -> None:
        self.path = path
        super().__init__(f"{path} is not a bide home: {why}")


class NewerStore(StoreError):
    def __init__(self, path: object, found: int, known: int) -> None:
        self.path, self.found, self.known = path, found, known
        super().__init__(
            f"the store at {path} has format {found}, this bide knows up to {known}: upgrade bide"
        )


class StoreFull(StoreError):
    """The store's size limit (``limit``) or the filesystem holding the home (``free``
    bytes left) is full. The commit that met it stored nothing; everything before it
    is intact and readable."""

    def __init__(self, path: object, limit: int | None = None, *,
                 free: int | None = None) -> None:
        self.path, self.limit, self.free = path, limit, free
        if limit is not None:
            super().__init__(
                f"the store at {path} reached its size limit of {limit} bytes; it stays "
                "readable. Prune or compact it, or open it with a larger max_size"
            )
            return
        super().__init__(
            f"the filesystem holding the home at {path} is full ({free} bytes free); the "
            "last commit stored nothing and everything before it is intact. Free some space, "
            "then resume the run"
        )


class ReadOnlyHome(StoreError):
    """The home was opened read-only (a read-only mount, or no write permission):
    every reading call works, every writing one raises this."""

    def __init__(self, path: object, why: str) -> None:
        self.path, self.why = path, why
        super().__init__(
            f"the home at {path} is read-only ({why}); reading works, writing does not. "
            "Copy it somewhere writable to change it"
        )


class DurabilityLost(StoreError):
    """An fsync failed: data may not be on disk; the engine refuses further writes."""


class StaleLease(StoreError):
    def __init__(self, run_id: str, token: int, current: int | None) -> None:
        self.run_id, self.token, self.current = run_id, token, current
        super().__init__(
            f"run {run_id!r}: commit refused, lease token {token} is stale "
            f"(current token {current}); another worker owns this run now"
        )


class FlowError(BideError):
    pass


class UnknownFlow(FlowError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        super().__init__(f"unknown flow {name!r}; registered: {sorted(known) or 'none'}")


class FlowMismatch(FlowError):
    def __init__(self, run_id: str, node: str, where: str) -> None:
        self.run_id, self.node = run_id, node
        super().__init__(
            f"run {run_id!r} cannot continue: its {where} node {node!r} no longer exists in the "
            "flow. Restore the node (the run's data is untouched) or fork from an earlier version"
        )


class ReducerConflict(FlowError):
    def __init__(self, key: str, nodes: list[str]) -> None:
        self.key, self.nodes = key, nodes
        super().__init__(
            f"nodes {' and '.join(repr(n) for n in nodes)} both wrote state key {key!r} in one "
            f"superstep and it has no reducer; declare one with flow.reducer({key!r}, ...)"
        )


class RunError(BideError):
    pass


class UnknownRun(RunError):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r}")


class RunExists(RunError):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"a run with id {run_id!r} already exists; pick another id or resume it")


class UnknownVersion(RunError):
    """The run has no checkpoint at that version (never written, or pruned)."""

    def __init__(self, run_id: str, version: int, known: list[int]) -> None:
        self.run_id, self.version = run_id, version
        shown = ", ".join(str(v) for v in known[-10:]) or "none"
        super().__init__(f"run {run_id!r} has no checkpoint at version {version}; "
                         f"stored versions: {shown}")


class UnknownStatus(RunError, ValueError):
    """A status name that is not one of ``Status``; a ValueError too, as bad arguments are."""

    def __init__(self, given: object, known: list[str]) -> None:
        self.given, self.known = given, known
        super().__init__(f"unknown run status {given!r}; use one of {', '.join(known)} "
                         "(any case)")


class RunNotResumable(RunError):
    def __init__(self, run_id: str, why: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} cannot be resumed: {why}")


class NodeFailed(RunError):
    def __init__(self, run_id: str, node: str, error: str) -> None:
        self.run_id, self.node, self.error = run_id, node, error
        super().__init__(f"run {run_id!r}: node {node!r} failed: {error}")


class ToolError(BideError):
    pass


class NotATool(ToolError):
    def __init__(self, fn: object) -> None:
        super().__init__(
            f"{getattr(fn, '__name__', fn)!r} is not a bide tool; declare it with @bide.tool"
        )


class ToolOutsideNode(ToolError):
    def __init__(self, tool: str) -> None:
        super().__init__(
            f"tool {tool!r} was called outside a node; call it as ctx.tool({tool}, ...) "
            "inside a node so its side effect goes through the intent log"
        )


class ToolNeedsAwait(ToolError):
    """An async tool called through the sync ``ctx.tool``: refused before anything is recorded."""

    def __init__(self, tool: str, node: str) -> None:
        self.tool, self.node = tool, node
        super().__init__(
            f"tool {tool!r} is async (or has an async reconciler) and node {node!r} called it "
            f"with ctx.tool; make the node `async def` and call `await ctx.atool({tool}, ...)`"
        )


class ContextClosed(ToolError):
    """A node's ``ctx`` was used after the node returned (kept in a closure or a thread)."""

    def __init__(self, run_id: str, node: str, what: str) -> None:
        self.run_id, self.node = run_id, node
        super().__init__(
            f"ctx.{what} was called on the ctx of node {node!r} of run {run_id!r} after that "
            "node returned; a ctx is valid only while its node runs, so finish tool calls and "
            "approvals (and join any threads using ctx) before the node returns"
        )


class Nondeterminism(ToolError):
    def __init__(self, node: str, index: int, recorded: str, now: str) -> None:
        self.node, self.index, self.recorded, self.now = node, index, recorded, now
        super().__init__(
            f"node {node!r} call #{index}: the log recorded {recorded} but the re-run made {now}. "
            "A node must make the same tool calls in the same order on every run; move "
            "non-deterministic choices into state or a tool"
        )


class ToolFailed(ToolError):
    def __init__(self, tool: str, error_type: str | None, error: str | None) -> None:
        self.tool, self.error_type, self.error = tool, error_type, error
        super().__init__(f"tool {tool!r} failed: {error_type}: {error}")


class ReconciliationAborted(ToolError):
    def __init__(self, tool: str, intent: str, by: str | None, reason: str | None) -> None:
        self.tool, self.intent = tool, intent
        super().__init__(
            f"tool {tool!r} (intent {intent}) was aborted by {by or 'someone'}: "
            f"{reason or 'no reason'}"
        )


class ApprovalError(BideError):
    pass


class UnknownApproval(ApprovalError):
    def __init__(self, approval_id: str) -> None:
        self.approval_id = approval_id
        super().__init__(f"no approval request with id {approval_id!r}")


class DecisionRefused(ApprovalError):
    def __init__(self, approval_id: str, why: str) -> None:
        self.approval_id, self.why = approval_id, why
        super().__init__(f"decision for {approval_id!r} refused: {why}")


class DecisionNotAllowed(DecisionRefused):
    def __init__(self, approval_id: str, kind: str, decision: str, allowed: list[str]) -> None:
        self.kind, self.decision, self.allowed = kind, decision, allowed
        super().__init__(approval_id, f"it is a {kind} request; it takes "
                         f"{' / '.join(allowed)}, not {decision!r}")


class ApprovalKeyError(ApprovalError):
    def __init__(self, home: object, why: str) -> None:
        self.home, self.why = home, why
        super().__init__(f"{home} requires signed decisions (see its signing.json): {why}")


class Paused(BaseException):  # noqa: N818 - control flow, not an error
    """Raised inside a node to pause its run; BaseException so user code cannot swallow it."""

    def __init__(self, waiting: dict[str, Any], records: list[Any]) -> None:
        self.waiting, self.records = waiting, records
        super().__init__(waiting.get("type", "pause"))


__all__ = [name for name in dir() if name[0].isupper()]
