"""Tool outcomes, and the checkpoints that ride in the run's next commit.

By default (``Policy.tool_outcomes="at_return"``) a tool's outcome is committed
before ``ctx.tool`` returns: ``hold`` commits it at once, with anything held for the
run. What rides instead is the step's checkpoint: a tool loop's checkpoint is held
(``hold_checkpoint``) and rides in the next step's prepare, so a tool step costs
two durable commits (prepare, outcome), and a crash before the held checkpoint is
durable redoes the step, whose call then replays its recorded result.

With ``tool_outcomes="with_next_commit"`` (an explicit opt-in) the outcome itself
is held, as described below: one commit per tool step, for a window in which a
crash leaves the call outcome unknown.

A tool call used to cost two durable commits of its own (prepared, completed)
besides the node's. The prepared record must be durable before the call; the
completion need not have its own: it is held here and committed in the same
transaction as the task's next commit (its next call's prepare, its pending
write, or the checkpoint), which in a tool-then-return node follows at once.

The window in which a crash leaves the outcome unknown is what it was: from
the tool's effect until a commit carrying the outcome is durable. If no commit
of the task follows within ``HOLD_BOUND`` (the node keeps computing, sleeps,
blocks), a flusher thread commits the held outcomes alone, under the run's
fence, so a slow node never keeps an outcome in memory for longer than that.

A commit that carries a task's outcomes waits for a flush of that task's
outcomes already under way, so a task's output is never durable before the
outcomes it was computed from.

A superstep's checkpoint that would carry held outcomes is held with them
(``hold_checkpoint``) and rides in the run's next commit, whichever task makes
it: in a loop of tool steps, the next step's prepare. A tool step then costs one
durable commit, not two. It changes no outcome's window: the checkpoint never
moves the flush due time, which the oldest held outcome set, and every commit
of the run carries it, so nothing of the next superstep is durable before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from ...formats import Record
from ..base import faults
from ..base.errors import BideError

HOLD_BOUND = 0.002  # seconds a held outcome waits for a commit to ride in
_POLL_FOR = 0.05  # seconds the flusher polls after a hold before it sleeps until woken
_WAIT_LIMIT = 60.0  # a flush never takes this long; waiting longer is a bug, not a state

Commit = Callable[[Sequence[Record]], list[int]]
_NONE: frozenset[str] = frozenset()
RUN = ""  # records held for the run's next commit, whichever task (or none) makes it


class HeldOutcomes:
    """The run's tool outcomes that are not durable yet, by task.

    ``commit`` is the run's fenced commit; every commit of the run goes through
    ``carry`` so held outcomes ride in it.
    """

    def __init__(self, commit: Commit, *, bound: float | None = None, name: str = "run",
                 at_return: bool = True) -> None:
        self._commit = commit
        self._at_return = at_return  # outcomes commit in ``hold``; only checkpoints ride
        self._bound = HOLD_BOUND if bound is None else bound
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the flusher waits on this
        self._free = threading.Condition(self._lock)  # a commit waiting for a flush to end
        self._asleep = False  # the flusher waits for a hold (else it polls or waits for a due)
        self._last_hold = 0.0
        self._held: dict[str, list[Record]] = {}
        self._holders: set[str] = set()  # tasks that held an outcome since ``take_holders``
        self._on_commit: dict[int, Callable[[int], None]] = {}  # id(record) -> told its seq
        self._due: float | None = None  # monotonic time the oldest held outcome must flush
        self._busy: set[str] = set()  # tasks whose outcomes are in a commit under way
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stuck = False  # a flush failed: leave the outcomes to the task's next commit

    def hold(self, task: str, record: Record) -> None:
        """Keep ``record`` (an outcome) to ride in ``task``'s next commit, or flush it soon;
        ``at_return``: commit it now (with what the run holds), durable when this returns."""
        if self._at_return:
            with self._lock:
                self._holders.add(task)  # a tool caller: its step's checkpoint may ride
            self.carry([record], task)
            faults.point("after_intent_completed")
            return
        with self._lock:
            self._held.setdefault(task, []).append(record)
            self._holders.add(task)
            self._last_hold = now = time.monotonic()
            if self._due is None:
                self._due = now + self._bound
            self._start_flusher()
        faults.point("outcome_held")

    def hold_checkpoint(self, record: Record, on_commit: Callable[[int], None]) -> bool:
        """Hold a checkpoint to ride with the outcomes it carries; False if none is held
        (a flush took them, or there were none): then commit it now.

        ``on_commit`` is told the record's seq once a commit carried it.
        """
        with self._lock:
            if RUN in self._held or (not self._held and not self._at_return):
                return False
            # the outcomes and the checkpoint that carries them ride as one
            riders = [rec for recs in self._held.values() for rec in recs]
            self._held = {RUN: [*riders, record]}
            self._on_commit[id(record)] = on_commit
            if self._due is None:  # at_return: nothing else set when it must be flushed
                self._due = time.monotonic() + self._bound
            self._start_flusher()
        faults.point("checkpoint_held")
        return True

    def take_holders(self) -> frozenset[str] | set[str]:
        """The tasks that held an outcome (called a tool) since the last call; forgets them."""
        if not self._holders:  # no tool called: only this run's tasks add to it, and they ended
            return _NONE
        with self._lock:
            holders, self._holders = self._holders, set()
        return holders

    def flush(self) -> None:
        """Commit everything held now (before a commit that needs the held checkpoint's seq)."""
        self.carry([])

    def carry(self, records: Sequence[Record], task: str | None = None) -> list[int]:
        """Commit ``records`` with ``task``'s held outcomes (every task's if None).

        Returns the seqs of ``records`` only, in order. If the commit fails, the
        outcomes stay held for the next one.
        """
        if not self._held and not self._busy:  # nothing held, no flush under way: alone
            return self._commit(records) if records else []
        riders, taken = self._take(task)
        if not riders and not records:
            return []
        try:
            if riders:
                faults.point("outcome_rides")
            seqs = self._commit([*riders, *records])
        except BaseException:
            self._put_back(taken)
            raise
        self._committed(riders, seqs)
        self._release(taken)
        if riders:
            faults.point("after_intent_completed")
        return seqs[len(riders):]

    def close(self) -> None:
        """The run's worker is done: stop the flusher; commit what is still held."""
        with self._lock:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(_WAIT_LIMIT)
        riders, taken = self._take(None)
        if not riders:
            return
        try:
            self._committed(riders, self._commit(riders))
        except BideError:  # lease lost or store failing: the outcome stays unknown, as a crash
            pass
        else:
            faults.point("after_intent_completed")
        finally:
            self._release(taken)

    # -- internals -----------------------------------------------------------
    def _start_flusher(self) -> None:
        """Start the flusher thread on the first hold, or wake it if it sleeps (called
        holding the lock); a polling flusher sees the hold by itself: no wake-up per call."""
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._flusher, daemon=True,
                                             name=f"bide-held-{self._name}")
            self._thread.start()
        elif self._asleep:
            self._wake.notify()

    def _take(self, task: str | None) -> tuple[list[Record], dict[str, list[Record]]]:
        """Claim ``task``'s held outcomes (every task's if None) once no flush has them."""
        deadline = time.monotonic() + _WAIT_LIMIT
        with self._lock:
            while self._busy and (task is None or task in self._busy or RUN in self._busy):
                if not self._free.wait(deadline - time.monotonic()):
                    raise RuntimeError(f"bide: a flush of {self._name}'s tool outcomes hung")
            # in the order held: a held checkpoint after the outcomes it carries
            names = [t for t in self._held if task is None or t in (task, RUN)]
            self._busy.update(names)  # before they leave _held: ``carry`` reads both unlocked
            taken = {t: self._held.pop(t) for t in names}
            if not self._held:
                self._due = None
            return [rec for recs in taken.values() for rec in recs], taken

    def _put_back(self, taken: dict[str, list[Record]]) -> None:
        """A commit carrying ``taken`` failed: they are held again, ahead of newer ones."""
        with self._lock:
            for t, recs in taken.items():
                self._held[t] = recs + self._held.get(t, [])
            if taken and self._due is None:
                self._due = time.monotonic() + self._bound
            self._busy.difference_update(taken)
            self._free.notify_all()
            self._wake.notify()

    def _committed(self, riders: list[Record], seqs: list[int]) -> None:
        """Tell each ridden record's ``on_commit`` (a held checkpoint) its seq."""
        if not self._on_commit:
            return
        for rec, seq in zip(riders, seqs, strict=False):
            told = self._on_commit.pop(id(rec), None)
            if told is not None:
                told(seq)

    def _release(self, taken: dict[str, list[Record]]) -> None:
        if not taken:
            return
        with self._lock:
            self._busy.difference_update(taken)
            self._stuck = False  # a commit went through: the flusher may try again
            self._free.notify_all()

    def _flusher(self) -> None:
        while self._wait_due():
            riders, taken = self._take(None)
            if not riders:
                continue
            try:
                faults.point("before_outcome_flush")
                self._committed(riders, self._commit(riders))
            except Exception:  # nobody to raise to in this thread: the outcomes go back
                # and ride the task's next commit, which raises the error where it is seen
                with self._lock:
                    self._stuck = True
                self._put_back(taken)
                continue
            self._release(taken)
            try:
                faults.point("after_intent_completed")
            except faults.InjectedFault:  # "raise" mode: nobody to raise to in this thread
                pass

    def _wait_due(self) -> bool:
        """Sleep until held outcomes are due (True) or the worker is done (False).

        While calls keep coming (a hold within ``_POLL_FOR``) the flusher polls
        every ``bound`` instead of being woken by each hold: a thread wake-up per
        call cost more than a ``fast`` commit.
        """
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                if self._due is not None and not self._stuck:
                    if now >= self._due:
                        return True
                    self._wake.wait(self._due - now)
                elif now - self._last_hold < _POLL_FOR:
                    self._wake.wait(self._bound)
                else:
                    self._asleep = True
                    self._wake.wait()
                    self._asleep = False
            return False
