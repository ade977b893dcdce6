"""The words bide's records use for where things stand, as str enums.

Records store plain strings (the enums are ``str`` subclasses, so the encoded
bytes are the same); code compares against these members, never raw literals,
so a misspelling is an AttributeError rather than a branch that never runs
(``tests/test_vocabulary.py`` greps for raw literals).
"""

from __future__ import annotations

from enum import Enum

from .errors import UnknownStatus


class _Word(str, Enum):
    """A word that prints as itself (``str(Status.DONE) == "DONE"``), in messages too."""

    def __str__(self) -> str:
        return self.value


class Status(_Word):
    """A run's status; values equal names so they print and compare as plain strings."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    WAITING_INPUT = "WAITING_INPUT"  # ``ctx.ask``: a person's answer (a value)
    SLEEPING = "SLEEPING"  # ``ctx.sleep``: a durable timer; a watcher resumes it when due
    WAITING_SIGNAL = "WAITING_SIGNAL"  # ``ctx.wait_for``: a signal (engine/run/signals.py)
    WAITING_CHILD = "WAITING_CHILD"  # ``ctx.child``: child runs to end (engine/run/children.py)
    NEEDS_RECONCILIATION = "NEEDS_RECONCILIATION"
    INTERRUPTED = "INTERRUPTED"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @classmethod
    def of(cls, value: Status | str) -> Status:
        """``value`` as a Status: a Status, or its name in any case.

        Raises:
            UnknownStatus: any other value, naming the valid ones (a filter on a
                misspelt status would otherwise match nothing, silently).
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.strip().upper() in cls.__members__:
            return cls[value.strip().upper()]
        raise UnknownStatus(value, list(cls.__members__))

    @property
    def finished(self) -> bool:
        """Nothing more will happen to the run (the watcher and recover leave it)."""
        return self in FINISHED

    @property
    def waiting(self) -> bool:
        """The run waits for something from outside: a decision, an answer, a signal."""
        return self in WAITING


FINISHED = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED})
WAITING = frozenset({Status.WAITING_APPROVAL, Status.WAITING_INPUT, Status.WAITING_SIGNAL,
                     Status.WAITING_CHILD, Status.NEEDS_RECONCILIATION})


class IntentStatus(_Word):
    """Where a tool call's intent stands (``bide log``, ``engine.intents``)."""

    PREPARED = "prepared"  # recorded before the call; no outcome yet
    COMPLETED = "completed"  # the call returned; its result is recorded
    FAILED = "failed"  # the call raised; its error is recorded
    UNKNOWN = "unknown"  # the worker died mid-call; a person must reconcile it
    RESOLVED = "resolved"  # a person reconciled it (mark_done, retry or abort)


class Decision(_Word):
    """What a person may decide: approvals take APPROVE/REJECT, questions (``ctx.ask``)
    ANSWER/REJECT, reconciliations MARK_DONE/RETRY/ABORT."""

    APPROVE = "approve"
    REJECT = "reject"
    MARK_DONE = "mark_done"
    RETRY = "retry"
    ABORT = "abort"
    ANSWER = "answer"  # carries the value (``engine.answer``, ``bide answer``)
    ELAPSED = "elapsed"  # a timer's due time came (recorded by bide, never by a person)


IN_DOUBT = frozenset({IntentStatus.PREPARED, IntentStatus.UNKNOWN})  # no outcome known yet
# What a request's ``allowed`` lists: plain strings, as its record stores them.
APPROVAL_DECISIONS = (Decision.APPROVE.value, Decision.REJECT.value)
RECONCILE_DECISIONS = (Decision.MARK_DONE.value, Decision.RETRY.value, Decision.ABORT.value)
INPUT_DECISIONS = (Decision.ANSWER.value, Decision.REJECT.value)
BIDE_DECISIONS = (Decision.ELAPSED.value,)  # only bide records these: a timer allows none


class Waiting(_Word):
    """What a paused run waits for: ``run.waiting["type"]`` (and a request's kind)."""

    APPROVAL = "approval"
    INPUT = "input"
    RECONCILIATION = "reconciliation"
    TIMER = "timer"  # ``ctx.sleep``: its request's payload holds the due time
    SIGNAL = "signal"  # ``ctx.wait_for``: no request; the run's signal queue
    CHILD = "child"  # ``ctx.child``: no request; the child runs' heads


def pause_status(kinds: set[str]) -> Status:
    """The status of a run paused by waits of these kinds, the most pressing one: a tool
    call in doubt, then an approval, a question, a signal, a child run, a timer (``bide
    pending`` lists them all; a timer never holds the place of a wait for something from
    outside).

    A child run ranks below what only someone outside can give (a decision, an answer,
    a signal: the status tells an operator what to do) and above a timer: a child ends
    by itself, like a timer, but at no time known in advance, and its end is a commit
    that wakes the parent; a timer's due time is known, so waking for it alone would
    only pause the run again while its children still run."""
    if Waiting.RECONCILIATION in kinds:
        return Status.NEEDS_RECONCILIATION
    if not kinds or kinds - {Waiting.INPUT.value, Waiting.SIGNAL.value, Waiting.CHILD.value,
                             Waiting.TIMER.value}:
        return Status.WAITING_APPROVAL
    if Waiting.INPUT in kinds:
        return Status.WAITING_INPUT
    if Waiting.SIGNAL in kinds:
        return Status.WAITING_SIGNAL
    if Waiting.CHILD in kinds:
        return Status.WAITING_CHILD
    return Status.SLEEPING

# the reason on a run that cannot go on for a reason of its own (``blocking``); the
# wake-ups of a commit (``wakeups``, in the store layer) compare against it too
BLOCKED = "blocked: cannot be resumed until the error below is fixed (the run's data is kept)"

# The flow of a LangGraph thread's run (``bide.langgraph``): the saver creates it, its
# graph (not a bide Flow) advances it.
LANGGRAPH = "langgraph"
