"""Approval requests: ids, digests, request files, and recording decisions."""

from __future__ import annotations

import hashlib
import os
import shlex
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...formats import ApprovalDecided, ApprovalRequested, digest_bytes, pack
from ..base.errors import (
    AlreadyDecided,
    DecisionNotAllowed,
    DecisionRefused,
    InvalidAnswer,
    UnknownApproval,
)
from ..base.permissions import private_dir
from ..base.render import to_json
from ..base.vocabulary import APPROVAL_DECISIONS, Decision, Waiting
from ..storage.index import ApprovalState
from ..storage.store import Reader
from . import reviews, value_schema
from .host import Doors as Doors  # re-exported: where decisions come in, beside them
from .run_view import expired


def approval_id(run_id: str, task: str, index: int, kind: str = "approve") -> str:
    """Stable across re-runs: the same node call asks under the same id."""
    blob = f"{run_id}\x00{task}\x00{kind}#{index}".encode()
    return "a-" + hashlib.sha256(blob).hexdigest()[:12]


def digest_of(action: str, payload: Any) -> str:
    """What a decision binds to: the action and its payload, canonically encoded."""
    return "sha256:" + hashlib.sha256(digest_bytes([action, payload])).hexdigest()


def question_digest(question: str, payload: Any, schema: dict[str, Any] | None) -> str:
    """What an answer binds to: the question, its payload and the schema of its answer."""
    return digest_of(question, {"payload": payload, "schema": schema})


def same_request(stored: str, action: str, payload: Any) -> bool:
    """Does a stored request digest match this ask? Also accepts the digest an older
    bide made (sets hashed in iteration order), so its pending requests still match."""
    return stored in (digest_of(action, payload),
                      "sha256:" + hashlib.sha256(pack([action, payload])).hexdigest())


def decision_file(req: ApprovalRequested | ApprovalState, decision: str) -> dict[str, Any]:
    body = {"approval_id": req.approval_id, "decision": decision, "by": "YOUR NAME",
            "reason": "why", "run_id": req.run_id, "digest": req.digest}
    if decision == Decision.ANSWER:  # a value of the schema's shape, to fill in
        del body["reason"]
        review = reviews.review_of(req.payload, req.schema)
        body["value"] = value_schema.example(req.schema) if review is None else review.template()
    return body


def approve_command(home: Path | str, req: ApprovalRequested) -> str:
    """The ``bide approve`` line that decides this request (its own decisions, not approve);
    ``bide answer`` for a question."""
    where = f"--home {shlex.quote(str(home))}"
    if req.kind == Waiting.INPUT:
        return (f"bide answer {req.approval_id} 'VALUE_JSON' {where} "
                f"(or bide approve {req.approval_id} --reject, to decline)")
    if reviews.review_of(req.payload, req.schema) is not None:  # HITL's: approve, or answer
        approve = f"bide approve {req.approval_id} [--reject] {where}, or " \
            if Decision.APPROVE in req.allowed or Decision.REJECT in req.allowed else ""
        return (f"{approve}bide answer {req.approval_id} --edit 'ARGS_JSON' | --respond TEXT | "
                f"'HITL_RESPONSE_JSON' {where}")
    if list(req.allowed) == list(APPROVAL_DECISIONS):
        return f"bide approve {req.approval_id} [--reject] {where}"
    return (f"bide approve {req.approval_id} --decision {'|'.join(req.allowed)} "
            f"[--result JSON with mark_done] {where}")


def write_request_file(doors: Doors, req: ApprovalRequested) -> Path | None:
    """``<requests>/<id>.json``: what is asked, and a decision file to copy (None: this
    engine writes no request files; a timer has none: nobody decides it)."""
    if doors.requests is None or req.kind == Waiting.TIMER:
        return None
    body = {
        "approval_id": req.approval_id,
        "kind": req.kind,
        "run_id": req.run_id,
        "node": req.node,
        "action": req.action,
        "payload": req.payload,
        "digest": req.digest,
        "allowed": req.allowed,
        "tool": req.tool,
        "intent": req.intent,
        "requested_at": req.requested_at,
        "expires_at": req.expires_at,
        "how_to_decide": (
            f"write one of the decision files below into {doors.inbox} (as a dot-file or "
            f"*.tmp, then rename it to *.json), or run: {approve_command(doors.home, req)}"
        ),
        "decision_files": [decision_file(req, d) for d in req.allowed],
    }
    if req.kind == Waiting.INPUT:
        body.update(question=req.action, schema=req.schema,
                    answer_file=decision_file(req, Decision.ANSWER))
    review = reviews.review_of(req.payload, req.schema)
    if review is not None:  # HITL's calls as a person reads them; its answer's schema
        body.update(review=review.shown(), schema=req.schema)
    return atomic_write_json(doors.requests / f"{req.approval_id}.json", body)


def request_of(state: ApprovalState) -> ApprovalRequested:
    """The request a stored approval was made from (its request file is written from it)."""
    return ApprovalRequested(
        run_id=state.run_id, approval_id=state.approval_id, kind=state.kind, node=state.node,
        task=state.task, action=state.action, payload=state.payload, digest=state.digest,
        state_version=state.state_version, allowed=state.allowed, tool=state.tool,
        intent=state.intent, requested_at=state.requested_at, expires_at=state.expires_at,
        schema=state.schema)


def write_missing_requests(doors: Doors, approvals: Iterable[ApprovalState],
                           now: float) -> list[Path]:
    """Request files for decisions still awaited whose file is not there.

    A worker killed between a pause's commit and its request file leaves the run
    waiting with nothing in ``requests/`` to show it (the record is in the store:
    ``bide pending``); a watcher writes such files again when it starts.
    """
    if doors.requests is None:
        return []
    written = []
    for state in approvals:
        if state.decision is not None or expired(state, now):
            continue
        if (doors.requests / f"{state.approval_id}.json").exists():
            continue
        path = write_request_file(doors, request_of(state))
        if path is not None:
            written.append(path)
    return written


def atomic_write_json(path: Path, body: Any) -> Path:
    """Write to a dot-file in the same directory, fsync, rename into place."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(to_json(body) + "\n")  # strict JSON, whatever the payload holds
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_decision(
    reader: Reader, approval_id: str, decision: str, *, now: float,
    run_id: str | None = None, digest: str | None = None, value: Any = None,
) -> tuple[ApprovalState, bool]:
    """Check a decision against its request inside the committing transaction.

    ``value``: an answer's value, checked against the question's schema (every door
    that records an answer comes through here, so none records one that does not fit).

    Returns:
        The request, and True if this exact decision was already recorded (a no-op).

    Raises:
        UnknownApproval, DecisionRefused (InvalidAnswer among them): with the reason.
    """
    req = reader.approval(approval_id)
    if req is None:
        raise UnknownApproval(approval_id)
    if decision not in req.allowed:
        raise DecisionNotAllowed(approval_id, req.kind, decision, list(req.allowed))
    if decision == Decision.ANSWER and (why := value_schema.problem(value, req.schema)):
        review = reviews.review_of(req.payload, req.schema)
        raise InvalidAnswer(approval_id, why, expected=None if review is None else
                            review.expected())
    if run_id is not None and run_id != req.run_id:
        raise DecisionRefused(approval_id, f"run_id {run_id!r} does not match the request's "
                              f"run {req.run_id!r}")
    if digest is not None and digest != req.digest:
        raise DecisionRefused(approval_id, "digest does not match the request (the action or "
                              "payload it approves is not the one waiting)")
    if req.decision is not None:
        if req.decision == decision and (decision != Decision.ANSWER or req.result == value):
            return req, True
        raise AlreadyDecided(approval_id, req.decision, req.by)
    if expired(req, now):
        raise DecisionRefused(approval_id, "the request expired")
    return req, False


def undecided(r: Reader, approval_id: str, decision: str, *, now: float,
              run_id: str | None = None, digest: str | None = None,
              value: Any = None) -> ApprovalState:
    """``check_decision``, with a decision already recorded refused too: whoever asks
    to decide again learns it was decided, and by whom."""
    req, again = check_decision(r, approval_id, decision, now=now, run_id=run_id,
                                digest=digest, value=value)
    if again:
        raise AlreadyDecided(approval_id, req.decision, req.by)
    return req


def decided(req: ApprovalState, decision: str, **fields: Any) -> ApprovalDecided:
    return ApprovalDecided(run_id=req.run_id, approval_id=req.approval_id, decision=decision,
                           **fields)
