"""Which commits a watcher on another host must hear about: the runs a commit announces.

A store that can wake watchers (PostgreSQL: ``NOTIFY`` in the commit's own
transaction) announces a run when the commit left it in a state some watcher
should act on at once, and only then:

- submitted or let go: PENDING or INTERRUPTED (a run a stopping or blocked
  worker released, which another worker may take);
- a decision (or a signal, or a child's end) recorded for a run that waits for one;
- a run that began to wait for a signal with a timeout (the waker's timer needs it);
- RUNNING with nobody's lease (released without finishing).

A commit that records a run as blocked (``blocking``) announces nothing: two
hosts failing on one run in different ways (two versions of a flow) would
otherwise wake each other in a tight loop; others find it at their next rescan.

Checkpoints of a run under a live lease, renewals and finished runs announce
nothing: they are most commits, and on PostgreSQL every notifying commit takes
one cluster-wide lock at COMMIT (notifications are queued in commit order), so
notifying every commit would serialize them all. What no commit announces — a
lease that expires because its worker died, an approval's deadline — the
watcher finds by timers and its periodic rescan (``waker``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...formats import (
    ApprovalDecided,
    ChildEnded,
    LeaseReleased,
    Record,
    RunCreated,
    SignalSent,
    StatusChanged,
)
from ..base.vocabulary import BLOCKED, WAITING, Status
from .index import RUNS, RunHead, Tables, load

# the records that can leave a run needing a watcher; any other commit announces nothing
_MOVES = (RunCreated, StatusChanged, LeaseReleased, ApprovalDecided, SignalSent, ChildEnded)


def announced(tables: Tables, batch: Sequence[Record]) -> list[str]:
    """The runs this commit should announce (see the module docstring), in batch order.

    Args:
        tables: the commit's transaction, read after its records were folded in.
        batch: the records the commit wrote.
    """
    decided = {r.run_id for r in batch if isinstance(r, ApprovalDecided | SignalSent | ChildEnded)}
    blocked = {r.run_id for r in batch if isinstance(r, StatusChanged) and r.reason == BLOCKED}
    moved = dict.fromkeys(r.run_id for r in batch if isinstance(r, _MOVES))
    out = []
    for run_id in (r for r in moved if r not in blocked):
        head = load(tables, RUNS, run_id.encode(), RunHead)
        if head is not None and wants_watcher(head, decided=run_id in decided):
            out.append(run_id)
    return out


def wants_watcher(head: RunHead, *, decided: bool) -> bool:
    """Should a watcher look at this run now, the commit having just left it so?"""
    if head.flow == "langgraph":  # advanced by invoking their graph, never by a watcher
        return False
    if head.status in (Status.PENDING, Status.INTERRUPTED):
        return True
    if head.status == Status.WAITING_SIGNAL and (head.waiting or {}).get("until") is not None:
        return True  # a wait with a timeout: the waker sets a timer for it (workable_at)
    if head.status in WAITING:
        return decided
    if head.status == Status.SLEEPING:  # every waker learns its due time (``workable_at``)
        return True
    return head.status == Status.RUNNING and head.lease_owner is None
