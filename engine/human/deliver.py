"""How a decision from outside a worker reaches a home (``bide approve``).

A home whose store many hosts share (PostgreSQL) takes it straight into the
database: its inbox directories are per host, so a file dropped into one is seen
only by the watcher of that host, if any. A directory home takes it as a file
dropped into its inbox, the door people and programs use, so a watcher (or any
process that serves the inbox) records it with every file rule.

An answer (``bide answer``) travels the same ways, its value as the decision's
result (the file's ``value``) and checked against the question's schema.

Either way the decision is checked first, by the same rules a decision file
meets at the watcher: the home's key when it requires signed decisions, and
that the request exists, takes this decision, matches the run and digest given,
and is neither decided nor expired. A refused decision writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...formats import check_serializable
from ..base.vocabulary import Decision
from ..run.approvals import decided, undecided
from ..run.host import Host
from ..storage.index import ApprovalState
from ..storage.store import Reader
from . import signing
from .inbox import NO_VALUE, drop_decision


def shared(engine: Host) -> bool:
    """Does the store hold what every host of the home must see (a PostgreSQL home)?"""
    return signing.marker(engine.home, engine.store).shared is not None


def record(engine: Host, approval_id: str, decision: str, *, by: str | None = None,
           reason: str | None = None, result: Any = None, key: bytes | None = None,
           run_id: str | None = None, digest: str | None = None) -> ApprovalState:
    """Record a decision in the store now, in one commit, after a decision file's checks.

    Returns:
        The request as it stood before this decision.

    Raises:
        ApprovalKeyError, UnknownApproval, DecisionNotAllowed, DecisionRefused (also
        when this very decision was already recorded: nothing is written twice).
    """
    signing.check(signing.marker(engine.home, engine.store), key)
    if result is not None:
        check_serializable(result, f"the result given with decision {decision!r}")
    now = engine.clock()
    found: list[ApprovalState] = []

    def build(r: Reader) -> list[Any]:
        found.clear()  # a commit may build again (a conflict retried)
        found.append(undecided(r, approval_id, decision, now=now, run_id=run_id,
                               digest=digest, value=result))
        return [decided(found[0], decision, by=by, reason=reason, result=result, at=now)]

    engine.store.commit(build)
    return found[0]


def drop(engine: Host, approval_id: str, decision: str, *, by: str | None = None,
         reason: str | None = None, result: Any = None, key: bytes | None = None
         ) -> tuple[Path, ApprovalState]:
    """Check a decision, then write it as a file into the engine's inbox (signed with
    ``key``), bound to the request's run and digest: the file, and the request.

    Raises:
        ApprovalKeyError, UnknownApproval, DecisionNotAllowed, DecisionRefused.
    """
    signing.check(signing.marker(engine.home, engine.store), key)
    with engine.store.reader() as r:
        req = undecided(r, approval_id, decision, now=engine.clock(), value=result)
    answer = decision == Decision.ANSWER  # its value goes in the file's "value" field
    path = drop_decision(engine.home, approval_id, decision, by=by, reason=reason,
                         run_id=req.run_id, digest=req.digest, key=key,
                         result=None if answer else result, value=result if answer else NO_VALUE,
                         inbox=engine.doors.inbox)
    return path, req
