"""A run's lease in the store: when it ends, renewing it, and the fence every commit checks.

Every backend's commit and ``renew_lease`` apply these rules inside its own write
transaction, so they live in the store layer; ``run_view`` answers the same
questions for the runtime and the read commands through them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ...formats import LeaseAcquired, Record, pack_value
from ..base import faults
from ..base.errors import StaleLease
from .index import RunHead, Tables
from .store import LEASES, Reader


def lease_expires(reader: Reader, head: RunHead) -> float:
    """When the run's current lease ends: its grant's expiry, or a later renewal of that token.

    Renewals are kept beside the log (``renew_lease`` writes no record), so this is
    the one place that combines the two.
    """
    renewed = reader.lease_expiry(head.run_id)
    if renewed is not None and renewed[0] == head.lease_token:
        return max(head.lease_expires, renewed[1])
    return head.lease_expires


def stamp_grants(batch: Sequence[Record], now: float) -> list[Record] | None:
    """``batch`` with every lease grant that gives a ``ttl`` expiring at the store's
    ``now`` plus it (every backend's commit); None when no record grants one."""
    if not any(type(r) is LeaseAcquired and r.ttl for r in batch):
        return None
    return [msgspec.structs.replace(r, expires_at=now + r.ttl)
            if type(r) is LeaseAcquired and r.ttl else r for r in batch]


def grants(records: Sequence[Any]) -> bool:
    """Do ``records`` (known before the commit) grant a lease by ``ttl``?"""
    return any(type(r) is LeaseAcquired and r.ttl for r in records)


def renew_if_held(reader: Reader, tables: Tables, run_id: str, token: int,
                  expires_at: float) -> bool:
    """Extend ``token``'s lease on ``run_id`` to ``expires_at`` (a renewal row, no log
    record) if that token still holds it; False if it does not (every backend's
    ``renew_lease``)."""
    head = reader.head(run_id)
    if head is None or head.lease_token != token or head.lease_owner is None:
        return False
    tables.put(LEASES, run_id.encode(), pack_value([token, expires_at]))
    return True


def check_fence(reader: Reader, run_id: str, token: int, now: float,
                read: Callable[[str], RunHead | None] | None = None) -> RunHead | None:
    """Refuse a fenced commit unless ``token`` holds the run's lease and it is live at ``now``.

    Args:
        read: how to read the head, if not ``reader.head`` (LMDB's commit takes its own).

    Returns:
        The run's head as read (a commit folds its records onto it: no second read),
        or None when fencing is switched off (a crash test's fault).

    Raises:
        StaleLease: the lease was taken over, released, or expired.
    """
    if faults.switch("no_fencing"):
        return None
    head = reader.head(run_id) if read is None else read(run_id)
    current = None if head is None else head.lease_token
    if current != token or head is None or head.lease_owner is None:
        raise StaleLease(run_id, token, current)
    if lease_expires(reader, head) < now:
        raise StaleLease(run_id, token, current)
    return head
