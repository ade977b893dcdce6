"""Durable timers (``ctx.sleep``): what a due time is, and when a paused run is due.

A timer is a request of kind ``timer`` in the approvals table: one id per task and
call index (``approval_id``), so a node that runs again finds its own timer and
its first due time, however late it runs. Its payload holds the due time; bide
records it ``elapsed`` when the node passes it, so nothing waits on it afterwards.

The run head's ``waiting`` names the earliest due time of the run
(``{"type": "timer", "node_id": ..., "until": ...}``), so whoever reads heads —
``RunView.needs_work``/``workable_at``, a watcher's rescan, the PostgreSQL waker —
knows when the run can go on without reading its timers (``due_at``). That is the
"due time" seam: another kind of pause with a deadline (a signal's timeout) puts
``until`` in its ``waiting`` and is due the same way.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from ...formats import ApprovalRequested
from ..base.errors import InvalidTimer
from ..base.vocabulary import FINISHED, Status, Waiting
from ..storage.index import ApprovalState, RunHead
from ..storage.store import Reader


def after(seconds: float, now: float) -> float:
    """The due time ``seconds`` from ``now``.

    Raises:
        InvalidTimer: ``seconds`` is not a finite number at or above 0.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidTimer(f"ctx.sleep takes a number of seconds, not {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidTimer(f"ctx.sleep takes a finite number of seconds at or above 0, "
                           f"not {seconds!r}")
    return now + float(seconds)


def epoch(when: float | datetime) -> float:
    """``when`` as epoch seconds: a number of them, or an aware datetime.

    Raises:
        InvalidTimer: a naive datetime (whose zone bide would have to guess), a
            non-finite number, or anything else.
    """
    if isinstance(when, datetime):
        if when.tzinfo is None or when.tzinfo.utcoffset(when) is None:
            raise InvalidTimer(f"ctx.sleep_until needs an aware datetime (with a tzinfo, "
                               f"e.g. datetime.now(timezone.utc)), not the naive {when!r}")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        raise InvalidTimer(f"ctx.sleep_until takes epoch seconds or an aware datetime, "
                           f"not {when!r}")
    if not math.isfinite(when):
        raise InvalidTimer(f"ctx.sleep_until takes a finite time, not {when!r}")
    return float(when)


def waiting(node: str, until: float) -> dict[str, Any]:
    """A sleeping run's ``waiting``."""
    return {"type": Waiting.TIMER.value, "node_id": node, "until": until}


def request(*, run_id: str, timer_id: str, node: str, task: str, digest: str,
            until: float, version: int, now: float) -> ApprovalRequested:
    """The record that makes a timer durable (nobody decides it: ``allowed`` is empty)."""
    return ApprovalRequested(
        run_id=run_id, approval_id=timer_id, kind=Waiting.TIMER.value, node=node, task=task,
        action=f"sleep until {datetime.fromtimestamp(until).astimezone().isoformat()}",
        payload={"until": until}, digest=digest, state_version=version, allowed=[],
        requested_at=now)


def until_of(req: ApprovalState) -> float:
    """A stored timer's due time."""
    return float(req.payload["until"])


def waiting_until(head: RunHead) -> float | None:
    """A paused run's deadline, ``waiting["until"]``: a timer's due time, a signal
    wait's timeout (None: it has none)."""
    until = (head.waiting or {}).get("until")
    return None if until is None else float(until)


def due_at(head: RunHead) -> float | None:
    """When a sleeping run's timer is due (None for a run that does not sleep)."""
    return waiting_until(head) if head.status == Status.SLEEPING else None


def is_due(head: RunHead, now: float) -> bool:
    """A sleeping run whose due time has come (a head without one is due: resume finds out)."""
    until = due_at(head)
    return until is None or now >= until


def run_ended(reader: Reader, run_id: str) -> bool:
    """The timer's run finished (a cancelled run's timer waits for nothing: not pending)."""
    head = reader.head(run_id)
    return head is None or head.status in FINISHED


def earliest_key(waiting: dict[str, Any]) -> float:
    """Sorts several items' timers by due time (the run wakes at the first; the others
    pause it again until theirs)."""
    return float(waiting.get("until", math.inf))
