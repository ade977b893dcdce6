"""A LangGraph ``interrupt()`` as a request in bide's inbox, and a decision as its resume value.

When a thread stops at ``interrupt(value)`` LangGraph hands the saver an
``__interrupt__`` write; the saver records, in the same commit, one
``ApprovalRequested`` per interrupt (``requests``), so the process may exit at once:
the request shows in ``bide pending``, on the approvals page and in ``GET /pending``,
and is decided by a file, ``bide answer``/``approve`` or ``POST /decisions`` under the
same checks (digest, signing, expiry) as a flow's. A watcher that has the graph
resumes the thread with ``Command(resume={interrupt id: resume_value(...)})`` once
every interrupt it stopped at is settled (``engine/langgraph/runner.py``).

An interrupt is a question (kind ``input``): ``answer`` resumes with the answer's
value, ``approve``/``reject`` (and an expiry, as a rejection) with a small dict
saying so. One raised by LangChain's ``HumanInTheLoopMiddleware`` is a review
(kind ``approval``, ``engine/run/reviews.py``): every way of deciding it resumes
with HITL's own decisions, and a door refuses what its review configs do not allow.
An interrupt a bide tool raised about a call whose outcome is unknown
(``engine/langgraph/tools.py``) is a reconciliation instead, with the tool and its
intent, decided ``mark_done``/``retry``/``abort`` like a flow's.

The request's id is derived from the thread, LangGraph's task and interrupt ids and
the digest of what was shown: the same interrupt asked again (a re-run of its node)
finds its request; one whose value changed is a new request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...formats import ApprovalRequested, check_serializable
from ...formats.errors import NotSerializable
from ..base.vocabulary import RECONCILE_DECISIONS, Decision, Waiting, pause_status
from ..run import reviews
from ..run.approvals import approval_id, digest_of, question_digest
from ..run.run_view import expired
from ..storage.index import ApprovalState
from ..storage.store import Reader

BIDE = "__bide__"  # marks the value of an interrupt a bide tool raised
RECONCILIATION = "reconciliation"
INTERRUPT_DECISIONS = (Decision.ANSWER.value, Decision.APPROVE.value, Decision.REJECT.value)
_PULL = re.compile(r"__pregel_pull, ([^,]+)")
_PUSH = re.compile(r"~__pregel_push, (\d+)(?:,|$)")


@dataclass
class Asked:
    """What one ``__interrupt__`` write asks: new requests, every request id, the status."""

    records: list[ApprovalRequested]
    ids: list[str]
    status: str


def node_of_path(task_path: str) -> str:
    """The node of a LangGraph task path (``~__pregel_pull, agent``); "" for a pushed task."""
    found = _PULL.search(task_path)
    return found.group(1).strip() if found else ""


def pushed_index(task_path: str) -> int | None:
    """The index of a pushed task's ``Send`` in its checkpoint's tasks channel
    (``~__pregel_push, 0000000002, ...``), or None for another kind of task."""
    found = _PUSH.match(task_path)
    return int(found.group(1)) if found else None


def shown(value: Any) -> Any:
    """What a person is shown of an interrupt's value: the value, if bide can store it
    as it is; else its ``repr`` (never stored half)."""
    try:
        check_serializable(value, "the interrupt's value")
        return value
    except NotSerializable:
        return {"repr": repr(value)[:2000]}


def question_of(value: Any) -> str:
    """The question a request shows: the value if it is text, a dict's ``question`` (or
    ``message``), else a plain phrase (the request names its node beside it)."""
    if isinstance(value, str):
        return value[:500]
    if isinstance(value, dict):
        for key in ("question", "message", "description"):
            if isinstance(value.get(key), str):
                return value[key][:500]
    return "answer the graph's interrupt"


def is_reconciliation(value: Any) -> bool:
    return isinstance(value, dict) and value.get(BIDE) == RECONCILIATION


def interrupt_approval_id(thread: str, task_id: str, interrupt_id: str, digest: str) -> str:
    return approval_id(thread, task_id, 0, kind=f"interrupt:{interrupt_id}:{digest[7:23]}")


def requests(r: Reader, *, thread: str, task_id: str, task_path: str, interrupts: Iterable[Any],
             state_version: int, now: float, ttl: float | None, node: str = "") -> Asked:
    """The requests for a task's interrupts (those not recorded yet as ``records``);
    ``node``: the task's node when its path does not say (a pushed task's)."""
    node = node_of_path(task_path) or node
    records: list[ApprovalRequested] = []
    ids: list[str] = []
    kinds: set[str] = set()
    for found in interrupts:
        value = getattr(found, "value", None)
        if isinstance(value, dict) and is_reconciliation(value):
            req = _reconciliation(thread, task_id, node, value, state_version, now)
        else:
            req = _question(thread, task_id, node, found, value, state_version, now, ttl)
        kinds.add(req.kind)
        ids.append(req.approval_id)
        if r.approval(req.approval_id) is None and all(
                q.approval_id != req.approval_id for q in records):
            records.append(req)
    return Asked(records, ids, pause_status(kinds).value)


def _question(thread: str, task_id: str, node: str, found: Any, value: Any, state_version: int,
              now: float, ttl: float | None) -> ApprovalRequested:
    """A plain interrupt's question, or a HITL review (``reviews.py``): its kind, what it
    allows, the schema of its answer and whether it may expire follow its review."""
    payload = shown(value)
    question = question_of(value)
    schema = _schema(found)
    digest = question_digest(question, payload, schema)  # the id binds what was shown
    review = reviews.review_of(payload, schema)
    expires = None if ttl is None or (review is not None and not review.can_expire()) \
        else now + ttl
    return ApprovalRequested(
        run_id=thread, approval_id=interrupt_approval_id(thread, task_id, str(found.id), digest),
        kind=Waiting.INPUT.value if review is None else Waiting.APPROVAL.value, node=node,
        task=task_id, action=question if review is None else review.summary(), payload=payload,
        digest=digest, state_version=state_version,
        allowed=list(INTERRUPT_DECISIONS) if review is None else review.decisions(),
        requested_at=now, expires_at=expires,
        schema=schema if review is None else review.schema(schema))


def _reconciliation(thread: str, task_id: str, node: str, value: dict[str, Any],
                    state_version: int, now: float) -> ApprovalRequested:
    payload = value.get("payload")
    tool = str(value.get("tool"))
    action = f"reconcile {tool}"
    return ApprovalRequested(
        run_id=thread, approval_id=str(value["approval_id"]), kind=Waiting.RECONCILIATION.value,
        node=node or str(value.get("node") or ""), task=task_id, action=action, payload=payload,
        digest=digest_of(action, payload), state_version=state_version,
        allowed=list(RECONCILE_DECISIONS), tool=tool, intent=str(value.get("intent")),
        requested_at=now)


def approval_of(thread: str, found: Any, task_id: str) -> str:
    """The request id an interrupt LangGraph reports (``StateSnapshot.interrupts``) was
    recorded under, given the task that raised it."""
    value = getattr(found, "value", None)
    if isinstance(value, dict) and is_reconciliation(value):
        return str(value["approval_id"])
    digest = question_digest(question_of(value), shown(value), _schema(found))
    return interrupt_approval_id(thread, task_id, str(found.id), digest)


def _schema(found: Any) -> dict[str, Any] | None:
    schema = getattr(found, "response_schema", None)
    return schema if isinstance(schema, dict) else None


def resume_value(req: ApprovalState, now: float) -> tuple[bool, Any]:
    """``(settled, value)``: what the interrupt of ``req`` resumes with, once decided
    or expired (an expired request resumes as a rejection, as a flow's does); a HITL
    review's, in HITL's own shape whatever door decided it."""
    review = None if req.kind == Waiting.RECONCILIATION else reviews.review_of(
        req.payload, req.schema)
    if req.decision is None:
        if not expired(req, now):
            return False, None
        if review is not None:
            return True, review.resume(Decision.REJECT, "expired", None)
        return True, {"decision": Decision.REJECT.value, "by": "bide", "reason": "expired",
                      "approval_id": req.approval_id}
    if review is not None:
        return True, review.resume(req.decision, req.reason, req.result)
    if req.decision == Decision.ANSWER and req.kind == Waiting.INPUT:
        return True, req.result
    return True, {"decision": req.decision, "by": req.by, "reason": req.reason,
                  "result": req.result, "approval_id": req.approval_id}
