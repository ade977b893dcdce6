"""Tools of a LangGraph graph through bide's write-ahead intent log: ``durable_tool``.

LangGraph re-runs a whole node when a thread resumes from its last checkpoint, so a
tool called in it runs again unless something remembers it ran. A wrapped tool
records its intent (``IntentPrepared``) before the call and its outcome
(``IntentCompleted``) before it returns, durable at return as ``ctx.tool``'s are, in
the thread's own bide run. The key is what a re-run of the same step reproduces:
the thread, the step, the node, LangGraph's task id (derived from the checkpoint
and the node's path) and the model's ``tool_call_id`` for a call ``ToolNode`` makes,
or the call's order within the task for a plain call in a node (the order resets
when LangGraph retries the node, as its own interrupt counter does).

On a re-run a call with a recorded result returns it without running again (a
``ToolMessage`` rebuilt for the current call); a call that raised runs again (an
error means no effect: give a tool whose error may follow an effect a reconciler or
make it idempotent); a call with no outcome is *outcome unknown*: the tool's
reconciler decides, an idempotent tool is repeated with the same idempotency key,
and any other stops the graph with an interrupt (``DurableCall.offered``) that asks a
person through the inbox (``interrupts.py``), whose ``mark_done``/``retry``/``abort`` folds into the
intent as a flow's reconciliation does. Arguments that changed on replay are
refused (``Nondeterminism``, naming both sides).

Under a watcher's lease (``held.py``) every record is fenced by its token and the
tool is called only on a lease the worker can prove live.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import hashlib
import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...formats import (
    ApprovalDecided,
    ApprovalRequested,
    IntentCompleted,
    IntentPrepared,
    check_serializable,
)
from ...formats.errors import NotSerializable
from ...formats.records import compact_digest, idempotency_key
from ..base import faults
from ..base.errors import (
    LeaseUnproven,
    MissingExtra,
    Nondeterminism,
    ReconciliationAborted,
    StaleLease,
    ToolOutsideNode,
)
from ..base.vocabulary import RECONCILE_DECISIONS, Decision, IntentStatus
from ..run.approvals import approval_id, digest_of
from ..run.context import STORED_PREVIEW, args_digest
from ..run.tools import Outcome, Tool
from ..storage.index import IntentState
from .held import Held, held_for
from .interrupts import BIDE, RECONCILIATION

try:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool
    from langgraph.config import get_config
    from langgraph.errors import GraphBubbleUp, GraphInterrupt
    from langgraph.types import Interrupt
except ModuleNotFoundError as exc:
    raise MissingExtra("bide.langgraph.durable_tool", extra="langgraph",
                       module=exc.name or "langgraph") from exc

_TASK_ID = "__pregel_task_id"
_SCRATCHPAD = "__pregel_scratchpad"
_CHECKPOINTER = "__pregel_checkpointer"
_CHECKPOINT_MAP = "checkpoint_map"
_RESUME_MAP = "__pregel_resume_map"
_NOTHING = object()


@dataclass(frozen=True)
class CallInfo:
    """The call a bide tool is making now (``current_call``), for the tool's own code."""

    thread: str
    key: str
    idempotency_key: str
    fencing_token: int | None  # None: the thread's caller runs it, with no lease


_CURRENT: contextvars.ContextVar[CallInfo | None] = contextvars.ContextVar(
    "bide_lg_call", default=None)


def current_call() -> CallInfo:
    """The bide tool call in progress in this context: its idempotency key and fencing
    token, to hand to a system that checks them.

    Raises:
        ToolOutsideNode: no bide tool is running here.
    """
    found = _CURRENT.get()
    if found is None:
        raise ToolOutsideNode("bide.langgraph.current_call()")
    return found


# -- where a call is -------------------------------------------------------------------
@dataclass
class _Counter:
    scratchpad: Any
    counter: Any = field(default_factory=itertools.count)


_ORDER: contextvars.ContextVar[_Counter | None] = contextvars.ContextVar(
    "bide_lg_order", default=None)


@dataclass(frozen=True)
class Where:
    """A call's place in the thread: what its intent key is made of, and the store."""

    saver: Any
    thread: str
    task: str  # bide's task of the intent: "<step>:<node>:<LangGraph task id>[/<call id>]"
    index: int
    node: str
    checkpoints: tuple[tuple[str, str], ...] = ()  # (ns, id) the task runs from

    @property
    def key(self) -> str:
        return f"{self.task}#{self.index}"


def locate(config: Any, tool: str, call_id: str | None) -> Where:
    """Where a call made under ``config`` (a node's, or a tool's inside ``ToolNode``) is.

    Raises:
        ToolOutsideNode: not inside a node of a graph whose checkpointer is a BideSaver.
    """
    conf = (config or {}).get("configurable") or {}
    saver = conf.get(_CHECKPOINTER)
    task_id = conf.get(_TASK_ID)
    if not getattr(saver, "is_bide_saver", False) or task_id is None or "thread_id" not in conf:
        raise ToolOutsideNode(f"{tool} (a bide tool runs inside a node of a graph compiled "
                              "with a BideSaver, invoked with a thread_id)")
    meta = (config or {}).get("metadata") or {}
    node, step = str(meta.get("langgraph_node", "")), meta.get("langgraph_step", 0)
    task = f"{step}:{node}:{task_id}"
    # the checkpoints the task's id is derived from: they must be durable before its call
    # (LangGraph's default durability saves a step's checkpoint while the next step runs;
    # lost, the resume would run the step before again, under other task ids)
    froms = tuple((str(ns), str(cid)) for ns, cid in (conf.get(_CHECKPOINT_MAP) or {}).items()
                  if cid)
    thread = str(conf["thread_id"])
    if call_id is not None:
        return Where(saver, thread, f"{task}/{call_id}", 0, node, froms)
    return Where(saver, thread, task, _next_index(conf.get(_SCRATCHPAD)), node, froms)


def _next_index(scratchpad: Any) -> int:
    """The call's order in its task: counted per LangGraph scratchpad, which a node's
    retry replaces (so a retried node numbers its calls from 0 again)."""
    found = _ORDER.get()
    if found is None or found.scratchpad is not scratchpad:
        found = _Counter(scratchpad)
        _ORDER.set(found)
    return next(found.counter)


# -- what a call's result is stored as -------------------------------------------------
def stored_output(output: Any, serde: Any) -> Any:
    """A tool's output as bide keeps it: a ToolMessage as its content (and status,
    artifact), another value as itself, or through LangGraph's serializer when bide
    cannot keep it as it is."""
    if isinstance(output, ToolMessage):
        body = {"content": output.content, "status": output.status}
        if output.artifact is not None:
            body["artifact"] = output.artifact
        plain: Any = {"message": body}
    else:
        plain = {"value": output}
    try:
        check_serializable(plain, "a tool's output")
        return plain
    except NotSerializable:
        kind, data = serde.dumps_typed(output)
        return {"serde": kind, "data": base64.b64encode(data).decode()}


def loaded_output(stored: Any, serde: Any, call_id: str | None, name: str) -> Any:
    """What a recorded call returns on replay, for the call being made now."""
    if isinstance(stored, dict) and "message" in stored:
        body = stored["message"]
        if call_id is None:
            return body.get("content")
        return ToolMessage(content=body.get("content", ""), tool_call_id=call_id, name=name,
                           status=body.get("status", "success"), artifact=body.get("artifact"))
    if isinstance(stored, dict) and "serde" in stored:
        out = serde.loads_typed((stored["serde"], base64.b64decode(stored["data"])))
        if isinstance(out, ToolMessage) and call_id is not None:
            out.tool_call_id = call_id
        return out
    if isinstance(stored, dict) and "value" in stored:
        return stored["value"]
    return stored


def decided_output(result: Any, call_id: str | None, name: str) -> Any:
    """A person's ``mark_done`` result as the call's output."""
    if call_id is None:
        return result
    content = result if isinstance(result, str) else repr(result)
    return ToolMessage(content=content, tool_call_id=call_id, name=name)


# -- one call ----------------------------------------------------------------------------
def _digest(tool: str, args: dict[str, Any]) -> str:
    try:
        return args_digest(tool, (), args)
    except Exception:  # an argument bide does not keep (a model object): by its repr
        import hashlib
        return "sha256:" + hashlib.sha256(repr(sorted(args.items())).encode()).hexdigest()[:32]


def _preview(args: dict[str, Any], limit: int) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Plan:
    """What a call does next: replay an outcome, make the call, or ask a person."""

    what: str  # "replay" | "decided" | "call" | "reconcile" | "ask"
    attempt: int = 1
    value: Any = None
    known: IntentState | None = None


class DurableCall:
    """One call of a bide tool: replay, reconcile, ask, or prepare → call → complete."""

    def __init__(self, where: Where, tool: str, args: dict[str, Any], *,
                 idempotent: bool, reconcile: Callable[..., Any] | None,
                 call_id: str | None) -> None:
        self.where, self.tool, self.args = where, tool, args
        self.idempotent, self.reconcile, self.call_id = idempotent, reconcile, call_id
        self.store = where.saver.threads.store
        self.serde = where.saver.serde
        self.key = where.key
        self.idem = idempotency_key(where.thread, self.key)
        self.digest = _digest(tool, args)
        self.held: Held | None = held_for(where.thread)
        self.prepared_at: float | None = None
        self._offered: set[str] = set()  # the questions whose resume value this run took

    @property
    def fence(self) -> tuple[str, int] | None:
        return None if self.held is None else (self.held.run_id, self.held.token)

    def info(self) -> CallInfo:
        return CallInfo(self.where.thread, self.key, self.idem,
                        None if self.held is None else self.held.token)

    # -- reading what is known ------------------------------------------------------
    def plan(self) -> _Plan:
        with self.store.reader() as r:
            known = r.intent(self.where.thread, self.key)
        if known is None or faults.switch("no_intent_replay"):
            return _Plan("call", 1 if known is None else known.attempts + 1)
        if known.tool != self.tool or known.args_digest != self.digest:
            raise Nondeterminism(self.where.node, self.where.index,
                                 f"{known.tool}(args {known.args_digest[7:19]})",
                                 f"{self.tool}(args {self.digest[7:19]})")
        match known.status:
            case IntentStatus.COMPLETED:
                return _Plan("replay", value=known.result)
            case IntentStatus.FAILED:
                return _Plan("call", known.attempts + 1)
            case IntentStatus.RESOLVED:
                if known.decision == Decision.MARK_DONE:
                    return _Plan("decided", value=known.result)
                if known.decision == Decision.ABORT:
                    raise ReconciliationAborted(self.tool, self.key, known.by, known.reason)
                return _Plan("call", known.attempts + 1)
        if self.reconcile is not None:
            return _Plan("reconcile", known.attempts, known=known)
        if self.idempotent:
            return _Plan("call", known.attempts + 1)
        return _Plan("ask", known.attempts, known=known)

    def replayed(self, plan: _Plan) -> Any:
        if plan.what == "decided":
            return decided_output(plan.value, self.call_id, self.tool)
        return loaded_output(plan.value, self.serde, self.call_id, self.tool)

    def reconciled(self, plan: _Plan, outcome: Any) -> _Plan | None:
        """After the reconciler: the result to replay, or the call to make, or None (ask)."""
        if isinstance(outcome, Outcome) and outcome.status == "done":
            # the reconciler's result is the call's output, as a person's mark_done is
            # (a ToolMessage for a call ToolNode makes): kept and replayed as one
            value = stored_output(decided_output(outcome.result, self.call_id, self.tool),
                                  self.serde)
            self._commit([self._completed(plan.attempt, ok=True, result=value,
                                          via="reconcile")])
            return _Plan("replay", value=value)
        if isinstance(outcome, Outcome) and outcome.status == "not_done":
            return _Plan("call", plan.attempt + 1)
        if self.idempotent:
            return _Plan("call", plan.attempt + 1)
        return None

    def question(self, attempts: int) -> dict[str, Any]:
        """The value of the interrupt that asks a person about this call."""
        aid = approval_id(self.where.thread, self.where.task, self.where.index,
                          kind=f"reconcile@{attempts}")
        payload = {"tool": self.tool, "intent": self.key, "idempotency_key": self.idem,
                   "args_digest": self.digest, "args_preview": _preview(self.args, 60),
                   "attempts": attempts}
        return {BIDE: RECONCILIATION, "approval_id": aid, "tool": self.tool,
                "intent": self.key, "node": self.where.node, "payload": payload,
                "question": f"did {self.tool} ({self.key}) happen? mark_done, retry or abort"}

    def offered(self, attempts: int) -> Any:
        """The resume value given for this call's question, once per run of the task; or
        stop the graph with the question.

        Not LangGraph's ``interrupt()``: that matches resume values to a task's
        interrupts by their order and keeps each value for good, so a question bide asked
        once would take the answer meant for the tool's own ``interrupt()`` on every run
        after it was settled (in the store) and no longer asked. The question's interrupt
        id is its own, the answer is taken from the run's resume map (or a plain
        ``Command(resume=...)``) and recorded in the store, which is what a re-run reads.
        """
        question = self.question(attempts)
        iid = hashlib.blake2b(f"bide:{question['approval_id']}".encode(),
                              digest_size=16).hexdigest()
        if iid not in self._offered:
            self._offered.add(iid)
            conf = get_config().get("configurable", {})
            answer = (conf.get(_RESUME_MAP) or {}).get(iid, _NOTHING)
            scratchpad = conf.get(_SCRATCHPAD)
            if answer is _NOTHING and scratchpad is not None and \
                    scratchpad.get_null_resume(False) is not None:
                answer = scratchpad.get_null_resume(True)  # taken: no interrupt gets it
            if answer is not _NOTHING:
                return answer
        raise GraphInterrupt((Interrupt(value=question, id=iid),))

    def answered(self, answer: Any, attempts: int) -> None:
        """A resume value for this call's question given straight to LangGraph
        (``Command(resume={"decision": "retry", "approval_id": ...})``), not through
        bide: recorded as the decision, once. A value for another question (a resume
        value LangGraph kept from an earlier attempt) is ignored."""
        aid = self.question(attempts)["approval_id"]
        if not isinstance(answer, dict) or answer.get("approval_id") != aid or \
                answer.get("decision") not in RECONCILE_DECISIONS:
            return
        with self.store.reader() as r:
            req = r.approval(aid)
        if req is None or req.decision is not None:
            return
        self._commit([ApprovalDecided(
            run_id=self.where.thread, approval_id=aid, decision=answer["decision"],
            by=str(answer.get("by") or "langgraph"), reason=answer.get("reason"),
            result=answer.get("result"), at=self.store.clock())])

    # -- writing ----------------------------------------------------------------------
    def prepare(self, attempt: int) -> None:
        self.where.saver.threads.wait_stored(self.where.thread, self.where.checkpoints,
                                             check=self._still_held)
        faults.point("before_intent_prepared")
        digest = compact_digest(self.digest)
        assert digest is not None, self.digest
        self.prepared_at = self.store.clock()
        task, index = self.where.task, self.where.index
        self._commit([IntentPrepared(
            run_id=self.where.thread, task=task, index=index, tool=self.tool, digest=digest,
            attempt=attempt, args_preview=_preview(self.args, STORED_PREVIEW),
            at=self.prepared_at)])
        faults.point("after_intent_prepared")
        self._lease_proven(attempt, called=False)

    def complete(self, attempt: int, output: Any) -> None:
        faults.point("after_tool_effect")
        self._commit([self._completed(attempt, ok=True,
                                      result=stored_output(output, self.serde))])
        faults.point("after_intent_completed")
        self._lease_proven(attempt, called=True)

    def failed(self, attempt: int, exc: BaseException) -> None:
        faults.point("after_tool_effect")
        interrupted = isinstance(exc, GraphBubbleUp)
        self._commit([self._completed(
            attempt, ok=False, error=str(exc)[:500] or type(exc).__name__,
            error_type=type(exc).__name__, via="interrupt" if interrupted else "call")])

    def _completed(self, attempt: int, **fields: Any) -> IntentCompleted:
        now = self.store.clock()
        took = None if self.prepared_at is None else round((now - self.prepared_at) * 1000)
        when = {"at": now} if took is None or took < 0 else {"took": took}
        return IntentCompleted(run_id=self.where.thread, task=self.where.task,
                               index=self.where.index, attempt=attempt, **when, **fields)

    def _commit(self, records: list[Any]) -> None:
        with self.where.saver.threads.lock:
            self.store.commit(records, fence=self.fence)

    def _still_held(self) -> None:
        """While a task waits for its checkpoint: a worker whose lease ended stops."""
        held = self.held
        if held is not None and not held.lease.alive():
            raise LeaseUnproven(self.where.thread, held.token, "while its task's checkpoint "
                                "was being stored", held.lease.late_by())

    def _lease_proven(self, attempt: int, *, called: bool) -> None:
        """As ``ctx.tool``: no call, and nothing more after an outcome, on a lease the
        worker cannot prove live (engine/run/context.py ``_lease_proven``)."""
        held = self.held
        if held is None or held.lease.alive() or faults.switch("no_lease_deadline"):
            return
        what = (f"after the outcome of {self.tool} ({self.key}) was committed" if called
                else f"when the prepare of {self.tool} ({self.key}) returned")
        if not called:
            self._never_called(attempt)
        raise LeaseUnproven(self.where.thread, held.token, what, held.lease.late_by())

    def _never_called(self, attempt: int) -> None:
        aid = approval_id(self.where.thread, self.where.task, self.where.index,
                          kind=f"reconcile@{attempt}")
        payload = {"tool": self.tool, "intent": self.key, "idempotency_key": self.idem,
                   "args_digest": self.digest, "attempts": attempt}
        now = self.store.clock()
        try:
            self._commit([
                ApprovalRequested(
                    run_id=self.where.thread, approval_id=aid, kind="reconciliation",
                    node=self.where.node, task=self.where.task, action=f"reconcile {self.tool}",
                    payload=payload, digest=digest_of(f"reconcile {self.tool}", payload),
                    allowed=list(RECONCILE_DECISIONS), tool=self.tool, intent=self.key,
                    requested_at=now),
                ApprovalDecided(run_id=self.where.thread, approval_id=aid,
                                decision=Decision.RETRY, by="bide", at=now,
                                reason="never called: the worker could not prove its lease "
                                       "when the prepare returned")])
        except StaleLease:
            pass  # another worker holds the thread: the call is theirs to settle

    # -- the two ways to run it -------------------------------------------------------
    def run(self, effect: Callable[[], Any]) -> Any:
        while True:
            plan = self.plan()
            if plan.what == "reconcile":
                assert self.reconcile is not None and plan.known is not None
                plan = self.reconciled(plan, _reconcile(self.reconcile, self.idem, self.args)) \
                    or _Plan("ask", plan.attempt)
            if plan.what in ("replay", "decided"):
                return self.replayed(plan)
            if plan.what == "ask":
                self.answered(self.offered(plan.attempt), plan.attempt)
                continue  # read the intent again (not answered: the next ask pauses)
            self.prepare(plan.attempt)
            token = _CURRENT.set(self.info())
            try:
                output = effect()
            except Exception as exc:  # raised: no effect (a kill or ^C leaves it unknown)
                self.failed(plan.attempt, exc)
                raise
            finally:
                _CURRENT.reset(token)
            self.complete(plan.attempt, output)
            return output

    async def arun(self, effect: Callable[[], Any]) -> Any:
        while True:
            plan = await asyncio.to_thread(self.plan)
            if plan.what == "reconcile":
                assert self.reconcile is not None
                found = self.reconcile(self.idem, **self.args)
                outcome = await found if inspect.isawaitable(found) else found
                settled = await asyncio.to_thread(self.reconciled, plan, outcome)
                plan = settled or _Plan("ask", plan.attempt)
            if plan.what in ("replay", "decided"):
                return self.replayed(plan)
            if plan.what == "ask":
                answer = self.offered(plan.attempt)
                await asyncio.to_thread(self.answered, answer, plan.attempt)
                continue
            await asyncio.to_thread(self.prepare, plan.attempt)
            token = _CURRENT.set(self.info())
            try:
                output = await effect()
            except Exception as exc:
                await asyncio.to_thread(self.failed, plan.attempt, exc)
                raise
            finally:
                _CURRENT.reset(token)
            await asyncio.to_thread(self.complete, plan.attempt, output)
            return output


def _reconcile(reconcile: Callable[..., Any], key: str, args: dict[str, Any]) -> Any:
    try:
        return reconcile(key, **args)
    except Exception:  # a reconciler's failure means "unknown"
        return Outcome.unknown()


# -- the wrappers ------------------------------------------------------------------------
def _options(target: Any, idempotent: bool | None,
             reconcile: Callable[..., Any] | None) -> tuple[bool, Callable[..., Any] | None]:
    if isinstance(target, Tool):  # a bide tool keeps its own declaration
        return (target.idempotent if idempotent is None else idempotent,
                reconcile or target.reconcile)
    return bool(idempotent), reconcile


class DurableFunction:
    """A plain function made a bide tool: call it in a node as you would the function
    (keyword or positional arguments); async functions are awaited."""

    def __init__(self, fn: Callable[..., Any], *, name: str, idempotent: bool,
                 reconcile: Callable[..., Any] | None) -> None:
        self.fn, self.name, self.idempotent, self.reconcile = fn, name, idempotent, reconcile
        self._signature = inspect.signature(fn)
        self._takes_key = "idempotency_key" in self._signature.parameters
        self._async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> DurableCall:
        bound = self._signature.bind_partial(*args, **kwargs).arguments
        bound.pop("idempotency_key", None)
        try:
            config = get_config()
        except RuntimeError:  # not inside a runnable (a node) at all
            config = None
        where = locate(config, self.name, None)
        return DurableCall(where, self.name, dict(bound), idempotent=self.idempotent,
                           reconcile=self.reconcile, call_id=None)

    def _kwargs(self, call: DurableCall, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "idempotency_key": call.idem} if self._takes_key else kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = self._call(args, kwargs)
        if self._async:
            async def go() -> Any:
                return await call.arun(lambda: self.fn(*args, **self._kwargs(call, kwargs)))
            return go()
        return call.run(lambda: self.fn(*args, **self._kwargs(call, kwargs)))

    def __repr__(self) -> str:
        return f"<bide LangGraph tool {self.name}>"


class BideTool(BaseTool):
    """A LangChain tool whose calls go through bide's intent log (``durable_tool``).

    It has the wrapped tool's name, description and argument schema, so ``ToolNode``,
    the prebuilt agent and a model's ``bind_tools`` treat it as that tool."""

    inner: BaseTool
    idempotent: bool = False
    reconcile: Any = None

    def __init__(self, inner: BaseTool, *, idempotent: bool = False,
                 reconcile: Callable[..., Any] | None = None) -> None:
        super().__init__(name=inner.name, description=inner.description,
                         args_schema=inner.args_schema, return_direct=inner.return_direct,
                         response_format=inner.response_format, inner=inner,
                         idempotent=idempotent, reconcile=reconcile)

    def _call_of(self, input: Any, config: Any) -> tuple[DurableCall, Any]:  # noqa: A002
        call_id = None
        args: Any = input
        if isinstance(input, dict) and input.get("type") == "tool_call":
            call_id, args = input.get("id"), input.get("args") or {}
        if not isinstance(args, dict):
            args = {"input": args}
        public = _public_args(self.inner)
        shown = {k: v for k, v in args.items() if public is None or k in public}
        from langchain_core.runnables.config import ensure_config
        where = locate(ensure_config(config), self.name, call_id)
        return DurableCall(where, self.name, shown, idempotent=self.idempotent,
                           reconcile=self.reconcile, call_id=call_id), input

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        call, given = self._call_of(input, config)
        return call.run(lambda: self.inner.invoke(given, config, **kwargs))

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        call, given = self._call_of(input, config)
        return await call.arun(lambda: self.inner.ainvoke(given, config, **kwargs))

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # invoke never comes here
        raise NotImplementedError("BideTool runs through invoke/ainvoke")


def _public_args(tool: BaseTool) -> set[str] | None:
    """The arguments a model gives (not those ToolNode injects: state, store, runtime)."""
    try:
        schema = tool.tool_call_schema
    except Exception:
        return None
    if isinstance(schema, dict):
        return set((schema.get("properties") or {}).keys())
    fields = getattr(schema, "model_fields", None)
    return None if fields is None else set(fields)


def durable_tool(target: Any = None, *, name: str | None = None,
                 idempotent: bool | None = None,
                 reconcile: Callable[..., Any] | None = None) -> Any:
    """Make a tool's calls exactly-once for a LangGraph graph on a ``BideSaver``.

    ``target``: a LangChain tool (``@tool``, a ``BaseTool``: the result is a
    ``BaseTool`` for ``ToolNode`` and the prebuilt agent), a plain function or a bide
    ``Tool`` (the result is called like the function, inside a node). Usable as a
    decorator, with or without options.

    Args:
        idempotent: safe to repeat with the same idempotency key
            (``current_call().idempotency_key``, or an ``idempotency_key`` parameter of
            a plain function): an outcome unknown after a crash repeats it.
        reconcile: ``reconcile(idempotency_key, **args) -> bide.Outcome`` asks the world
            whether a call whose outcome is unknown happened.
    """
    if target is None:
        return functools.partial(durable_tool, name=name, idempotent=idempotent,
                                 reconcile=reconcile)
    idem, rec = _options(target, idempotent, reconcile)
    if isinstance(target, BideTool | DurableFunction):
        return target
    if isinstance(target, BaseTool):
        return BideTool(target, idempotent=idem, reconcile=rec)
    fn = target.fn if isinstance(target, Tool) else target
    if not callable(fn):
        raise TypeError(f"durable_tool takes a LangChain tool, a function or a bide Tool, "
                        f"not {type(target).__name__}")
    label = name or (target.name if isinstance(target, Tool) else fn.__name__)
    return DurableFunction(fn, name=label, idempotent=idem, reconcile=rec)


def durable_tools(tools: list[Any], **options: Any) -> list[Any]:
    """``durable_tool`` of each (the list to hand to ``ToolNode`` or the prebuilt agent)."""
    return [durable_tool(t, **options) for t in tools]

