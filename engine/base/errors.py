"""The errors bide raises, as one tree::

    BideError                      (formats.errors; root of all)
    ├── NotFound                   category: the home has no such thing (CLI exit 3)
    ├── Conflict                   category: it exists, but its state refuses the request
    ├── RecordError                a stored value cannot be read
    │   ├── CorruptRecord          checksum / truncation; names the key
    │   ├── CorruptIndex           a derived index value fails its checksum; names table + key
    │   ├── NewerSchema            written by a newer bide: upgrade
    │   └── UnknownRecordType
    ├── NotSerializable            a value cannot be stored
    │   └── StateNotSerializable   names the node, the state key and the type
    ├── StoreError                 the store cannot do what was asked; ``path`` names it
    │   ├── NotAHome               the directory is not a bide home          (NotFound)
    │   ├── NewerStore             the store was written by a newer bide
    │   ├── StoreFull              the size limit or the disk is full (still readable)
    │   ├── ReadOnlyHome           the home cannot be written; reading works
    │   ├── DurabilityLost         an fsync failed: the engine stops
    │   ├── StaleLease             a commit with a fencing token that lost its lease (Conflict)
    │   │   └── LeaseUnproven      a reply came too late to prove the lease: the worker stops
    │   ├── LogUnreadable          log records cannot be read; prune/rebuild refuse
    │   ├── StoreBusy              compact: another process has the store open (Conflict)
    │   ├── CompactFailed          the compacted copy did not verify; nothing swapped
    │   └── CopyRefused            bide copy: destination not empty, a run leased... (Conflict)
    ├── ConfigError                bide.toml, or a setting, is not usable; names file, key, line
    │   └── ServeError             bide serve: its extra missing, an unsafe token file
    ├── PackError                  bide pack: shiv missing, a distribution not installed...
    ├── MissingExtra               an optional extra is not installed; names it (an ImportError)
    ├── FlowError                  flow definition or flow/run mismatch; ``flow``, ``node``
    │   ├── UnknownFlow            this process serves no flow of that name   (NotFound)
    │   ├── FlowMismatch           a node the run needs no longer exists
    │   └── ReducerConflict        two parallel writes to a key without a reducer
    ├── RunError
    │   ├── UnknownRun                                                        (NotFound)
    │   ├── RunExists                                                         (Conflict)
    │   ├── UnknownVersion         the run has no checkpoint at that version  (NotFound)
    │   ├── UnknownKey             the state has no such key at that version  (NotFound)
    │   ├── UnknownStatus          not a run status name (also a ValueError)
    │   ├── InvalidTimer           ctx.sleep/sleep_until: a bad duration or time (a ValueError)
    │   ├── RunNotResumable        e.g. DONE, CANCELLED, or leased elsewhere  (Conflict)
    │   ├── NotCancellable         the run already finished                   (Conflict)
    │   ├── SignalRefused          a signal to a finished run                 (Conflict)
    │   ├── InvalidChild           ctx.child: a bad key or input, or children nested too deep
    │   ├── ChildFailed            ctx.child: the child run FAILED or was CANCELLED
    │   ├── LangGraphThread        a bide-flow reader asked about a LangGraph thread (Conflict)
    │   ├── NotALangGraphThread    a LangGraph thread id already used by a bide run (Conflict)
    │   ├── FollowTimeout          follow's deadline passed before the run finished or paused
    │   └── NodeFailed             a node raised after its retries (run is FAILED)
    ├── ToolError                  a tool call problem
    │   ├── NotATool / ToolOutsideNode
    │   ├── ToolNeedsAwait         an async tool called with the sync ctx.tool
    │   ├── ContextClosed          a node's ctx used after the node returned
    │   ├── Nondeterminism         a re-run node called something else at a recorded index
    │   ├── ToolFailed             a recorded tool error, raised again on replay
    │   └── ReconciliationAborted
    ├── ScheduleError              a schedule problem; ``name`` names it
    │   ├── InvalidSchedule        a bad name, cron, interval or time zone (a ValueError)
    │   └── UnknownSchedule        the home has no schedule of that name     (NotFound)
    └── ApprovalError
        ├── UnknownApproval                                                   (NotFound)
        ├── DecisionRefused        the decision does not fit the request      (Conflict)
        │   ├── AlreadyDecided     the request was decided already (by whom, what)
        │   ├── DecisionNotAllowed  a decision this kind of request does not take
        │   └── InvalidAnswer      an answer does not match the question's schema
        ├── ApprovalKeyError       the home requires signed decisions; the key is missing or wrong
        └── QuestionRejected       ``ctx.ask``: a person declined to answer
            └── QuestionExpired    ``ctx.ask``: nobody answered before the question expired

The two categories cut across the branches (multiple inheritance), so a caller, and
the CLI's one table of exit codes, can catch "not found" or "conflict" without
listing classes. ``UnknownFlow`` and ``UnknownStatus`` are not ``NotFound``: they
name something missing from the program or the arguments, not from the home.

Control flow that user code must not swallow (``Paused``) derives from
``BaseException`` on purpose: a node's ``except Exception`` must not eat a pause.
"""

from __future__ import annotations

from typing import Any

# re-exported: the whole tree is importable from here
from ...formats.errors import BideError as BideError
from ...formats.errors import CorruptIndex as CorruptIndex
from ...formats.errors import CorruptRecord as CorruptRecord
from ...formats.errors import NewerSchema as NewerSchema
from ...formats.errors import NotSerializable as NotSerializable
from ...formats.errors import RecordError as RecordError
from ...formats.errors import UnknownRecordType as UnknownRecordType


class NotFound(BideError):
    """Category: the home has no such run, approval, version, state key, or is no home."""


class Conflict(BideError):
    """Category: the thing exists, but its current state refuses the request."""


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
    """The store failed; the message says why and ``path`` names the store (when known)."""

    path: object

    def __init__(self, message: str, *, path: object = None) -> None:
        self.path = path
        super().__init__(message)


class NotAHome(StoreError, NotFound):
    def __init__(self, path: object, why: str) -> None:
        self.why = why
        super().__init__(f"{path} is not a bide home: {why}", path=path)


class NewerStore(StoreError):
    def __init__(self, path: object, found: int, known: int) -> None:
        self.found, self.known = found, known
        super().__init__(
            f"the store at {path} has format {found}, this bide knows up to {known}: upgrade bide",
            path=path,
        )


class StoreFull(StoreError):
    """The store's size limit (``limit``) or the filesystem holding the home (``free``
    bytes left) is full. The commit that met it stored nothing; everything before it
    is intact and readable."""

    def __init__(self, path: object, limit: int | None = None, *,
                 free: int | None = None) -> None:
        self.limit, self.free = limit, free
        if limit is not None:
            super().__init__(
                f"the store at {path} reached its size limit of {limit} bytes; it stays "
                "readable. Prune or compact it, or open it with a larger max_size", path=path,
            )
            return
        super().__init__(
            f"the filesystem holding the home at {path} is full ({free} bytes free); the "
            "last commit stored nothing and everything before it is intact. Free some space, "
            "then resume the run", path=path,
        )


class ReadOnlyHome(StoreError):
    """The home was opened read-only (a read-only mount, or no write permission):
    every reading call works, every writing one raises this."""

    def __init__(self, path: object, why: str) -> None:
        self.why = why
        super().__init__(
            f"the home at {path} is read-only ({why}); reading works, writing does not. "
            "Copy it somewhere writable to change it", path=path,
        )


class DurabilityLost(StoreError):
    """An fsync failed: data may not be on disk; the engine refuses further writes."""


class StaleLease(StoreError, Conflict):
    def __init__(self, run_id: str, token: int, current: int | None) -> None:
        self.run_id, self.token, self.current = run_id, token, current
        super().__init__(
            f"run {run_id!r}: commit refused, lease token {token} is stale "
            f"(current token {current}); another worker owns this run now"
        )


class LeaseUnproven(StaleLease):
    """This worker can no longer prove its lease is live (a reply came back after the
    lease's trusted deadline: a partition, a held COMMIT reply), so it stops before it
    acts: another worker may hold the run by now. Nothing is called; the run is left to
    whoever holds it (``engine/run/lease_clock.py``)."""

    def __init__(self, run_id: str, token: int, what: str, late_by: float) -> None:
        self.what, self.late_by = what, late_by
        self.run_id, self.token, self.current = run_id, token, None
        StoreError.__init__(
            self, f"run {run_id!r}: lease token {token} could not be proven live {what} "
            f"(its trusted deadline passed {late_by:.2f}s before); stopping here, leaving "
            "the run to whoever holds its lease now")


class LogUnreadable(StoreError):
    """The log has records that cannot be read; the operation would act on a partial truth.

    ``problems`` are the doctor's findings (``maintenance.Problem``), each with a ``key``.
    """

    def __init__(self, what: str, problems: list[Any]) -> None:
        self.problems = problems
        keys = ", ".join(p.key for p in problems[:5])
        super().__init__(f"refusing to {what}: {len(problems)} log record(s) cannot be read "
                         f"({keys}); run `bide doctor` to see them")


class StoreBusy(StoreError, Conflict):
    """Another process (or this one) has the store open; compact will not swap under it."""

    def __init__(self, path: object, who: str) -> None:
        self.who = who
        super().__init__(f"cannot compact {path}: {who} has the store open; stop it "
                         "(watchers, workers, apps) and try again", path=path)


class CompactFailed(StoreError):
    """The compacted copy did not verify; the store was not touched."""


class CopyRefused(StoreError, Conflict):
    """``bide copy`` will not copy ``source`` into ``destination``; ``why`` says what is there.

    Refused before writing, except for a copy stopped half-way (``interrupted``): what it
    wrote stays in the destination, for its owner to resume or set aside.
    """

    def __init__(self, source: object, destination: object, why: str, *,
                 interrupted: bool = False) -> None:
        self.source, self.destination, self.why = source, destination, why
        self.interrupted = interrupted
        super().__init__(f"cannot copy {source} to {destination}: {why}", path=destination)


class ConfigError(BideError, ValueError):
    """A config file (``bide.toml``) or a setting that cannot be used, and why.

    ``where`` is the file (or ``FILE:LINE``, or the environment variable); ``key``
    and ``line`` name the setting when there is one. Also a ValueError: a bad value.
    """

    def __init__(self, where: object, why: str, *, key: str | None = None,
                 line: int | None = None, hint: str | None = None) -> None:
        self.where, self.key, self.line = where, key, line
        at = f"{where}:{line}" if line else f"{where}"
        super().__init__(f"config {at}: {why}" + (f"; {hint}" if hint else ""))


class ServeError(ConfigError):
    """``bide serve`` cannot start: its extra is not installed, or its token file is not
    safe to use (readable by others, not a regular file, empty); ``where`` names it."""

    def __init__(self, where: object, why: str, *, hint: str | None = None) -> None:
        self.where, self.key, self.line = where, None, None
        Exception.__init__(self, f"{where}: {why}" + (f"; {hint}" if hint else ""))


class PackError(BideError):
    """``bide pack`` could not write the file (engine/upkeep/pack.py); the message says why."""


class MissingExtra(BideError, ImportError):
    """Something was used that needs an optional extra which is not installed.

    ``extra`` is the extra's name (``postgres``, ``serve``, ``otel``, ``langgraph``...),
    ``module`` the missing module; the message says what needed it and the pip command.
    Also an ImportError, so code that guards an optional import keeps working.
    """

    def __init__(self, what: str, *, extra: str, module: str) -> None:
        self.extra, self.module = extra, module
        ImportError.__init__(self, f"{what} needs the {extra!r} extra ({module} is not "
                                   f"installed): pip install 'bide[{extra}]'", name=module)


class FlowError(BideError):
    """A flow definition problem, or a flow that does not fit a run; names ``flow`` and
    ``node`` when there is one."""

    flow: str | None
    node: str | None

    def __init__(self, message: str, *, flow: str | None = None,
                 node: str | None = None) -> None:
        self.flow, self.node = flow, node
        super().__init__(message)


class UnknownFlow(FlowError, NotFound):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name, self.known = name, known
        super().__init__(f"unknown flow {name!r}; registered: {sorted(known) or 'none'}",
                         flow=name)


class FlowMismatch(FlowError):
    def __init__(self, run_id: str, node: str, where: str, *, flow: str | None = None) -> None:
        self.run_id = run_id
        super().__init__(
            f"run {run_id!r} cannot continue: its {where} node {node!r} no longer exists in the "
            "flow. Restore the node (the run's data is untouched) or fork from an earlier version",
            flow=flow, node=node,
        )


class ReducerConflict(FlowError):
    def __init__(self, key: str, nodes: list[str], *, flow: str | None = None) -> None:
        self.key, self.nodes = key, nodes
        super().__init__(
            f"nodes {' and '.join(repr(n) for n in nodes)} both wrote state key {key!r} in one "
            f"superstep and it has no reducer; declare one with flow.reducer({key!r}, ...)",
            flow=flow,
        )


class RunError(BideError):
    pass


class UnknownRun(RunError, NotFound):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r}")


class RunExists(RunError, Conflict):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"a run with id {run_id!r} already exists; pick another id or resume it")


class UnknownVersion(RunError, NotFound):
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


class InvalidTimer(RunError, ValueError):
    """``ctx.sleep``/``ctx.sleep_until`` got a negative, NaN or non-number duration, or a
    naive datetime; the message says which."""


class ScheduleError(BideError):
    """A schedule (``engine.schedule``) cannot be recorded or found."""

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        super().__init__(message)


class InvalidSchedule(ScheduleError, ValueError):
    """``engine.schedule`` got a bad name, cron expression, interval, time zone or flow, or
    both or neither of ``every``/``cron``; the message says which. Nothing is recorded."""


class UnknownSchedule(ScheduleError, NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(name, f"no schedule named {name!r} (bide schedules lists them)")


class RunNotResumable(RunError, Conflict):
    def __init__(self, run_id: str, why: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} cannot be resumed: {why}")


class FollowTimeout(RunError):
    """``follow``'s deadline passed while the run went on; ``last_seq`` resumes it."""

    def __init__(self, run_id: str, seconds: float, status: str, last_seq: int | None) -> None:
        self.run_id, self.seconds, self.status, self.last_seq = run_id, seconds, status, last_seq
        again = "since=None" if last_seq is None else f"since={last_seq}"
        super().__init__(f"followed run {run_id!r} for {seconds:g}s and it is still {status}; "
                         f"follow again with {again} to go on without gaps or repeats")


class SignalRefused(RunError, Conflict):
    """A signal no wait could ever take: its run is DONE or CANCELLED (nothing is kept)."""

    def __init__(self, run_id: str, name: str, why: str) -> None:
        self.run_id, self.name = run_id, name
        super().__init__(f"signal {name!r} to run {run_id!r} refused: {why}")


class InvalidChild(RunError, ValueError):
    """``ctx.child`` cannot start that child: a bad key or input, or runs nested deeper
    than the limit (a flow that starts itself for ever); the message says which."""

    def __init__(self, run_id: str, why: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} cannot start a child run: {why}")


class ChildFailed(RunError):
    """Raised by ``ctx.child`` in the parent's node: the child run ended FAILED or
    CANCELLED. ``child`` is its run id, ``status`` its status, ``error`` why (if known).
    The node may catch it; uncaught, the parent fails with this message."""

    def __init__(self, run_id: str, child: str, status: str, error: str | None) -> None:
        self.run_id, self.child, self.status, self.error = run_id, child, status, error
        super().__init__(f"child run {child!r} of run {run_id!r} ended {status}"
                         + (f": {error}" if error else ""))


class UnknownKey(RunError, NotFound):
    """The state has no such key at that version."""

    def __init__(self, run_id: str, key: str, version: int) -> None:
        self.run_id, self.key, self.version = run_id, key, version
        super().__init__(f"run {run_id!r} has no state key {key!r} at version {version}")


class NotCancellable(RunError, Conflict):
    def __init__(self, run_id: str, status: str) -> None:
        self.run_id, self.status = run_id, status
        super().__init__(f"run {run_id!r} is {status}; only a run that has not finished "
                         "(or a FAILED one) can be cancelled")


class LangGraphThread(RunError, Conflict):
    """The run is a LangGraph thread: its state lives in LangGraph's channels, not ours."""

    def __init__(self, run_id: str, what: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"{run_id!r} is a LangGraph thread: `bide {what}` reads bide flows' checkpoints. "
            "Read its state through the graph (graph.get_state(config)); `bide runs`, `show`, "
            "`log`, `doctor` and `stats` work on it"
        )


class NotALangGraphThread(RunError, Conflict):
    """The thread id is a bide run of another flow in this home."""

    def __init__(self, thread_id: str, flow: str) -> None:
        self.run_id, self.flow = thread_id, flow
        super().__init__(
            f"thread id {thread_id!r} is already a bide run of flow {flow!r} in this home; "
            "use another thread id (LangGraph threads and bide runs share one id space)"
        )


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


class UnknownApproval(ApprovalError, NotFound):
    def __init__(self, approval_id: str) -> None:
        self.approval_id = approval_id
        super().__init__(f"no approval request with id {approval_id!r}")


class DecisionRefused(ApprovalError, Conflict):
    def __init__(self, approval_id: str, why: str) -> None:
        self.approval_id, self.why = approval_id, why
        super().__init__(f"decision for {approval_id!r} refused: {why}")


class AlreadyDecided(DecisionRefused):
    """The request was decided already, otherwise than asked now (or, where a repeat is
    refused too, the same way): says what was decided and by whom."""

    def __init__(self, approval_id: str, decision: str | None, by: str | None) -> None:
        self.decision, self.by = decision, by
        super().__init__(approval_id, f"already decided {decision!r} by {by or 'someone'}")


class DecisionNotAllowed(DecisionRefused):
    def __init__(self, approval_id: str, kind: str, decision: str, allowed: list[str]) -> None:
        self.kind, self.decision, self.allowed = kind, decision, allowed
        what, hint = f"a {kind} request", ""
        if kind == "input":  # a question (ctx.ask): answered with a value, not approved
            what, hint = "a question", " (answer it with `bide answer` or engine.answer)"
        super().__init__(approval_id, f"it is {what}; it takes "
                         f"{' / '.join(allowed)}, not {str(decision)!r}{hint}")


class InvalidAnswer(DecisionRefused):
    """An answer that does not fit the question's schema: nothing is recorded."""

    def __init__(self, approval_id: str, problem: str, *, expected: str | None = None) -> None:
        self.problem, self.expected = problem, expected
        super().__init__(approval_id, f"the answer does not match the question's schema: "
                         f"{problem}" + (f" (it takes {expected})" if expected else ""))


class QuestionRejected(ApprovalError):
    """Raised by ``ctx.ask`` when a person rejected the question instead of answering.

    A node may catch it and go on without the value; uncaught, the node fails.
    """

    def __init__(self, approval_id: str, question: str, *, by: str | None = None,
                 reason: str | None = None) -> None:
        self.approval_id, self.question, self.by, self.reason = approval_id, question, by, reason
        super().__init__(self._message())

    def _message(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return (f"question {self.approval_id!r} ({self.question!r}) was rejected by "
                f"{self.by or 'someone'}{why}")


class QuestionExpired(QuestionRejected):
    """Raised by ``ctx.ask`` when the question expired unanswered (``expires_in``)."""

    def _message(self) -> str:
        return (f"question {self.approval_id!r} ({self.question!r}) expired before anyone "
                f"answered it")


class ApprovalKeyError(ApprovalError):
    def __init__(self, home: object, why: str, *, marker: str = "its signing.json") -> None:
        self.home, self.why, self.marker = home, why, marker
        super().__init__(f"{home} requires signed decisions (see {marker}): {why}")


class Paused(BaseException):  # noqa: N818 - control flow, not an error
    """Raised inside a node to pause its run; BaseException so user code cannot swallow it."""

    def __init__(self, waiting: dict[str, Any], records: list[Any], *,
                 expires_at: float | None = None) -> None:
        self.waiting, self.records = waiting, records
        # when the request waited on expires (a request recorded earlier: its records
        # are not here); the pause reports the request that expires first
        self.expires_at = expires_at
        super().__init__(waiting.get("type", "pause"))


__all__ = [
    "AlreadyDecided",
    "ApprovalError",
    "ApprovalKeyError",
    "BideError",
    "ChildFailed",
    "CompactFailed",
    "ConfigError",
    "Conflict",
    "ContextClosed",
    "CopyRefused",
    "CorruptIndex",
    "CorruptRecord",
    "DecisionNotAllowed",
    "DecisionRefused",
    "DurabilityLost",
    "FlowError",
    "FlowMismatch",
    "FollowTimeout",
    "InvalidAnswer",
    "InvalidChild",
    "InvalidSchedule",
    "InvalidTimer",
    "LangGraphThread",
    "LeaseUnproven",
    "LogUnreadable",
    "MissingExtra",
    "NewerSchema",
    "NewerStore",
    "NodeFailed",
    "Nondeterminism",
    "NotAHome",
    "NotALangGraphThread",
    "NotATool",
    "NotCancellable",
    "NotFound",
    "NotSerializable",
    "PackError",
    "Paused",
    "QuestionExpired",
    "QuestionRejected",
    "ReadOnlyHome",
    "ReconciliationAborted",
    "RecordError",
    "ReducerConflict",
    "RunError",
    "RunExists",
    "RunNotResumable",
    "ScheduleError",
    "ServeError",
    "SignalRefused",
    "StaleLease",
    "StateNotSerializable",
    "StoreBusy",
    "StoreError",
    "StoreFull",
    "ToolError",
    "ToolFailed",
    "ToolNeedsAwait",
    "ToolOutsideNode",
    "UnknownApproval",
    "UnknownFlow",
    "UnknownKey",
    "UnknownRecordType",
    "UnknownRun",
    "UnknownSchedule",
    "UnknownStatus",
    "UnknownVersion",
]


def raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised (``file.py:LINE in function``, its innermost frame): said
    with an unexpected error that stops a loop, so a rare one can be traced from its log
    line alone."""
    tb = exc.__traceback__
    if tb is None:
        return "an unknown place"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno} in {code.co_name}"
