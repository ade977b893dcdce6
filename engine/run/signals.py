"""Signals: a durable per-run queue that ``ctx.wait_for`` takes from, one per wait.

``engine.signal`` (or ``bide signal``) appends ``SignalSent`` to the run's log,
whether or not a node waits yet. A wait takes the oldest signal of its name that no
wait took and commits ``SignalConsumed`` naming it and the waiting call (task and
call index): a node that runs again after a crash finds its own consumption and
returns the same data, and no other wait can take that signal. Only the worker
holding the run's lease consumes (the commit is fenced), and its tasks choose under
one lock per run, so two parallel waits never take the same signal.

The queue is read from the run's own log entries (``run_entries`` filtered by
type, then only signal records decoded): no derived table, so every store holds it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...formats import SignalAwaited, SignalConsumed, SignalSent, check_serializable
from ..base import faults
from ..base.errors import Nondeterminism, Paused, SignalRefused, UnknownRun
from ..base.vocabulary import Status, Waiting
from ..storage.index import RunHead
from ..storage.store import Reader, Store

if TYPE_CHECKING:
    from .step import StepScope

_TYPES = frozenset({SignalSent.TYPE, SignalAwaited.TYPE, SignalConsumed.TYPE})
Call = tuple[str, int]  # (task, call index): one wait_for call of one node


@dataclass
class Queue:
    """One run's signals as its log holds them."""

    sent: dict[int, SignalSent] = field(default_factory=dict)  # by seq, in log order
    awaited: dict[Call, SignalAwaited] = field(default_factory=dict)
    consumed: dict[Call, SignalConsumed] = field(default_factory=dict)

    @classmethod
    def read(cls, reader: Reader, run_id: str) -> Queue:
        q = cls()
        for seq, rtype in reader.run_entries(run_id):
            if rtype not in _TYPES:
                continue
            match reader.record(seq):
                case SignalSent() as s:
                    q.sent[seq] = s
                case SignalAwaited() as a:
                    q.awaited.setdefault((a.task, a.index), a)  # the first pause fixes `until`
                case SignalConsumed() as c:
                    q.consumed[(c.task, c.index)] = c
        return q

    def next(self, name: str) -> int | None:
        """The seq of the oldest signal ``name`` no wait took, or None."""
        taken = {c.signal for c in self.consumed.values()}
        return next((seq for seq, s in self.sent.items() if s.name == name and seq not in taken),
                    None)

    def unconsumed(self) -> list[tuple[int, SignalSent]]:
        taken = {c.signal for c in self.consumed.values()}
        return [(seq, s) for seq, s in self.sent.items() if seq not in taken]


def ready(reader: Reader, head: RunHead, now: float) -> bool:
    """Can a WAITING_SIGNAL run go on: its signal is there, or its wait timed out?"""
    waiting = head.waiting or {}
    until = waiting.get("until")
    if until is not None and now >= until:
        return True
    name = waiting.get("name")
    return name is not None and Queue.read(reader, head.run_id).next(name) is not None


def accepting(r: Reader, run_id: str, name: str) -> None:
    """Can the run still take signal ``name``? The API and signal files both check it
    in the commit that records the signal.

    Raises:
        UnknownRun. SignalRefused: the run is DONE or CANCELLED.
    """
    head = r.head(run_id)
    if head is None:
        raise UnknownRun(run_id)
    if head.status in (Status.DONE, Status.CANCELLED):
        raise SignalRefused(run_id, name, f"the run is {head.status}; no wait will ever "
                            "take it")


def send(store: Store, run_id: str, name: str, data: Any = None, *, now: float,
         by: str | None = None, file: str | None = None) -> int:
    """Append a signal to the run's queue in one commit; its log seq.

    Raises:
        UnknownRun. SignalRefused: the run is DONE or CANCELLED, or ``name`` is empty.
        NotSerializable: ``data`` is not a value bide keeps.
    """
    if not isinstance(name, str) or not name:
        raise SignalRefused(run_id, str(name), "a signal needs a non-empty name")
    check_serializable(data, f"the data of signal {name!r}")
    seq = store.commit([SignalSent(run_id=run_id, name=name, data=data, by=by, file=file,
                                   at=now)], check=lambda r: accepting(r, run_id, name))[0]
    faults.point("after_signal_sent")
    return seq


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextmanager
def _choosing(run_id: str) -> Iterator[None]:
    """One wait of a run chooses its signal at a time (its tasks share this process)."""
    with _locks_guard:
        lock = _locks.setdefault(run_id, threading.Lock())
    with lock:
        yield


def wait(scope: StepScope, node: str, task: str, index: int, name: str,
         timeout: float | None, default: Any) -> Any:
    """``ctx.wait_for``: the data of the signal this call took, taking one if it has none;
    ``default`` once timed out; else pause the run (WAITING_SIGNAL)."""
    with _choosing(scope.run_id):
        with scope.reader() as r:
            q = Queue.read(r, scope.run_id)
        mine = q.consumed.get((task, index))
        if mine is not None and not faults.switch("no_signal_replay"):
            if mine.name != name:
                raise Nondeterminism(node, index, f"wait_for({mine.name!r})",
                                     f"wait_for({name!r})")
            return default if mine.signal < 0 else q.sent[mine.signal].data
        now = scope.clock()
        awaited = q.awaited.get((task, index))
        until = awaited.until if awaited is not None else (
            None if timeout is None else now + timeout)
        seq = q.next(name)
        if seq is not None or (until is not None and now >= until):
            scope.commit([SignalConsumed(run_id=scope.run_id, task=task, index=index, name=name,
                                         signal=-1 if seq is None else seq, at=now)], task=task)
            faults.point("after_signal_consumed")
            return default if seq is None else q.sent[seq].data
    waiting: dict[str, Any] = {"type": Waiting.SIGNAL.value, "name": name, "node_id": node}
    if until is not None:
        waiting["until"] = until
    raise Paused(waiting, [] if awaited is not None else [SignalAwaited(
        run_id=scope.run_id, task=task, index=index, name=name, until=until, at=now)])


# -- what the read commands show ----------------------------------------------------------
def when(ts: float) -> str:
    """An absolute time as the read commands print it (UTC)."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def waiting_text(waiting: dict[str, Any]) -> str:
    """``bide runs``'s WAITING ON for a run waiting for a signal."""
    until = waiting.get("until")
    return (f"signal {waiting.get('name')!r} ({waiting.get('node_id')})"
            + (f" until {when(until)}" if until is not None else ""))


def describe(record: SignalSent | SignalAwaited | SignalConsumed) -> str:
    """One signal record, as ``bide log`` shows it."""
    from ..base.render import preview

    match record:
        case SignalSent():
            return (f"{record.name!r} sent by {record.by or '?'}"
                    + (f" (file {record.file})" if record.file else "")
                    + f": {preview(record.data, 40)}")
        case SignalAwaited():
            return (f"{record.name!r} awaited by {record.task}#{record.index}"
                    + (f" until {when(record.until)}" if record.until is not None else ""))
    if record.signal < 0:
        return f"{record.name!r} timed out for {record.task}#{record.index}: its default"
    return f"{record.name!r} taken by {record.task}#{record.index}: the signal at #{record.signal}"


def pending_rows(reader: Reader, run_ids: Iterable[str]) -> list[dict[str, Any]]:
    """``bide pending``'s rows for the runs among ``run_ids`` that wait for a signal: the
    keys of a decision's row (``approval_id`` None, ``expires_at`` the deadline) plus
    ``signal`` and ``until``."""
    rows: list[dict[str, Any]] = []
    for run_id in run_ids:
        head = reader.head(run_id)
        if head is None or head.status != Status.WAITING_SIGNAL:
            continue
        w = head.waiting or {}
        q = Queue.read(reader, run_id)
        since = min((a.at for a in q.awaited.values() if a.name == w.get("name")),
                    default=head.updated_at)
        rows.append({"approval_id": None, "run_id": run_id, "kind": Waiting.SIGNAL.value,
                     "node": w.get("node_id"), "action": f"signal {w.get('name')}",
                     "payload": None, "digest": None, "allowed": [], "tool": None,
                     "intent": None, "requested_at": since, "expires_at": w.get("until"),
                     "schema": None, "question": None, "signal": w.get("name"),
                     "until": w.get("until")})
    return rows
