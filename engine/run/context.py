"""``ctx``: what a node can do besides returning an update — call tools, ask for approval.

Tool calls go through the write-ahead intent log (DESIGN.md "Intent log"):
prepare durably, call, record the outcome. A node that runs again finds its
earlier intents by key (task identity + call index) and replays them.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from ...formats import (
    ApprovalDecided,
    ApprovalRequested,
    IntentCompleted,
    IntentPrepared,
    check_serializable,
    digest_bytes,
    pack,
)
from ...formats.errors import NotSerializable
from ...formats.records import compact_digest, idempotency_key
from ..base import faults
from ..base.errors import (
    ContextClosed,
    InvalidAnswer,
    LeaseUnproven,
    Nondeterminism,
    NotATool,
    Paused,
    QuestionExpired,
    QuestionRejected,
    ReconciliationAborted,
    StaleLease,
    ToolFailed,
    ToolNeedsAwait,
)
from ..base.offload import off_loop, on_loop
from ..base.vocabulary import (
    APPROVAL_DECISIONS,
    INPUT_DECISIONS,
    RECONCILE_DECISIONS,
    Decision,
    IntentStatus,
    Waiting,
)
from ..storage.index import IntentState
from . import children, signals, timers, value_schema
from .approvals import approval_id, decided, digest_of, question_digest, same_request
from .run_view import expired
from .step import StepScope
from .tools import Outcome, Tool

log = logging.getLogger("bide.lease")


class NodeContext:
    """Passed to every node as ``ctx``. One per node execution (attempt)."""

    def __init__(self, scope: StepScope, node: str, task: str, attempt: int) -> None:
        self._scope = scope
        self.run_id = scope.run_id
        self.node = node
        self.task_id = task
        self.superstep = scope.superstep
        self.state_version = scope.version
        self.attempt = attempt
        self._calls = 0
        # index -> what the call returned, if a str or bytes: a checkpoint may name it
        # instead of storing it again (engine/storage/call_refs.py)
        self.results: dict[int, Any] = {}
        self._asks = 0
        self._sleeps = 0
        self._waits = 0
        self._children = 0
        self._closed = False

    @property
    def fencing_token(self) -> int:
        """This worker's fencing token on the run: it grows by one at every takeover.

        A lease guards a tool call only until the lease ends. A tool that may run longer
        than the lease (or be retried by another worker meanwhile) must hand the token
        to the system it acts on, which refuses a request carrying a token lower than
        one it has seen for the run: then a worker cut off past its lease cannot act
        after its successor has. A tool that takes a ``fencing_token`` keyword gets it.
        """
        return self._scope.token

    def idempotency_key(self, index: int | None = None) -> str:
        """The idempotency key of this node's tool call number ``index`` (default: the
        next ``ctx.tool`` call), the one an ``idempotency_key`` keyword receives: the
        same on every run of the node, in any process."""
        return idempotency_key(self.run_id, self.intent_key(self._calls if index is None
                                                            else index))

    def close(self) -> None:
        """The node returned: from now on every call on this ctx raises ContextClosed."""
        self._closed = True

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ContextClosed(self.run_id, self.node, what)

    # -- approvals ---------------------------------------------------------
    def approve(self, action: str, payload: Any = None, *, expires_in: float | None = None) -> bool:
        """Ask a human. Pauses the run the first time; True/False once decided."""
        self._check_open("approve")
        index = self._asks
        self._asks += 1
        return self._ask(action, payload, expires_in, approval_id(self.run_id, self.task_id, index))

    def _ask(self, action: str, payload: Any, expires_in: float | None, aid: str) -> bool:
        scope = self._scope
        check_serializable(payload, f"the payload of approval {action!r} in node {self.node!r}")
        digest = digest_of(action, payload)
        with scope.reader() as r:
            req = r.approval(aid)
        waiting = {"type": "approval", "node_id": self.node, "approval_id": aid}
        if req is None:
            now = scope.clock()
            raise Paused(waiting, [ApprovalRequested(
                run_id=self.run_id, approval_id=aid, kind="approval", node=self.node,
                task=self.task_id, action=action, payload=payload, digest=digest,
                state_version=scope.version, allowed=list(APPROVAL_DECISIONS), requested_at=now,
                expires_at=None if expires_in is None else now + expires_in,
            )])
        if req.digest != digest and not same_request(req.digest, action, payload):
            raise Nondeterminism(self.node, self._asks - 1, f"approval of {req.action!r} "
                                 f"({req.digest[:19]})", f"approval of {action!r} ({digest[:19]})")
        if req.decision is None:
            if expired(req, scope.clock()):
                scope.commit([decided(req, Decision.REJECT, by="bide", reason="expired",
                                      at=scope.clock())], task=self.task_id)
                return False
            raise Paused(waiting, [])
        return req.decision == Decision.APPROVE

    # -- questions ---------------------------------------------------------
    def ask(self, question: str, *, schema: Any = None, payload: Any = None,
            expires_in: float | None = None) -> Any:
        """Ask a person for a value. Pauses the run (``WAITING_INPUT``) the first time;
        once answered, the node runs again and this returns the answer converted to
        ``schema`` (any type msgspec converts; None: any JSON value).

        Asks and approvals of one node are numbered in call order, so each call keeps
        its id when the node runs again.

        Raises:
            QuestionRejected: a person declined to answer (``bide approve ID --reject``).
            QuestionExpired: ``expires_in`` seconds passed with no answer.
            InvalidAnswer: the recorded answer does not convert to ``schema`` (it was
                checked against the schema's JSON Schema when recorded).
        """
        self._check_open("ask")
        index = self._asks
        self._asks += 1
        aid = approval_id(self.run_id, self.task_id, index, kind="ask")
        json_schema = value_schema.schema_of(schema)
        req = self._asked(question, payload, json_schema, expires_in, aid)
        if req.decision == Decision.ANSWER:
            return req.result if schema is None else _convert(aid, req.result, schema)
        if req.by == "bide" and req.reason == "expired":
            raise QuestionExpired(aid, question)
        raise QuestionRejected(aid, question, by=req.by, reason=req.reason)

    def _asked(self, question: str, payload: Any, json_schema: dict[str, Any] | None,
               expires_in: float | None, aid: str) -> Any:
        """The question's decided request; pauses the run while there is none."""
        scope = self._scope
        check_serializable(payload, f"the payload of question {question!r} in node "
                                    f"{self.node!r}")
        digest = question_digest(question, payload, json_schema)
        with scope.reader() as r:
            req = r.approval(aid)
        waiting = {"type": Waiting.INPUT.value, "node_id": self.node, "approval_id": aid,
                   "question": question}
        if req is None:
            now = scope.clock()
            raise Paused(waiting, [ApprovalRequested(
                run_id=self.run_id, approval_id=aid, kind=Waiting.INPUT.value, node=self.node,
                task=self.task_id, action=question, payload=payload, digest=digest,
                state_version=scope.version, allowed=list(INPUT_DECISIONS), requested_at=now,
                expires_at=None if expires_in is None else now + expires_in,
                schema=json_schema,
            )])
        if req.digest != digest:
            raise Nondeterminism(self.node, self._asks - 1, f"question {req.action!r} "
                                 f"({req.digest[:19]})", f"question {question!r} ({digest[:19]})")
        if req.decision is None:
            if not expired(req, scope.clock()):
                raise Paused(waiting, [])
            scope.commit([decided(req, Decision.REJECT, by="bide", reason="expired",
                                  at=scope.clock())], task=self.task_id)
            with scope.reader() as r:
                req = r.approval(aid)
        return req

    # -- durable timers ----------------------------------------------------
    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` without holding a worker: the first call commits a timer and
        pauses the run (``SLEEPING``); a watcher resumes it when due, and then (or on any
        later run of the node) this returns at once. The due time is fixed by the first
        call, however late the node runs again.

        Raises:
            InvalidTimer: ``seconds`` is negative, NaN or not a number.
        """
        self._check_open("sleep")
        until = timers.after(seconds, self._scope.clock())
        self._sleep(until, digest_of("sleep", seconds))

    def sleep_until(self, when: float | datetime) -> None:
        """``sleep`` until ``when``: epoch seconds or an aware datetime (a time already
        past returns at once, with nothing recorded).

        Raises:
            InvalidTimer: a naive datetime, a non-finite number, or not a time.
        """
        self._check_open("sleep_until")
        until = timers.epoch(when)
        self._sleep(until, digest_of("sleep_until", until))

    def _sleep(self, until: float, digest: str) -> None:
        scope = self._scope
        index = self._sleeps
        self._sleeps += 1
        tid = approval_id(self.run_id, self.task_id, index, kind=Waiting.TIMER.value)
        with scope.reader() as r:
            req = r.approval(tid)
        now = scope.clock()
        if req is None:
            if until <= now:
                return  # nothing to wait for: the same call returns at once on every run
            raise Paused(timers.waiting(self.node, until), [timers.request(
                run_id=self.run_id, timer_id=tid, node=self.node, task=self.task_id,
                digest=digest, until=until, version=scope.version, now=now)])
        if req.digest != digest:
            raise Nondeterminism(self.node, index, f"{req.action} ({req.digest[:19]})",
                                 f"a timer ({digest[:19]})")
        if req.decision is not None:
            return
        if now < (due := timers.until_of(req)):
            raise Paused(timers.waiting(self.node, due), [])
        faults.point("timer_due")
        scope.commit([decided(req, Decision.ELAPSED, by="bide", reason="due", at=now)],
                     task=self.task_id)
        faults.point("after_timer_elapsed")


    # -- signals -----------------------------------------------------------
    def wait_for(self, name: str, *, timeout: float | None = None, default: Any = None) -> Any:
        """Wait for signal ``name`` (``engine.signal``, ``bide signal``, an inbox file):
        its data. Pauses the run (``WAITING_SIGNAL``) while none is there; a signal
        sent before the wait is kept, and each wait takes the oldest one not yet taken.
        After ``timeout`` seconds (counted from the first call) returns ``default``.

        Waits of one node are numbered in call order, so each keeps the signal it took
        when the node runs again (engine/run/signals.py).
        """
        self._check_open("wait_for")
        if timeout is not None and timeout < 0:
            raise ValueError(f"wait_for({name!r}): timeout must be >= 0, not {timeout!r}")
        index = self._waits
        self._waits += 1
        return signals.wait(self._scope, self.node, self.task_id, index, name, timeout, default)

    # -- child runs --------------------------------------------------------
    def child(self, flow: str, input: dict[str, Any] | None = None, *,  # noqa: A002
              key: str | None = None) -> dict[str, Any]:
        """Run flow ``flow`` (registered on this engine) as a child run with ``input`` as
        its state, and return its final state once it is DONE. The first call starts the
        child and pauses this run (``WAITING_CHILD``) until it ends; a watcher runs it
        (or, with none, ``engine.start``/``resume`` run it in the same worker).

        The child's id is derived from this run and the call (the node's task and the
        call's index among its ``child`` calls, or ``key``), so running the node again
        never starts a second one.

        Raises:
            ChildFailed: the child ended FAILED or CANCELLED (the node may catch it).
            UnknownFlow, InvalidChild: a flow this engine does not serve, a bad key or
                input, or runs nested too deep; nothing is started.
        """
        self._check_open("child")
        index = self._children
        self._children += 1
        return children.child(self._scope, self.node, self.task_id, index, flow, input, key)

    async def achild(self, flow: str, input: dict[str, Any] | None = None, *,  # noqa: A002
                     key: str | None = None) -> dict[str, Any]:
        """``child`` for async nodes: its store reads run off the event loop."""
        self._check_open("child")
        index = self._children
        self._children += 1
        return await off_loop(children.child, self._scope, self.node, self.task_id, index,
                              flow, input, key)

    # -- tools -------------------------------------------------------------
    def tool(self, t: Tool[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call a declared tool through the intent log; returns its (recorded) result.

        An async tool (or one with an async reconciler) must be awaited with
        ``ctx.atool``; that is refused here before anything is recorded.
        """
        self._check_open("tool")
        if not isinstance(t, Tool):
            raise NotATool(t)
        if t.needs_await:
            raise ToolNeedsAwait(t.name, self.node)
        return self._call(t, self._next_index(), args, kwargs, None)

    async def atool(self, t: Tool[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``ctx.tool`` for async nodes: the same intent log, awaited.

        A plain tool runs in a thread and an async tool on this event loop, so
        neither blocks the loop; several ``atool`` calls (or nodes) overlap. The
        call's index is taken before the first await: calls started in the same
        order get the same intent keys on every run.
        """
        self._check_open("atool")
        if not isinstance(t, Tool):
            raise NotATool(t)
        index = self._next_index()
        loop = asyncio.get_running_loop()
        return await off_loop(self._call, t, index, args, kwargs, loop)

    def _next_index(self) -> int:
        index = self._calls
        self._calls += 1
        return index

    def _call(self, t: Tool[..., Any], index: int, args: tuple[Any, ...],
              kwargs: dict[str, Any], loop: asyncio.AbstractEventLoop | None) -> Any:
        if t.needs_approval:
            aid = approval_id(self.run_id, self.task_id, index, kind="tool")
            if not self._ask(f"call {t.name}", {"args": list(args), "kwargs": kwargs}, None, aid):
                raise ToolFailed(t.name, "Rejected", f"the call of {t.name} was rejected")
        result = _ToolCall(self, t, index, args, kwargs, loop).run()
        if type(result) in (str, bytes):
            self.results[index] = result
        return result

    def intent_key(self, index: int) -> str:
        return f"{self.task_id}#{index}"


def _convert(aid: str, value: Any, schema: Any) -> Any:
    """The recorded answer as the node's type (checked against its JSON Schema when it
    was recorded; this catches what JSON Schema cannot say, e.g. a date's format)."""
    try:
        return msgspec.convert(value, schema)
    except msgspec.ValidationError as exc:
        raise InvalidAnswer(aid, str(exc)) from None


def args_digest(tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Refuse arguments bide does not keep; digest the rest as bide always did.

    The digest hashes plain msgpack (``digest_bytes``), not the stored form, so
    every call accepted by an older bide keeps its digest (sets aside: see
    ``legacy_args_digest``) and a resumed run replays.
    """
    check_serializable([list(args), kwargs], f"the arguments of tool {tool!r}")
    blob = digest_bytes([list(args), sorted(kwargs.items())])
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:32]


def legacy_args_digest(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The digest an older bide recorded: sets hashed in this process's iteration order."""
    blob = pack([list(args), sorted(kwargs.items())])
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:32]


class _ToolCall:
    """One ``ctx.tool`` call: replay, reconcile, or prepare → call → complete."""

    def __init__(self, ctx: NodeContext, t: Tool[..., Any], index: int,
                 args: tuple[Any, ...], kwargs: dict[str, Any],
                 loop: asyncio.AbstractEventLoop | None) -> None:
        self.ctx, self.t, self.index, self.args, self.kwargs = ctx, t, index, args, kwargs
        self.loop = loop  # set for ctx.atool: async tools and reconcilers run on it
        self.scope = ctx._scope
        self.key = ctx.intent_key(index)
        self.idem = idempotency_key(ctx.run_id, self.key)
        self.digest = args_digest(t.name, args, kwargs)
        self.prepared_at: float | None = None  # when this process prepared the call

    def run(self) -> Any:
        trace = self.scope.trace
        if trace is None:
            return self._run()
        from .tracing import tool_span  # a traced engine has OpenTelemetry loaded already
        with tool_span(trace.tracer, run_id=self.ctx.run_id, node=self.ctx.node,
                       tool=self.t.name, key=self.key, idempotency_key=self.idem):
            return self._run()

    def _run(self) -> Any:
        with self.scope.reader() as r:
            known = r.intent(self.ctx.run_id, self.key)
        if known is None or faults.switch("no_intent_replay"):
            return self._call(attempt=1 if known is None else known.attempts + 1)
        self._check_same_call(known)
        match known.status:
            case IntentStatus.COMPLETED:
                return known.result
            case IntentStatus.FAILED:
                raise ToolFailed(self.t.name, known.error_type, known.error)
            case IntentStatus.RESOLVED:
                return self._resolved(known)
        return self._unknown(known)

    def _check_same_call(self, known: IntentState) -> None:
        same_args = known.args_digest in (self.digest,
                                          legacy_args_digest(self.args, self.kwargs))
        if known.tool != self.t.name or not same_args:
            raise Nondeterminism(
                self.ctx.node, self.index,
                f"{known.tool}(args {known.args_digest[7:19]})",
                f"{self.t.name}(args {self.digest[7:19]})",
            )

    def _resolved(self, known: IntentState) -> Any:
        if known.decision == Decision.MARK_DONE:
            return known.result
        if known.decision == Decision.ABORT:
            raise ReconciliationAborted(self.t.name, self.key, known.by, known.reason)
        return self._call(attempt=known.attempts + 1)  # Decision.RETRY

    def _unknown(self, known: IntentState) -> Any:
        """The tool may or may not have run. Never guess for a non-idempotent tool."""
        reconcile_error = None
        if self.t.reconcile is not None:
            try:
                outcome = _invoke(self.t.reconcile, (self.idem, *self.args), self.kwargs,
                                  self.loop)
            except Exception as exc:  # a reconciler's failure means "unknown"; keep why
                outcome, reconcile_error = Outcome.unknown(), f"{type(exc).__name__}: {exc}"
            if outcome.status == "done":
                self._complete(known.attempts, ok=True, result=outcome.result, via="reconcile")
                return outcome.result
            if outcome.status == "not_done":
                return self._call(attempt=known.attempts + 1)
        if self.t.idempotent:
            return self._call(attempt=known.attempts + 1)
        # one request per attempt in doubt: a "retry" that dies again asks again
        aid = approval_id(self.ctx.run_id, self.ctx.task_id, self.index,
                          kind=f"reconcile@{known.attempts}")
        shown = _preview(self.args, self.kwargs)  # what the decider judges by, as bide log
        waiting = {"type": "reconciliation", "node_id": self.ctx.node, "approval_id": aid,
                   "tool": self.t.name, "intent": self.key, "args_preview": shown}
        with self.scope.reader() as r:
            if r.approval(aid) is not None:
                raise Paused(waiting, [])  # already asked; still undecided
        payload = {"tool": self.t.name, "intent": self.key, "idempotency_key": self.idem,
                   "args_digest": self.digest, "args_preview": shown, "attempts": known.attempts,
                   "reconcile_error": reconcile_error}
        raise Paused(waiting, [ApprovalRequested(
            run_id=self.ctx.run_id, approval_id=aid, kind="reconciliation", node=self.ctx.node,
            task=self.ctx.task_id, action=f"reconcile {self.t.name}", payload=payload,
            digest=digest_of(f"reconcile {self.t.name}", payload), state_version=self.scope.version,
            allowed=list(RECONCILE_DECISIONS), tool=self.t.name, intent=self.key,
            requested_at=self.scope.clock(),
        )])

    def _call(self, attempt: int) -> Any:
        t = self.t
        kwargs = dict(self.kwargs)
        if t.accepts_key:
            kwargs["idempotency_key"] = self.idem
        if t.accepts_token:
            kwargs["fencing_token"] = self.scope.token
        tries = 0
        while True:
            self._prepare(attempt)
            self._lease_proven(attempt)
            try:
                result = _invoke(t.fn, self.args, kwargs, self.loop)
            except Exception as exc:
                faults.point("after_tool_effect")
                self._complete(attempt, ok=False, error=str(exc), error_type=type(exc).__name__)
                if tries >= t.retries:
                    raise ToolFailed(t.name, type(exc).__name__, str(exc)) from exc
                time.sleep(t.backoff * (2 ** tries))
                tries += 1
                attempt += 1
                continue
            faults.point("after_tool_effect")
            try:
                check_serializable(result, f"the result of tool {t.name!r}")
            except NotSerializable as exc:
                self._complete(attempt, ok=False, error=str(exc), error_type="NotSerializable")
                raise
            self._complete(attempt, ok=True, result=result)
            if self.scope.policy.tool_outcomes == "at_return":
                self._lease_proven(attempt, called=True)
            return result

    def _lease_proven(self, attempt: int, *, called: bool = False) -> None:
        """Go on only on a lease this worker can prove live (engine/run/lease_clock.py).

        Before the call (``called`` False): the prepare's commit may have come back
        after the lease ended and another worker settled the call and made it. The
        call is not made; if the lease is still ours after all (the fence decides),
        the call is recorded as never made (decided ``retry`` by bide), so whoever
        resumes makes it without asking anyone. After the outcome's commit: it is
        durable, and the worker stops before doing anything more.

        Raises:
            LeaseUnproven: the lease's trusted deadline has passed.
        """
        lease = self.scope.lease
        if lease is None or lease.alive() or faults.switch("no_lease_deadline"):
            return
        late = lease.late_by()
        what = (f"after the outcome of {self.t.name} ({self.key}) was committed" if called
                else f"when the prepare of {self.t.name} ({self.key}) returned")
        log.warning("run %s: lease token %s could not be proven live %s (%.2fs late); "
                    "%s", self.ctx.run_id, self.scope.token, what, late,
                    "stopping" if called else "the tool is NOT called")
        if not called:
            self._never_called(attempt)
        raise LeaseUnproven(self.ctx.run_id, self.scope.token, what, late)

    def _never_called(self, attempt: int) -> None:
        """Record, under the fence, that this prepared attempt was never called."""
        aid = approval_id(self.ctx.run_id, self.ctx.task_id, self.index,
                          kind=f"reconcile@{attempt}")
        payload = {"tool": self.t.name, "intent": self.key, "idempotency_key": self.idem,
                   "args_digest": self.digest, "attempts": attempt}
        now = self.scope.clock()
        reason = "never called: the worker could not prove its lease when the prepare returned"
        try:
            self.scope.commit([
                ApprovalRequested(
                    run_id=self.ctx.run_id, approval_id=aid, kind="reconciliation",
                    node=self.ctx.node, task=self.ctx.task_id, action=f"reconcile {self.t.name}",
                    payload=payload, digest=digest_of(f"reconcile {self.t.name}", payload),
                    state_version=self.scope.version, allowed=list(RECONCILE_DECISIONS),
                    tool=self.t.name, intent=self.key, requested_at=now),
                ApprovalDecided(run_id=self.ctx.run_id, approval_id=aid,
                                decision=Decision.RETRY, by="bide", reason=reason, at=now),
            ], task=self.ctx.task_id)
        except StaleLease:
            pass  # another worker holds the run: the call is theirs to settle (outcome unknown)

    def _prepare(self, attempt: int) -> None:
        faults.point("before_intent_prepared")
        ctx = self.ctx
        preview = _preview(self.args, self.kwargs, STORED_PREVIEW)
        digest = compact_digest(self.digest)
        assert digest is not None, self.digest  # args_digest always gives sha256: + 32 hex
        self.prepared_at = self.scope.clock()
        self.scope.commit([IntentPrepared(
            run_id=ctx.run_id, task=ctx.task_id, index=self.index, tool=self.t.name,
            digest=digest, attempt=attempt, args_preview=preview, at=self.prepared_at,
        )], task=ctx.task_id)
        faults.point("after_intent_prepared")

    def _complete(self, attempt: int, **fields: Any) -> None:
        """Hold the outcome: it rides in the task's next commit (engine/run/held.py).

        Its time is stored as the milliseconds since this call's prepare (``took``,
        a byte or two) when there is one and the clock did not go back."""
        now = self.scope.clock()
        took = None if self.prepared_at is None else round((now - self.prepared_at) * 1000)
        when = {"at": now} if took is None or took < 0 else {"took": took}
        self.scope.hold(self.ctx.task_id, IntentCompleted(
            run_id=self.ctx.run_id, task=self.ctx.task_id, index=self.index, attempt=attempt,
            **when, **fields))


def _invoke(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
            loop: asyncio.AbstractEventLoop | None) -> Any:
    """Call ``fn``; a coroutine function is awaited on ``loop`` (this thread waits)."""
    if loop is not None and inspect.iscoroutinefunction(fn):
        return on_loop(loop, fn(*args, **kwargs))
    return fn(*args, **kwargs)


# The characters of a call's arguments its IntentPrepared keeps for ``bide log``: enough
# to tell calls apart, written once per call (a decider sees 60, from the live call).
STORED_PREVIEW = 32


def _preview(args: tuple[Any, ...], kwargs: dict[str, Any], limit: int = 60) -> str:
    """What a decider sees of a call's arguments (``limit`` characters)."""
    text = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return text if len(text) <= limit else text[: limit - 1] + "…"
