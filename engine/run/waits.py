"""Which paused tasks a resume need not run: each would pause again at the same request.

A map whose N items each pause for a person resumes once per decision. Running
every still-paused item again on each resume costs O(N) node bodies per decision,
O(N^2) over the map; each would only reach its ``ctx.approve``/``ctx.ask`` again
and pause again. A task may be left out when all of these hold:

- the run's latest checkpoint is a pause of this superstep (``WAITING``); any other
  (an older bide's run resumed mid-superstep, a failure) runs every task;
- the task's latest request made in this superstep (same ``state_version``) is
  still undecided and unexpired, and is an approval or a question: a
  reconciliation runs (its tool's reconciler may know the answer by now);
- none of the task's tool calls is in doubt (prepared with no outcome).

A task reaches a request only once every earlier request of it was decided
(decisions never change) and every earlier tool call has an outcome (which
rides in the same commit as the pause), so it would pause at that request again.
The requests come from the run's log since the superstep began, read in the pass
that finds its pending writes: no record is added, and a run paused by an
older bide is read the same way (a task id it did not use matches nothing).
"""

from __future__ import annotations

from typing import Any

from ...formats import ApprovalRequested, Checkpoint
from ..base.errors import Paused
from ..base.vocabulary import IN_DOUBT, WAITING, Waiting
from ..storage.index import ApprovalState
from ..storage.store import Reader
from .run_view import expired


def still_waiting(reader: Reader, run_id: str, requests: list[int], cp: Checkpoint,
                  now: float) -> dict[str, Paused]:
    """Task id -> the pause it would make again, for tasks a resume may skip.

    ``requests``: the seqs of the approval requests since the superstep's records
    began (where its pending writes are searched from), in log order.
    """
    if cp.status not in WAITING:
        return {}
    latest: dict[str, str] = {}  # task -> its latest request's id, in log order
    for seq in requests:
        req = reader.record(seq)
        if isinstance(req, ApprovalRequested) and req.state_version == cp.version:
            latest[req.task] = req.approval_id
    if not latest:
        return {}
    doubt = {i.task for i in reader.intents(run_id) if i.status in IN_DOUBT}
    waits: dict[str, Paused] = {}
    for task, aid in latest.items():
        state = reader.approval(aid)
        if state is None or task in doubt or not _open(state, now):
            continue
        waits[task] = Paused(waiting_of(state), [], expires_at=state.expires_at)
    return waits


def _open(state: ApprovalState, now: float) -> bool:
    return (state.decision is None and not expired(state, now)
            and state.kind in (Waiting.APPROVAL, Waiting.INPUT))


def waiting_of(state: ApprovalState) -> dict[str, Any]:
    """The ``waiting`` a node raises when it reaches this request undecided
    (engine/run/context.py)."""
    waiting = {"type": state.kind, "node_id": state.node, "approval_id": state.approval_id}
    if state.kind == Waiting.INPUT:
        waiting["question"] = state.action
    return waiting
