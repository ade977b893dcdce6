"""What the read commands see: a run's snapshot, timeline, states, diffs and intents.

Every function reads one consistent snapshot (one read transaction) and returns
plain data (dicts, lists, JSON-ready), which the CLI prints as a table or as
JSON. Nothing here writes, so it all works while another process is writing.
"""

from __future__ import annotations

import time
from importlib import metadata
from typing import Any

import msgspec

from ...formats import (
    ApprovalDecided,
    ApprovalRequested,
    Checkpoint,
    ChildEnded,
    ChildOf,
    ChildStarted,
    CorruptRecord,
    IntentCompleted,
    IntentPrepared,
    LeaseAcquired,
    LeaseReleased,
    PendingWrite,
    Record,
    RecordError,
    RunCreated,
    SignalAwaited,
    SignalConsumed,
    SignalSent,
    StatusChanged,
)
from ..base.errors import LangGraphThread, UnknownRun
from ..base.errors import (
    UnknownKey as UnknownKey,  # its old home: `inspect.UnknownKey` keeps working
)
from ..base.errors import UnknownVersion as UnknownVersion  # its old home, still imported from here
from ..base.render import clip, due_text, first_line, preview, size
from ..base.vocabulary import IN_DOUBT, Decision, Status, Waiting
from ..human.in_doubt import waiting_with_preview
from ..run import children, reviews, signals, timers
from ..run.host import Host
from ..run.planned import sends_of
from ..run.run_view import RunView, owner_alive, status_reason
from ..run.send import labels_of, next_labels
from ..run.state import materialize
from ..storage.index import RunHead
from ..storage.store import Reader


def builtins(record: Record) -> dict[str, Any]:
    """A record as plain JSON-ready data (every field, defaults too), its type tag first."""
    return {"type": record.TYPE, **msgspec.to_builtins(record.view())}


def plain(struct: msgspec.Struct) -> dict[str, Any]:
    """Every field of a struct as JSON-ready data (``to_builtins`` alone omits defaults)."""
    return msgspec.to_builtins(msgspec.structs.asdict(struct))


def head_of(reader: Reader, run_id: str) -> RunHead:
    head = reader.head(run_id)
    if head is None:
        raise UnknownRun(run_id)
    return head


LANGGRAPH_FLOW = "langgraph"


def bide_head(reader: Reader, run_id: str, what: str) -> RunHead:
    """The head of a run of a bide flow (LangGraph threads have no bide checkpoints)."""
    head = head_of(reader, run_id)
    if head.flow == LANGGRAPH_FLOW:
        raise LangGraphThread(run_id, what)
    return head


# -- leases --------------------------------------------------------------------
def lease_of(reader: Reader, head: RunHead, now: float) -> dict[str, Any] | None:
    """Who holds the run's lease, until when, and whether it is live.

    Live means ``RunView.lease_live``: the rule recovery uses.
    """
    if head.lease_owner is None:
        return None
    view = RunView(reader, head)
    return {"owner": head.lease_owner, "token": head.lease_token,
            "expires_at": view.lease_expires(), "owner_alive": owner_alive(head.lease_owner),
            "live": view.lease_live()}


def waiting_text(head: RunHead, live: bool, now: float) -> str:
    """What the run waits on, in a few words (``-`` if nothing)."""
    w = head.waiting or {}
    if w.get("type") == "approval":
        return f"approval {w.get('approval_id')} ({w.get('node_id')})"
    if w.get("type") == "reconciliation":
        return f"reconcile {w.get('tool')} ({w.get('node_id')})"
    if w.get("type") == Waiting.INPUT:
        return f"answer {w.get('approval_id')} ({w.get('node_id')}): {w.get('question')}"
    if w.get("type") == "interrupt":  # a LangGraph thread: one request per interrupt
        ids = w.get("approval_ids") or []
        return f"answer {ids[0]}" + (f" (+{len(ids) - 1} more)" if len(ids) > 1 else "") \
            if ids else "its caller (an interrupt)"
    if w.get("type") == Waiting.TIMER:
        return f"timer ({w.get('item') or w.get('node_id')}) {due_text(w.get('until'), now)}"


    if w.get("type") == Waiting.SIGNAL:
        return signals.waiting_text(w)
    if w.get("type") == Waiting.CHILD:
        return children.waiting_text(w)
    if head.status == Status.RUNNING and not live:
        return "orphaned: no live lease"
    if head.status == Status.PENDING:
        return "a worker"
    return "-"


# -- runs and show ---------------------------------------------------------------
def runs(engine: Host, *, status: str | None = None, flow: str | None = None,
         limit: int | None = None, now: float | None = None) -> list[dict[str, Any]]:
    """One row per run, newest first."""
    now = time.time() if now is None else now
    wanted = None if status is None else Status.of(status).value  # UnknownStatus
    with engine.store.reader() as r:
        heads = [h for h in r.heads() if (wanted is None or h.status == wanted)
                 and (flow is None or h.flow == flow)]
        heads.sort(key=lambda h: (h.created_at, h.run_id), reverse=True)
        heads = heads[:limit] if limit else heads
        rows = []
        for h in heads:
            live = RunView(r, h).lease_live()
            rows.append({
                "run_id": h.run_id, "flow": h.flow, "status": h.status,
                "state_version": h.state_version, "superstep": h.superstep,
                "waiting": h.waiting, "waiting_on": waiting_text(h, live, now), "lease_live": live,
                "error": first_line(h.error, 200) or None, "parent": h.parent,
                "created_at": h.created_at, "updated_at": h.updated_at,
            })
    return rows


def show(engine: Host, run_id: str, *, now: float | None = None) -> dict[str, Any]:
    """The run's snapshot in DESIGN.md's shape, plus flow, policy, lease and error."""
    now = time.time() if now is None else now
    with engine.store.reader() as r:
        head = head_of(r, run_id)
        lease = lease_of(r, head, now)
        pending = {} if head.flow == LANGGRAPH_FLOW else pending_writes(r, head)
        kin = children.family(r, head.run_id)
        waiting = waiting_with_preview(r, head.run_id, head.waiting)
    return {
        "run_id": head.run_id,
        "state_version": head.state_version,
        "status": head.status,
        "committed": list(head.committed),
        "pending_writes": pending,
        "waiting": waiting,
        "flow": head.flow,
        "fingerprint": head.fingerprint,
        "policy": dict(head.policy),
        "lease": lease,
        "error": head.error,
        "reason": status_reason(head),
        "node": head.node,
        "superstep": head.superstep,
        "attempts": head.attempts,
        "parent": head.parent,
        "parent_version": head.parent_version,
        "child_of": kin["parent"],  # the run that started it with ctx.child (not a fork's)
        "children": kin["children"],  # the runs it started with ctx.child, with status
        "created_at": head.created_at,
        "updated_at": head.updated_at,
        "records": head.records,
        "bytes": head.bytes,
    }


def pending_writes(reader: Reader, head: RunHead) -> dict[str, str]:
    """``{node: summary}`` of the outputs committed after the latest checkpoint.

    These are the tasks a resume will not run again (``RunView.unfolded``).
    """
    if head.checkpoint < 0:
        return {}
    out: dict[str, str] = {}
    cp, _, found = RunView(reader, head).unfolded()
    try:
        sends = sends_of(reader, head.checkpoint, cp)
    except CorruptRecord:  # show names the tasks by node then; doctor names the damage
        sends = []
    labels = labels_of(cp.superstep, cp.next, sends)  # a Send task is named search[3]
    for seq, write in sorted(found.values(), key=lambda item: item[0]):
        name = labels.get(write.task, write.node)
        name = name if name not in out else write.task
        keys = ", ".join(dict.fromkeys(op[0] for op in write.ops)) or "no keys"
        out[name] = f"{keys} ({size(len(reader.raw(seq) or b''))}, step {write.superstep})"
    return out


# -- the timeline ----------------------------------------------------------------
def log(engine: Host, run_id: str) -> list[dict[str, Any]]:
    """Every record of the run in log order: seq, type, bytes, time, summary, record."""
    with engine.store.reader() as r:
        head_of(r, run_id)
        entries = [log_entry(r, seq, rtype) for seq, rtype in r.run_entries(run_id)]
    prepared: dict[str, float] = {}
    for entry, record in entries:  # a call's outcome says when as ms after its prepare
        if isinstance(record, IntentPrepared):
            prepared[record.key] = record.at
        elif isinstance(record, IntentCompleted) and entry["at"] is None \
                and record.key in prepared:
            entry["at"] = prepared[record.key] + record.took / 1000
    return [entry for entry, _ in entries]


def log_entry(r: Reader, seq: int, rtype: str) -> tuple[dict[str, Any], Record | None]:
    """One ``log`` entry, and the record it shows (None if it cannot be read)."""
    raw = r.raw(seq) or b""
    entry: dict[str, Any] = {"seq": seq, "type": rtype, "bytes": len(raw)}
    try:
        record = r.record(seq)
    except (RecordError, KeyError) as exc:  # show the damage, keep going
        entry.update(at=None, summary=f"UNREADABLE: {exc}", error=str(exc))
        return entry, None
    entry.update(at=_at(record), summary=describe(record), record=builtins(record))
    return entry, record


def _at(record: Record) -> float | None:
    return getattr(record, "at", None) or getattr(record, "requested_at", None) or None


def describe(record: Record) -> str:  # noqa: C901 - one arm per record type
    """One line saying what a record means."""
    match record:
        case RunCreated():
            parent = f", forked from {record.parent}@v{record.parent_version}" \
                if record.parent else ""
            return f"flow {record.flow}, {record.status}, input {preview(record.input, 40)}{parent}"
        case Checkpoint():
            kind = "full" if record.full else f"delta on #{record.base}"
            done = ",".join(record.committed) or "-"
            labels = next_labels(record.next, record.sends)
            if record.sends_at >= 0:  # a later checkpoint of a planned map
                labels.append(f"the Sends of #{record.sends_at}")
            nxt = ",".join(labels) or "-"
            return (f"v{record.version} step {record.superstep} {record.status} {kind}; "
                    f"committed {done}; next {nxt}")
        case PendingWrite():
            keys = ", ".join(dict.fromkeys(op[0] for op in record.ops)) or "no keys"
            return f"{record.node} (task {record.task}) wrote {keys}"
        case IntentPrepared():
            return f"{record.tool} {record.key} attempt {record.attempt}: " \
                   f"({clip(record.args_preview, 60)})"
        case IntentCompleted():
            if record.ok:
                return f"{record.key} ok via {record.via}: {preview(record.result, 40)}"
            return f"{record.key} failed: {record.error_type}: {first_line(record.error, 50)}"
        case ApprovalRequested():
            return f"{record.kind} {record.approval_id} in {record.node}: {record.action}"
        case ApprovalDecided() if record.decision == Decision.ANSWER:
            return (f"{record.approval_id} answered by {record.by or '?'}: "
                    f"{preview(record.result, 40)}")
        case ApprovalDecided():
            return (f"{record.approval_id} {record.decision} by {record.by or '?'}"
                    + (f": {record.reason}" if record.reason else ""))
        case StatusChanged():
            why = first_line(record.error, 60) if record.error else (record.reason or "")
            return f"-> {record.status}" + (f": {why}" if why else "")
        case SignalSent() | SignalAwaited() | SignalConsumed():
            return signals.describe(record)
        case ChildStarted() | ChildOf() | ChildEnded():
            return children.describe(record)
        case LeaseAcquired():
            return f"token {record.token} to {record.owner}"
        case LeaseReleased():
            return f"token {record.token} by {record.owner}"
    return record.TYPE


# -- checkpoints and states ----------------------------------------------------------
def checkpoints(engine: Host, run_id: str) -> list[dict[str, Any]]:
    """Each checkpoint: version, superstep, status, full/delta, committed, next, bytes."""
    with engine.store.reader() as r:
        bide_head(r, run_id, "checkpoints")
    rows: list[dict[str, Any]] = []
    for c in engine.checkpoints(run_id):
        before = rows[-1] if rows else None
        rows.append({"seq": c.seq, "version": c.version, "superstep": c.superstep,
                     "status": c.status, "full": c.full, "committed": c.committed,
                     "next": c.next, "bytes": c.bytes, "at": c.at,
                     "note": repeat_note(before, c.version, c.status)})
    return rows


def repeat_note(before: dict[str, Any] | None, version: int, status: str) -> str | None:
    """Why a version is listed again (None: it is not).

    A version counts changes of the state, not checkpoints: a superstep that
    pauses, is interrupted or fails before it changes anything is checkpointed
    again at the version it started from, to record the run's new status.
    """
    if before is None or before["version"] != version:
        return None
    if before["status"] == status:
        return f"version {version} again: the same state, checkpointed again"
    return (f"version {version} again: the same state, checkpointed again when the run "
            f"went from {before['status']} to {status}")


def version_seq(reader: Reader, run_id: str, version: int | None) -> tuple[int, int]:
    """``(seq, version)`` of the checkpoint at ``version`` (the latest if None).

    Raises:
        UnknownRun, UnknownVersion.
    """
    head = bide_head(reader, run_id, "state")
    if version is None:
        return head.checkpoint, head.state_version
    return RunView(reader, head).checkpoint_seq(version), version


def state(engine: Host, run_id: str, version: int | None = None) -> tuple[int, dict[str, Any]]:
    """``(version, state)`` at the latest checkpoint or at ``version``."""
    with engine.store.reader() as r:
        seq, found = version_seq(r, run_id, version)
        return found, materialize(r, run_id, seq)


def diff(engine: Host, run_id: str, v1: int, v2: int) -> list[dict[str, Any]]:
    """Which keys changed from ``v1`` to ``v2``, and how (added, removed, appended, merged...)."""
    _, old = state(engine, run_id, v1)
    _, new = state(engine, run_id, v2)
    rows = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            rows.append({"key": key, "change": "removed", "detail": "",
                         "before": old[key], "after": None})
        elif key not in old:
            rows.append({"key": key, "change": "added", "detail": "",
                         "before": None, "after": new[key]})
        elif old[key] != new[key]:
            change, detail = _how(old[key], new[key])
            rows.append({"key": key, "change": change, "detail": detail,
                         "before": old[key], "after": new[key]})
    return rows


def _how(before: Any, after: Any) -> tuple[str, str]:
    if isinstance(before, list) and isinstance(after, list) and after[: len(before)] == before:
        return "appended", f"+{len(after) - len(before)} items"
    if isinstance(before, dict) and isinstance(after, dict):
        plus = [k for k in after if k not in before]
        minus = [k for k in before if k not in after]
        changed = [k for k in after if k in before and after[k] != before[k]]
        parts = [f"+{k}" for k in plus] + [f"~{k}" for k in changed] + [f"-{k}" for k in minus]
        return "merged" if not minus else "changed", " ".join(map(str, parts))
    return "changed", ""


# -- intents ----------------------------------------------------------------------
def intents(engine: Host, run_id: str | None = None, *, unknown: bool = False,
            now: float | None = None) -> list[dict[str, Any]]:
    """Tool calls with their status and idempotency keys.

    With ``unknown``: only calls in doubt ("prepared" with no outcome, or
    "unknown" waiting for a human) of runs that no live worker is advancing.
    """
    now = time.time() if now is None else now
    rows = []
    with engine.store.reader() as r:
        if run_id is not None:
            head_of(r, run_id)
        live: dict[str, bool] = {}
        for i in r.intents(run_id):
            if unknown:
                if i.status not in IN_DOUBT:
                    continue
                if i.run_id not in live:
                    head = r.head(i.run_id)
                    live[i.run_id] = head is None or (
                        head.status == Status.RUNNING and RunView(r, head).lease_live())
                if live[i.run_id]:
                    continue
            rows.append(plain(i))
    return rows


# -- export -------------------------------------------------------------------------
def export(engine: Host, run_id: str, *, now: float | None = None) -> dict[str, Any]:
    """Everything stored about one run, as one JSON document (for a bug report)."""
    now = time.time() if now is None else now
    snapshot = show(engine, run_id, now=now)
    if snapshot["flow"] == LANGGRAPH_FLOW:
        raise LangGraphThread(run_id, "export")
    version, current = state(engine, run_id)
    with engine.store.reader() as r:
        approvals = [plain(a) for a in r.approvals() if a.run_id == run_id]
    return export_document(snapshot, {"version": version, "values": current},
                           checkpoints(engine, run_id), intents(engine, run_id, now=now),
                           approvals, log(engine, run_id), now=now)


def export_document(snapshot: dict[str, Any], state: dict[str, Any],
                    checkpoints: list[Any], intents: list[Any], approvals: list[Any],
                    records: list[Any], *, now: float | None = None) -> dict[str, Any]:
    """The export's shape (a LangGraph thread's too: engine/langgraph/views.py)."""
    return {
        "format": "bide-export",
        "format_version": 1,
        "bide_version": _version(),
        "exported_at": time.time() if now is None else now,
        "run": snapshot,
        "state": state,
        "checkpoints": checkpoints,
        "intents": intents,
        "approvals": approvals,
        "records": records,
    }


def _version() -> str:
    try:
        return metadata.version("bide")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


def pending_row(a: Any, args_preview: str | None = None) -> dict[str, Any]:
    return {"approval_id": a.approval_id, "run_id": a.run_id, "kind": a.kind, "node": a.node,
            "action": a.action, "payload": a.payload, "digest": a.digest, "allowed": a.allowed,
            "args_preview": args_preview,  # a reconciliation: the call in doubt's arguments
            "tool": a.tool, "intent": a.intent, "requested_at": a.requested_at,
            "expires_at": a.expires_at, "schema": a.schema,
            "question": a.action if a.kind == Waiting.INPUT else None,
            "until": timers.until_of(a) if a.kind == Waiting.TIMER else None,
            "review": _review(a)}


def _review(a: Any) -> dict[str, Any] | None:
    """A HITL review's calls, as ``reviews.Review.shown`` (None: not a review)."""
    if a.kind == Waiting.RECONCILIATION:
        return None
    review = reviews.review_of(a.payload, a.schema)
    return None if review is None else review.shown()
