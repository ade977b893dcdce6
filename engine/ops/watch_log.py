"""What a watcher says it does: one method per event, as a line of text or of JSON.

An operator reads the text (``HH:MM:SS run r-1: DONE``); a log shipper reads
``--log-json``: one JSON object per line with ``ts`` (ISO-8601, UTC), ``event``
and the event's fields (``run_id``, ``flow``, ``status``, ``reason``...). Both
come from the same call, so the two never say different things. Other watcher
features (schedules, child runs) add their events with ``event(...)``.

Statuses are printed as the records spell them (upper case), like every other
command; the verbs (``started``, ``resumed``, ``fenced``, ``skipped``) are words.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..base.render import to_json
from ..base.vocabulary import Status, Waiting
from ..run.run_view import RunView
from ..storage import attention
from ..storage.index import RunHead
from ..storage.store import Reader


def iso_now(now: float | None = None) -> str:
    """``now`` (default: the wall clock) as ISO-8601 in UTC, to the millisecond."""
    at = time.time() if now is None else now
    when = datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
    return when.isoformat(timespec="milliseconds")


def one_line(text: str | None) -> str | None:
    """The line of an error that says what it was (a traceback's last), or None."""
    if not text:
        return None
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None


class WatchLog:
    """Where a watcher's events go: ``emit`` gets each finished line (text or JSON).

    Thread-safe: the inbox loop, the waker and every worker thread say things.
    """

    def __init__(self, emit: Callable[[str], None] = print, *, as_json: bool = False,
                 stamp: bool = True, clock: Callable[[], float] = time.time) -> None:
        self._emit, self.as_json, self.stamp, self._clock = emit, as_json, stamp, clock
        self._lock = threading.Lock()

    def event(self, name: str, text: str, **fields: Any) -> None:
        """Say one event: ``text`` for people, ``name`` and ``fields`` for JSON (None
        fields are left out)."""
        now = self._clock()
        if self.as_json:
            body = {"ts": iso_now(now), "event": name,
                    **{k: v for k, v in fields.items() if v is not None}}
            line = to_json(body, indent=None)
        else:
            line = f"{time.strftime('%H:%M:%S', time.localtime(now))} {text}" if self.stamp \
                else text
        with self._lock:
            self._emit(line)

    def note(self, text: str) -> None:
        """Anything else a watcher says (a warning, a worker error): event ``note``."""
        self.event("note", text, message=text)

    # -- the watcher itself ---------------------------------------------------------
    def watching(self, *, home: object, flows: Iterable[str], inbox: Path | None,
                 inbox_mode: str, workers: int, once: bool = False) -> None:
        names = sorted(flows)
        where = "no inbox" if inbox is None else f"inbox {inbox}" if once else \
            f"inbox {inbox} ({inbox_mode})"
        how = "once, one run at a time" if once else \
            f"{workers} worker{'s' if workers != 1 else ''}"
        self.event("watch_started",
                   f"watching {home}: flows {', '.join(names) or '(none)'}; {where}; {how}",
                   home=str(home), flows=names, inbox=None if inbox is None else str(inbox),
                   inbox_mode=inbox_mode, workers=workers, once=once)

    def ready(self) -> None:
        self.event("ready", "ready: serving")

    def stopping(self, signal_name: str, grace: float) -> None:
        self.event("stopping", f"signal {signal_name}: stopping at the next boundary "
                   f"(at most {grace:.0f}s; a second Ctrl-C exits at once)",
                   signal=signal_name, grace=grace)

    def forced(self, signal_name: str) -> None:
        self.event("forced_exit", f"signal {signal_name} again: exiting now; runs in "
                   "progress keep their lease and are recovered as orphans",
                   signal=signal_name)

    def stopped(self) -> None:
        self.event("watch_stopped", "watcher stopped; runs left resumable")

    # -- inbox files ----------------------------------------------------------------
    def file(self, name: str, *, accepted: bool, reason: str, duplicate: bool = False,
             approval_id: str | None = None, run_id: str | None = None) -> None:
        """One inbox file: recorded here, a duplicate of what is recorded (this watcher
        recorded nothing), or rejected with the reason."""
        if not accepted:
            self.event("file_rejected", f"file rejected: {name} ({reason})", file=name,
                       reason=reason, approval_id=approval_id, run_id=run_id)
        elif duplicate:
            self.event("file_duplicate", f"file accepted: {name} ({reason}; nothing recorded "
                       "by this watcher)", file=name, reason=reason, approval_id=approval_id,
                       run_id=run_id)
        else:
            on = f" for run {run_id}" if run_id else ""
            self.event("decision_recorded", f"file accepted: {name} ({reason}{on})", file=name,
                       reason=reason, approval_id=approval_id, run_id=run_id)

    # -- runs -----------------------------------------------------------------------
    def run_started(self, run_id: str, flow: str, *, was: str) -> None:
        """The watcher took the run's lease: a new run (PENDING) or one resumed."""
        if was == Status.PENDING:
            self.event("run_started", f"run {run_id}: started (flow {flow})", run_id=run_id,
                       flow=flow, was=was)
        else:
            self.event("run_resumed", f"run {run_id}: resumed from {was} (flow {flow})",
                       run_id=run_id, flow=flow, was=was)

    def run_stopped(self, run_id: str, flow: str, status: str, *, waiting: Any = None,
                    reason: str | None = None, error: str | None = None) -> None:
        """Where a run the watcher advanced stopped: paused, finished, failed, interrupted."""
        status = Status.of(status)
        if status == Status.FAILED:
            why = one_line(error) or reason or "no reason recorded"
            if reason and one_line(error) and reason not in why:
                why = f"{reason}: {why}"
            self.event("run_failed", f"run {run_id}: {status}: {why}", run_id=run_id,
                       flow=flow, status=status, reason=why)
        elif status.finished:
            self.event("run_finished", f"run {run_id}: {status}", run_id=run_id, flow=flow,
                       status=status)
        elif status == Status.INTERRUPTED:
            self.event("run_interrupted", f"run {run_id}: {status} (the watcher is stopping; "
                       "resumable)", run_id=run_id, flow=flow, status=status)
        elif status == Status.RUNNING:  # another worker went on with it meanwhile
            self.event("run_left", f"run {run_id}: {status} under another worker",
                       run_id=run_id, flow=flow, status=status)
        else:
            on = waits_for(waiting)
            self.event("run_paused", f"run {run_id}: {status}" + (f" (waiting on {on})"
                                                                   if on else ""),
                       run_id=run_id, flow=flow, status=status, waiting=waiting, reason=on)

    def run_fenced(self, run_id: str, flow: str, reason: str) -> None:
        """Another worker took the lease over while this one ran: it wrote nothing more."""
        self.event("run_fenced", f"run {run_id}: fenced off, another worker has it now "
                   f"({reason})", run_id=run_id, flow=flow, reason=reason)

    def run_skipped(self, run_id: str, flow: str | None, reason: str,
                    holder: str | None = None) -> None:
        """A run this watcher left alone: another worker holds it."""
        self.event("run_skipped", f"run {run_id}: skipped, {reason}", run_id=run_id,
                   flow=flow, reason=reason, holder=holder)

    def run_blocked(self, run_id: str, reason: str) -> None:
        self.event("run_blocked", f"run {run_id}: blocked, recorded on the run; serving the "
                   f"others: {reason}", run_id=run_id, reason=reason)

    def run_given_up(self, run_id: str, reason: str) -> None:
        self.event("run_failed", f"run {run_id}: {Status.FAILED}, not resumed: {reason}",
                   run_id=run_id, status=Status.FAILED, reason=reason, resumed=False)


def waits_for(waiting: Any) -> str | None:
    """What a paused run waits on, in words: its approval or question, its signal, its
    timer."""
    if not isinstance(waiting, dict):
        return None
    kind = waiting.get("type")
    if waiting.get("approval_id"):
        return f"{kind or 'decision'} {waiting['approval_id']}"
    if kind == Waiting.SIGNAL and waiting.get("name"):
        return f"signal {waiting['name']!r}"
    if "until" in waiting:
        return f"a timer due at {iso_now(waiting['until'])}"
    return str(kind) if kind else None


def leased_elsewhere(reader: Reader, owner: str, now: float) -> list[tuple[RunHead, str]]:
    """Runs not finished whose live lease another worker holds, and why they are skipped
    (``--once`` says so rather than leaving them out silently)."""
    out = []
    for run_id in attention.run_ids(reader):
        head = reader.head(run_id)
        if head is None or head.status != Status.RUNNING or head.lease_owner in (None, owner):
            continue
        view = RunView(reader, head)
        if view.lease_live():
            out.append((head, f"worker {head.lease_owner} holds its lease for "
                              f"{view.lease_left():.1f}s more"))
    return out
