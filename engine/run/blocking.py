"""A run that cannot go on for a reason of its own: record why on it, keep serving the others.

A renamed node (FlowMismatch), a flow this process does not serve (UnknownFlow),
an unreadable record of the run: each belongs to one run. ``recover`` (and so
``bide watch``) records it on the run as a ``StatusChanged`` that keeps the
run's status (so redeploying the right flow lets it continue) with reason
``BLOCKED`` and the error, shown by ``bide show``; then goes on with the other
runs. The same error is recorded once, not at every rescan.
"""

from __future__ import annotations

from typing import Any

from ...formats import LeaseReleased, StatusChanged
from ..base.vocabulary import BLOCKED as BLOCKED  # re-exported: the reason a blocked run shows
from ..base.vocabulary import Status
from ..storage.index import RunHead
from ..storage.store import Reader
from .run_view import finished


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def signature(head: RunHead) -> tuple[Any, ...]:
    """What must change before a blocked run is worth another try in the same process."""
    return (head.status, head.checkpoint, head.lease_token, head.records)


def block_records(r: Reader, run_id: str, why: str, *, owner: str, now: float,
                  node: str | None = None) -> list[Any]:
    """The records that say the run is blocked by ``why``; none if that is already said.

    If this process took the run's lease before the error, it lets go and leaves the
    run INTERRUPTED, so any worker may retry it at once once the cause is fixed.
    """
    head = r.head(run_id)
    if head is None or finished(head):
        return []
    if head.reason == BLOCKED and head.error == why:
        return []
    records: list[Any] = []
    status = head.status
    if head.lease_owner == owner:
        records.append(LeaseReleased(run_id=run_id, owner=owner, token=head.lease_token, at=now))
        status = Status.INTERRUPTED
    records.append(StatusChanged(run_id=run_id, status=status, reason=BLOCKED, error=why,
                                 node=node, at=now))
    return records
