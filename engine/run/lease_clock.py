"""How long a worker may trust its lease, by its own clock, whatever the network did.

A lease is granted (or renewed) by a commit the store acknowledges; the store writes its
expiry as *its* time of that commit plus the lease's time to live (PostgreSQL: the
server's clock). The worker cannot read that clock, but it knows when it *sent* the
grant or renewal: the store's commit came after that, so the lease lasts at least until
``sent + ttl`` in real time. ``LeaseClock`` keeps that bound on the worker's monotonic
clock, less a margin for clocks that run at slightly different rates, and raises it
with every renewal the store acknowledges, measured from the renewal's start.

A reply that comes back late (a partition that healed, a COMMIT reply held up) says
nothing about now: the lease may have ended meanwhile and another worker may have
taken the run over. So before a tool is called, and after its outcome is committed,
the worker asks ``alive()``; when it cannot prove its lease it stops (see
``engine/run/context.py``). A tool that runs longer than its lease is past what any
lease can guard: it must pass ``ctx.fencing_token`` to a system that checks it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MARGIN = 0.1  # of the lease's time to live: what clock-rate differences may eat


@dataclass(frozen=True)
class Grant:
    """A lease this worker was granted: its fencing token, and ``now()`` just before the
    grant's commit was sent (where its ``LeaseClock`` starts)."""

    token: int
    sent_at: float


class LeaseClock:
    """The deadline until which this worker's lease is known to be live."""

    def __init__(self, ttl: float, granted_at: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``granted_at``: ``clock()`` read just before the grant's commit was sent."""
        self.ttl, self._clock = ttl, clock
        self.trusted = ttl * (1 - MARGIN)
        self.until = granted_at + self.trusted

    def renewed(self, started_at: float) -> None:
        """A renewal sent at ``started_at`` (``clock()``) was acknowledged."""
        self.until = max(self.until, started_at + self.trusted)

    def lost(self) -> None:
        """The store refused a renewal: the lease is someone else's now."""
        self.until = float("-inf")

    def alive(self) -> bool:
        """Is the lease certainly live now?"""
        return self._clock() < self.until

    def late_by(self) -> float:
        """Seconds since the trusted deadline passed (<= 0 while it is live)."""
        return self._clock() - self.until


def now() -> float:
    """The clock ``LeaseClock`` measures in: read it just before sending a grant."""
    return time.monotonic()
