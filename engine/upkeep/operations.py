"""Operations on runs from outside a worker: cancel, and fork (time travel).

Each write is one transaction through ``Store.commit``: ``cancel`` and ``fork``
decide what to write from what the transaction reads, so they are correct
while other processes commit.
"""

from __future__ import annotations

import uuid

from ...formats import Checkpoint, LeaseAcquired, LeaseReleased, Record, RunCreated, StatusChanged
from ..base.errors import NotCancellable, RunExists
from ..base.vocabulary import Status
from ..read.inspect import head_of, version_seq
from ..run import children
from ..run.host import Host
from ..run.planned import sends_of
from ..run.runs import check_run_id
from ..run.state import materialize
from ..storage.store import Reader


class _AlreadyCancelled(Exception):
    """Raised inside the transaction to write nothing: the run is already CANCELLED."""


def cancel(engine: Host, run_id: str, reason: str | None = None, *,
           now: float | None = None) -> bool:
    """Stop a run for good: record ``CANCELLED``; every record of the run is kept.

    If a worker holds the run's lease, the same transaction takes the lease over
    (a new fencing token) and releases it, so that worker's next commit is
    refused instead of overwriting the cancellation. Approval requests and
    intents stay as they are (they remain visible in ``bide intents``/``log``).

    Returns:
        True if cancelled now, False if it already was.

    Raises:
        UnknownRun. NotCancellable: the run is DONE.
    """
    at = engine.clock() if now is None else now

    def build(r: Reader) -> list[Record]:
        head = head_of(r, run_id)
        if head.status == Status.CANCELLED:
            raise _AlreadyCancelled()
        if head.status == Status.DONE:
            raise NotCancellable(run_id, head.status)
        records: list[Record] = []
        if head.lease_owner is not None:
            token = head.lease_token + 1
            owner = f"bide-cancel:{engine.owner}"
            records += [
                LeaseAcquired(run_id=run_id, owner=owner, token=token, expires_at=at,
                              attempts=head.attempts, at=at),
                LeaseReleased(run_id=run_id, owner=owner, token=token, at=at),
            ]
        records.append(StatusChanged(run_id=run_id, status=Status.CANCELLED,
                                     reason=reason or "cancelled", at=at))
        # its child runs (and theirs) in the same transaction: no crash leaves them running
        return records + children.cascade(r, run_id, at=at, owner=f"bide-cancel:{engine.owner}")

    try:
        engine.store.commit(build)
    except _AlreadyCancelled:
        return False
    return True


def fork(engine: Host, run_id: str, version: int, new_id: str | None = None, *,
         now: float | None = None) -> str:
    """Start a new run from the state of ``run_id`` at checkpoint ``version``.

    The new run is ``PENDING``; its first checkpoint is a full snapshot of that
    state with the same version, superstep and next nodes, and its
    ``RunCreated`` names the parent and version. A worker (``resume``,
    ``recover``, the watcher) runs it. Nothing of the parent is shared or changed.

    Returns:
        The new run's id.

    Raises:
        UnknownRun, UnknownVersion, RunExists.
    """
    at = engine.clock() if now is None else now
    new_id = check_run_id(new_id) if new_id is not None else _fork_id(run_id)

    def build(r: Reader) -> list[Record]:
        head = head_of(r, run_id)
        seq, _ = version_seq(r, run_id, version)
        if r.head(new_id) is not None:
            raise RunExists(new_id)
        cp = r.record(seq)
        assert isinstance(cp, Checkpoint)
        state = materialize(r, run_id, seq)
        sends = sends_of(r, seq, cp)  # the fork stores them: it shares nothing with its parent
        return [
            RunCreated(run_id=new_id, flow=head.flow, fingerprint=head.fingerprint, input=state,
                       policy=dict(head.policy), status=Status.PENDING, parent=run_id,
                       parent_version=version, at=at),
            Checkpoint(run_id=new_id, version=cp.version, superstep=cp.superstep,
                       status=Status.PENDING, full=True, state=state, next=list(cp.next),
                       sends=[[node, arg] for node, arg in sends],
                       seen={k: dict(v) for k, v in cp.seen.items()},
                       flow=head.flow, fingerprint=head.fingerprint, at=at),
        ]

    engine.store.commit(build)
    return new_id


def _fork_id(run_id: str, limit: int = 128) -> str:
    suffix = f"-fork-{uuid.uuid4().hex[:6]}"
    return run_id[: limit - len(suffix)] + suffix
