"""Where a run stands: each rule about a run's state, written once.

The runtime (which run to take, whether it may be leased, where a resume starts),
the read commands (``bide show``), cancel/fork and prune all ask the same
questions of a snapshot: where do the pending writes not yet folded into the
latest checkpoint start, and which are they; which checkpoint has this version;
is the lease live; is the approval the run waits for settled; is this process
alive. ``RunView`` answers them over one reader, so the rules cannot drift apart.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ...formats import Checkpoint, PendingWrite
from ..base.errors import UnknownVersion
from ..base.vocabulary import FINISHED, LANGGRAPH, WAITING, Status
from ..storage.index import ApprovalState, RunHead
from ..storage.leases import (
    check_fence as check_fence,  # re-exported: the rules of a run, in one place
)
from ..storage.leases import lease_expires
from ..storage.leases import renew_if_held as renew_if_held
from ..storage.store import Reader
from . import children, signals, timers

Unfolded = dict[str, tuple[int, PendingWrite]]

# The reasons recorded with a move to RUNNING: a worker took a PENDING run, or one that had
# stopped (paused, interrupted, orphaned, blocked). They describe that move only.
STARTED, RESUMED = "started", "resumed"


@dataclass(frozen=True)
class RunView:
    """One run seen through one read snapshot; one method per rule."""

    reader: Reader
    head: RunHead

    # -- checkpoints and pending writes -------------------------------------------
    def checkpoint(self) -> Checkpoint:
        """The run's latest checkpoint."""
        cp = self.reader.record(self.head.checkpoint)
        assert isinstance(cp, Checkpoint)
        return cp

    def unfolded(self, requests: list[int] | None = None) -> tuple[Checkpoint, int, Unfolded]:
        """The latest checkpoint, where its unfolded pending writes start, and those writes.

        Those writes are the tasks a resume will not run again: from the checkpoint's
        ``scan_from`` (see ``unfolded_from``), for its superstep or later, by task.
        ``requests``: gets the seqs of the approval requests in that range, read in
        the same pass (engine/run/waits.py).
        """
        cp = self.checkpoint()
        start = unfolded_from(self.head.checkpoint, cp)
        found: Unfolded = {}
        for seq, rtype in self.reader.run_entries(self.head.run_id, start):
            if rtype != "pending_write":
                if rtype == "approval_requested" and requests is not None:
                    requests.append(seq)
                continue
            write = self.reader.record(seq)
            assert isinstance(write, PendingWrite)
            if write.superstep >= cp.superstep:
                found[write.task] = (seq, write)
        return cp, start, found

    def checkpoint_seq(self, version: int) -> int:
        """The seq of the run's checkpoint at ``version``.

        Raises:
            UnknownVersion: the run has no checkpoint at that version.
        """
        return checkpoint_seq(self.reader, self.head.run_id, version)

    # -- the lease ----------------------------------------------------------------
    def lease_expires(self) -> float:
        """When the run's current lease ends (see ``lease_expires``)."""
        return lease_expires(self.reader, self.head)

    def lease_live(self, now: float | None = None) -> bool:
        """Someone holds the lease, it has not expired, and its owner is not a gone process.

        ``now``: the time to judge it at, in the store's clock; by default the store's
        own (``Reader.now``), so every host judges a lease by one clock.
        """
        owner = self.head.lease_owner
        return owner is not None and self.lease_left(now) > 0 and owner_alive(owner)

    def lease_left(self, now: float | None = None) -> float:
        """Seconds the current lease has left by the store's clock (negative: ended)."""
        return self.lease_expires() - (self.reader.now() if now is None else now)

    # -- the approval it waits for ------------------------------------------------------
    def awaited_approval(self) -> ApprovalState | None:
        """The approval request the run waits for, if it waits for one that exists."""
        aid = (self.head.waiting or {}).get("approval_id")
        return None if aid is None else self.reader.approval(aid)

    def wait_settled(self, now: float) -> bool:
        """Can a resume of this paused run make progress? The request ``waiting`` names
        is decided or expired (or gone), or another request of this pause was decided
        since the last resume (``RunHead.woken``: a map's other paused items)."""
        asked = (self.head.waiting or {}).get("approval_ids")
        if asked:  # a LangGraph thread's interrupts: resumed together, once all are settled
            return all(req is None or settled(req, now)
                       for req in map(self.reader.approval, asked))
        if self.head.woken is not None:
            return True
        req = self.awaited_approval()
        return req is None or settled(req, now)

    # -- whether a watcher has work here -------------------------------------------------
    def needs_work(self, now: float) -> bool:
        """Can a watcher advance the run now? Pending or interrupted; waiting on a decision
        that is settled; or RUNNING with nobody's live lease (an orphan).

        A LangGraph thread is advanced by invoking its graph: a watcher that has it
        does so when the thread was submitted, when every interrupt it stopped at is
        settled, or when the watcher worker that held it died (``thread_needs_work``).
        A thread its own caller runs (no lease) is never taken from it.
        """
        head = self.head
        if head.flow == LANGGRAPH:
            return self.thread_needs_work(now)
        if head.status in (Status.PENDING, Status.INTERRUPTED):
            return True
        if head.status == Status.WAITING_SIGNAL:
            return signals.ready(self.reader, head, now)
        if head.status == Status.WAITING_CHILD:
            return children.ready(self.reader, head)
        if head.status in WAITING:
            return self.awaited_approval() is not None and self.wait_settled(now)
        if head.status == Status.SLEEPING:
            return timers.is_due(head, now)
        return head.status == Status.RUNNING and not self.lease_live()

    def thread_needs_work(self, now: float) -> bool:
        """``needs_work`` of a LangGraph thread (see there)."""
        head = self.head
        if head.status == Status.PENDING:
            return True
        if head.status in WAITING:
            return bool((head.waiting or {}).get("approval_ids")) and self.wait_settled(now)
        return head.status == Status.RUNNING and head.lease_owner is not None \
            and not self.lease_live()

    def workable_at(self, now: float) -> float | None:
        """When ``needs_work`` turns true with no commit in between: the expiry of the
        live lease it runs under, the deadline of the approval it waits for, or the
        due time of the timer it sleeps on.

        None when only a commit can change that (or it needs work now, or never will).
        """
        head = self.head
        if head.flow == LANGGRAPH and head.status not in WAITING and head.lease_owner is None:
            return None
        if head.status == Status.RUNNING and self.lease_live():
            return now + self.lease_left()  # in the caller's clock: its timers are
        if head.status == Status.WAITING_SIGNAL:
            return timers.waiting_until(head)  # its timeout (None: it waits for ever)
        if head.status in WAITING:
            req = self.awaited_approval()
            if req is not None and not settled(req, now) and req.expires_at is not None:
                return req.expires_at
        return timers.due_at(head)  # a sleeping run's due time (None for any other)


def finished(head: RunHead) -> bool:
    """DONE, FAILED or CANCELLED: nothing more happens to it unless someone resumes it."""
    return head.status in FINISHED


def status_reason(head: RunHead) -> str | None:
    """Why the run has its status (``bide show``), or None.

    A checkpoint that changes the status does not clear the reason of the last
    ``StatusChanged`` (the index keeps it, and changing the fold would make every
    existing home differ from a rebuild), so a ``resumed`` would otherwise still be
    shown on a run that has since paused or finished.
    """
    if head.reason in (STARTED, RESUMED) and head.status != Status.RUNNING:
        return None
    return head.reason


def ended(head: RunHead) -> bool:
    """DONE or CANCELLED: no resume will run it again (a FAILED run may be retried)."""
    return head.status in (Status.DONE, Status.CANCELLED)


def unfolded_from(checkpoint_seq: int, cp: Checkpoint) -> int:
    """The first seq that may hold a pending write not folded into checkpoint ``cp``.

    A checkpoint that folded its superstep says -1 (start right after it); one
    written without folding (a pause, an interruption) keeps the earlier start.
    """
    return cp.scan_from if cp.scan_from >= 0 else checkpoint_seq + 1


def checkpoint_seq(reader: Reader, run_id: str, version: int) -> int:
    """The seq of the run's checkpoint at ``version``; UnknownVersion if it has none."""
    found, known = None, []
    for seq, rtype in reader.run_entries(run_id):
        if rtype == "checkpoint":
            cp = reader.record(seq)
            assert isinstance(cp, Checkpoint)
            known.append(cp.version)
            if cp.version == version:
                found = seq  # the last one wins (a pause can repeat a version)
    if found is None:
        raise UnknownVersion(run_id, version, sorted(set(known)))
    return found


def settled(req: ApprovalState, now: float) -> bool:
    """Decided, or expired (an expired request resumes as a rejection)."""
    return req.decision is not None or expired(req, now)


def expired(req: ApprovalState, now: float) -> bool:
    """The request had a deadline and it has passed."""
    return req.expires_at is not None and now > req.expires_at


def owner_alive(owner: str) -> bool:
    """False only when the owner (``host:pid:...``) is a process of this host that has gone.

    A lease of a dead local process need not wait out its expiry; a lease of
    another host (or a live or unknowable process) is honoured until it expires.
    """
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    return pid_alive(int(pid_text))


def pid_alive(pid: int) -> bool:
    """Does a process with this pid exist on this host (perhaps another user's)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
