"""``bide watch``: take decisions from the inbox and keep runs moving, under leases.

Two kinds of thread share the work. The inbox loop (the thread that calls
``serve``) waits for files to land in the inbox (``inbox_events``: blocked in
the kernel on Linux, watchfiles elsewhere), records the decisions that land
(a burst in one commit, see ``inbox``) and rescans for runs that can go on
(submitted by another process, orphaned, an approval expired) each ``rescan``
seconds, and at the earliest time a run it has seen can go on (a sleeping run's
due time, an approval's deadline, a lease's end: ``RunView.workable_at``), so a
timer is served on time without a rescan per timer; it never runs a node. It
offers those runs to ``workers`` worker threads (``dispatch``), which resume
them: a decision for an idle run is acted on while other runs' nodes are busy.
Runs whose flow has async nodes run on one event loop the watcher owns, so they
share it. A rescan reads only the runs not
finished (``attention``), so an idle watcher over a long history costs nothing.

On a store that announces changes (PostgreSQL's LISTEN/NOTIFY) the ``waker``
thread finds runs instead: offered the moment a commit on any host announces
them, looked at again when a lease or deadline they wait on ends, and a full
rescan only every ``rescan`` seconds (30 by default there); the inbox loop then
only takes files.

A third thread (``schedule_loop``) starts schedules' runs when their slots come and
offers them to the workers.

SIGINT/SIGTERM stop every worker at its next boundary; runs stay resumable. A
run that cannot go on for a reason of its own (a renamed node, an unknown flow, a
corrupt record) is recorded as blocked on that run and logged; the watcher
keeps serving the others (see ``blocking``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..api.runtime import Engine
from ..base.errors import StaleLease, StoreError
from ..base.offload import wait_on_loop
from ..base.vocabulary import Status
from ..human import signing
from ..human.inbox import MAX_BYTES, FileResult, Inbox
from ..human.inbox_events import InboxEvents
from ..run import children
from ..run.approvals import write_missing_requests
from ..run.recovery import RecoveredRun
from ..run.run_view import RunView
from ..run.runs import Run
from ..storage.index import RunHead
from .dispatch import OVERLAP_AFTER, Dispatcher
from .readiness import Readiness
from .schedule_loop import ScheduleLoop
from .waker import RESCAN, RETRY, Waker, survey
from .watch_log import WatchLog, leased_elsewhere

DEFAULT_WORKERS = 4
LOOP_END = 5.0  # seconds for a stopped loop's thread to end before it is run again
PAST_DUE = 0.002  # pass this long after a due time (a run is due once its time has come)


class Watcher:
    """Serve one home: inbox decisions in, runs resumed by up to ``workers`` threads at once
    (one while resumes are short; one more for each that runs past ``overlap_after``
    seconds: ``dispatch.py``).

    ``limits`` caps how many runs of a flow run at once (``{flow: n}``). What it does
    goes to ``events`` (``watch_log``; by default plain lines to ``log``); ``readiness``
    is told when it serves and when it stops.
    """

    DEFAULT_WORKERS = DEFAULT_WORKERS

    def __init__(self, engine: Engine, *, workers: int = DEFAULT_WORKERS,
                 overlap_after: float = OVERLAP_AFTER,
                 limits: Mapping[str, int] | None = None, poll: bool = False,
                 max_orphan_age: float = 86400.0, max_attempts: int = 5,
                 rescan: float | None = None, grace: float = 30.0,
                 log: Callable[[str], None] = print, events: WatchLog | None = None,
                 readiness: Readiness | None = None, inbox_max_bytes: int = MAX_BYTES) -> None:
        self.events = events or WatchLog(log, stamp=False)
        self.readiness = readiness or Readiness()
        log = self.events.note
        self._fenced: set[str] = set()  # runs whose fencing a worker said already
        # a store with changes() announces runs (PostgreSQL): rescans can be rare
        self._changes = getattr(engine.store, "changes", None)
        if rescan is None:
            rescan = RESCAN if self._changes is not None else 1.0
        if not rescan > 0:
            raise ValueError(f"rescan must be a number of seconds above 0, not {rescan!r}")
        self.engine, self.poll, self.rescan, self.log = engine, poll, rescan, log
        self.max_orphan_age, self.max_attempts, self.grace = max_orphan_age, max_attempts, grace
        self.dispatcher = Dispatcher(self._advance, workers=workers, limits=limits, log=log,
                                     overlap_after=overlap_after)
        self.inbox = Inbox(engine, on_recorded=self._offer_decided, max_bytes=inbox_max_bytes)
        self.stop = engine.stopping
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()  # running the loop again (``_run_loop_again``)
        self._events: InboxEvents | None = None
        self._waker: Waker | None = None
        self.schedules = ScheduleLoop(engine, self.dispatcher.offer, stop=self.stop, log=log)
        self._serving = False  # workers started by serve(): the inbox hands them runs
        self._inbox_failing = False  # the store refused the inbox's reads (said once)
        marker = signing.marker(engine.home, engine.store)
        if engine.approval_key is None and signing.requirement(marker) is not None:
            log(f"{engine.doors.home} requires signed decisions and this watcher has no key: "
                "every decision file will be refused; start it with --approval-key-file")

    def once(self) -> dict[str, Any]:
        """Process the inbox, then advance every run that can go on, one after another."""
        # A reader slot left by a killed process pins old pages until someone clears it;
        # a long-running watcher may be the only process that has the store open.
        self.engine.store.reader_check()
        self._say_watching("once", once=True)
        self._write_missing_requests()
        files = self._take_files()
        if not self.stop.is_set():
            self.schedules.fire(offer=False)  # due slots' runs: recovered below
        runs: list[Run] = []
        if not self.stop.is_set():  # engine.recover, saying each step
            report = self.engine._recover_all(self.max_orphan_age, self.max_attempts,
                                              resume=self._resume, told=self._log_entry)
            runs = report.advanced
            seen = {entry.run_id for entry in report.entries}
            with self.engine.store.reader() as r:
                held = leased_elsewhere(r, self.engine.owner, self.engine.clock())
            for head, why in held:
                if head.run_id in seen:
                    continue  # said above (fenced off it, say)
                self.events.run_skipped(head.run_id, head.flow, why, holder=head.lease_owner)
        return {"files": files, "runs": runs}

    def serve(self) -> None:
        """Run until SIGINT/SIGTERM (or ``stop`` is set), resuming runs on the workers."""
        # watching starts before the first listing: a file landing in between is not missed
        self._events = InboxEvents(self.inbox.dir, self.stop, rescan=self.rescan,
                                   poll=self.poll)
        self._install_signals()
        self._say_watching(self._events.kind)
        self._serving = True
        try:
            self._write_missing_requests()
            self._start()
            self._tick()
            self.events.ready()
            self.readiness.ready()
            for _landed in self._events:
                self._tick()
        finally:
            self._serving = False
            self.stop.set()
            self.readiness.stopping()
            if self._waker is not None and not self._waker.join(self.grace):
                self.log("the waker did not stop in time")
            self.schedules.join(self.grace)
            self._finish()
        self.events.stopped()
        if self._waker is not None and self._waker.failure is not None:
            raise self._waker.failure  # exit non-zero: a supervisor restarts it

    def _say_watching(self, inbox_mode: str, *, once: bool = False) -> None:
        self.events.watching(home=self.engine.doors.home,
                             flows=[*self.engine.flows,
                                    *(f"{g} (LangGraph)" for g in self.engine._graphs())],
                             inbox=self.inbox.dir, inbox_mode=inbox_mode,
                             workers=self.dispatcher.workers, once=once)

    def _write_missing_requests(self) -> None:
        """Request files a killed worker left unwritten, written again (``approvals``)."""
        with self.engine.store.reader() as r:
            waiting = [a for a in r.approvals() if a.decision is None]
        for path in write_missing_requests(self.engine.doors, waiting, self.engine.clock()):
            self.log(f"request file {path.name} written again: the worker that paused "
                     "its run stopped before writing it")

    # -- the inbox loop -------------------------------------------------------------
    def _tick(self) -> None:
        """Record what landed in the inbox; offer the workers every run that can go on."""
        if self.stop.is_set():  # stopping: files wait for the next watcher
            return
        self.engine.store.reader_check()
        try:
            self._take_files()
        except StoreError as exc:  # the server away (restarting): claimed files wait in .work/
            self._inbox_away(exc)
            return
        self._inbox_failing = False
        if self.stop.is_set() or self._waker is not None:
            return  # the waker finds the runs when the store announces changes
        ready, later = survey(self.engine)
        for head in ready:
            self.dispatcher.offer(head.run_id, head.flow)
        if later and self._events is not None:  # e.g. a sleeping run's due time
            soonest = min(at for at, _ in later) - self.engine.clock()
            self._events.pass_by(time.monotonic() + max(0.0, soonest) + PAST_DUE)

    def _inbox_away(self, exc: StoreError) -> None:
        """Say once per outage that files cannot be taken now; look again in ``RETRY`` s."""
        if not self._inbox_failing:
            self.log(f"inbox: cannot take decision files now ({exc}); trying again")
        self._inbox_failing = True
        if self._events is not None:
            self._events.pass_by(time.monotonic() + RETRY)

    def _offer_decided(self, run_ids: list[str]) -> None:
        """Runs whose decisions were just recorded go first (someone waits for them).

        Called by the inbox right after its commit; ``once()`` resumes them itself.
        """
        if not self._serving or self.stop.is_set():
            return
        with self.engine.store.reader() as r:
            heads = [h for run_id in run_ids if (h := r.head(run_id)) is not None]
        for head in heads:
            self.dispatcher.offer(head.run_id, head.flow)

    def _take_files(self) -> list[FileResult]:
        files = self.inbox.process()
        for f in files:
            self.events.file(f.name, accepted=f.accepted, reason=f.reason,
                             duplicate=f.duplicate, approval_id=f.approval_id, run_id=f.run_id)
        return files

    # -- the workers ----------------------------------------------------------------
    def _advance(self, run_id: str) -> None:
        """A worker's job: advance one run if it still can go on (an offer may be old)."""
        if self.stop.is_set():
            return  # leave it as it is: taking it now would only mark it interrupted
        with self.engine.store.reader() as r:
            head = r.head(run_id)
            if head is None or not self.engine.works_on(head) or \
                    not RunView(r, head).needs_work(self.engine.clock()):
                return
        outcome = self.engine._recover_one(head, self.max_orphan_age, self.max_attempts,
                                           resume=functools.partial(self._resume, head))
        if isinstance(outcome, Run):
            self._pass_by(outcome)
            for kin in children.to_offer(self.engine, outcome):  # no rescan: offered now
                self.dispatcher.offer(kin.run_id, kin.flow)
        else:
            self._log_entry(outcome)

    def _pass_by(self, run: Run) -> None:
        """A run this worker left sleeping: the inbox loop passes at its due time."""
        until = (run.waiting or {}).get("until") if run.status == Status.SLEEPING else None
        if until is not None and self._events is not None:
            self._events.pass_by(time.monotonic() + max(0.0, until - self.engine.clock())
                                 + PAST_DUE)

    def _is_async(self, flow: str) -> bool:
        found = self.engine.flows.get(flow)
        return found is not None and any(n.is_async for n in found.nodes.values())

    def _resume(self, head: RunHead, run_id: str) -> Run:
        """``engine.resume`` (its two steps), saying when this watcher takes the lease and
        when another worker fences it off, and where it stopped (nothing when this watcher
        did nothing: with two watchers, only the one that advanced a run says so). Async
        nodes of every run share the watcher's one event loop (``serve``; ``once`` has
        none and runs them as ``resume`` does)."""
        taken = self.engine._take(run_id)
        if isinstance(taken, Run):  # nothing to do yet (a decision still open, a timer not due)
            return children.carry_on(self.engine, taken)
        self.events.run_started(run_id, head.flow, was=head.status)
        try:
            if self._loop is not None and self._is_async(head.flow):
                self._run_loop_again()
                try:
                    run = wait_on_loop(asyncio.run_coroutine_threadsafe(
                        self.engine._aadvance(run_id, taken), self._loop), self._loop,
                        f"run {run_id} (the watcher's loop)")
                except RuntimeError:
                    if not self._loop.is_running():  # stopped under this run: its task was
                        self._run_loop_again(wait=LOOP_END)  # cancelled, and ends the run
                    raise  # INTERRUPTED (lease released) once the loop runs again
            else:
                run = self.engine._advance(run_id, taken)
        except StaleLease as exc:
            self._fenced.add(run_id)
            self.events.run_fenced(run_id, head.flow, str(exc))
            raise
        self._log_run(run)
        return run

    def _run_loop_again(self, wait: float = 0.0) -> None:
        """Run the async runs' loop again if its thread ended while the watcher serves (a
        node called ``loop.stop()``, a task raised ``SystemExit``): else every later async
        run of this watcher would fail, and a run stopped on it would keep its lease for
        ever. Its tasks go on where they were. ``wait``: seconds for the thread to end."""
        with self._loop_lock:
            thread = self._loop_thread
            if self._loop is None or thread is None or self.stop.is_set():
                return
            thread.join(wait)
            if thread.is_alive():
                return
            self.log("the event loop of async runs stopped (a node stopped it, or a task "
                     "raised SystemExit); running it again")
            self._loop_thread = _run_forever(self._loop)

    def _start(self) -> None:
        self.engine.inline_children = False  # the workers run child runs, side by side
        self._loop = asyncio.new_event_loop()
        self._loop_thread = _run_forever(self._loop)
        self.dispatcher.start()
        self.schedules.start()
        if self._changes is not None:  # LISTEN first, then the waker's first rescan
            try:
                changes = self._changes(self.stop)
            except StoreError:
                if self.stop.is_set():  # stopped while connecting in an outage: a stop as any
                    return
                raise
            self._waker = Waker(self.engine, changes, self.dispatcher.offer,
                                stop=self.stop, rescan=self.rescan, log=self.log)
            self._waker.start()

    def _finish(self) -> None:
        """Wait for the workers to reach their next boundary, then stop the event loop."""
        if not self.dispatcher.close(timeout=self.grace):
            self.log(f"workers still busy after {self.grace:.0f}s; leaving their runs to "
                     "recovery")
            return
        if self._loop is not None and self._loop_thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=self.grace)
            if not self._loop_thread.is_alive():
                self._loop.close()

    def _log_run(self, run: Run) -> None:
        self.events.run_stopped(run.run_id, run.flow, run.status, waiting=run.waiting,
                                reason=run.reason, error=run.error)

    def _log_entry(self, entry: RecoveredRun) -> None:
        if entry.outcome == "blocked" and entry.recorded_now:  # said once, not every rescan
            self.events.run_blocked(entry.run_id, entry.reason or "")
        elif entry.outcome == "given_up":
            self.events.run_given_up(entry.run_id, entry.reason or "")
        elif entry.outcome == "skipped" and entry.run_id not in self._fenced:
            self.events.run_skipped(entry.run_id, None, entry.reason or "")
        self._fenced.discard(entry.run_id)

    def _give_up(self) -> None:
        self.log("grace period over; exiting with runs left to recovery")
        os._exit(0)

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handle(signum: int, frame: Any) -> None:
            name = signal.Signals(signum).name
            if self.stop.is_set() and signum == signal.SIGINT:  # Ctrl-C twice: leave now
                self.events.forced(name)
                self.readiness.stopping()
                os._exit(130)
            self.events.stopping(name, self.grace)
            self.stop.set()
            if self._events is not None:
                self._events.wake()
            # A node that never returns must not keep the watcher alive: after the grace
            # period leave anyway; its run keeps its lease and is recovered as an orphan.
            timer = threading.Timer(self.grace, self._give_up)
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)


def _run_forever(loop: asyncio.AbstractEventLoop) -> threading.Thread:
    """The thread that runs the watcher's event loop for async runs, started."""
    thread = threading.Thread(target=loop.run_forever, name="bide-watch-loop", daemon=True)
    thread.start()
    return thread
