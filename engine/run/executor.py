"""One worker advancing one run: supersteps, folding, checkpoints, pauses, failure.

The worker holds the run's lease; every commit carries its fencing token, so
a worker that lost the lease cannot write.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...formats import (
    ApprovalRequested,
    Checkpoint,
    LeaseReleased,
    PendingWrite,
    Record,
    StatusChanged,
)
from ..base import faults
from ..base.errors import LeaseUnproven, Paused, StaleLease, StoreError, StoreFull
from ..base.offload import off_loop
from ..base.vocabulary import Status, Waiting, pause_status
from ..storage.call_refs import refer, shorten
from ..storage.store import Store
from . import timers
from .approvals import Doors, write_request_file
from .flow import Flow
from .full_disk import release_on_full_store
from .held import HeldOutcomes
from .lease_clock import LeaseClock
from .policy import Policy
from .renewer import renewer_for
from .send import Task, plan_tasks
from .state import DEFERRED, Op, fold
from .step import StepScope
from .task_threads import TaskThreads
from .tasks import TaskResult, arun_tasks, run_tasks

if TYPE_CHECKING:  # OpenTelemetry, loaded by a traced engine only
    from .tracing import RunSpan, StepSpan

_UNTRACED: AbstractContextManager[None] = nullcontext()  # reusable: no cost when off
log = logging.getLogger("bide.lease")

GEOMETRIC_MIN = 64  # deltas before the first full snapshot under the default policy
# Each default full snapshot comes at this many times the previous one's version.
# 4 (not 2): the newest state is read from the latest-state index, so full
# snapshots only bound replays of older versions, and spacing them by 4 cuts
# their bytes from ~1-2x to ~0.3-0.5x the payload on a growing state (WA flat in K).
GEOMETRIC_GROWTH = 4


@dataclass
class Cursor:
    """Where a run stands: everything a worker needs to take the next superstep."""

    version: int
    superstep: int
    state: dict[str, Any]
    next: list[str]
    seen: dict[str, dict[str, int]]
    base: int
    deltas: int
    base_version: int
    scan_from: int
    found: dict[str, tuple[int, PendingWrite]] = field(default_factory=dict)
    sends: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # the next map tasks
    sends_at: int = -1  # the seq of the checkpoint that stores them (-1: none yet)
    waits: dict[str, Paused] = field(default_factory=dict)  # tasks that would pause again


class Execution:
    """Runs a leased run until it is done, paused or failed."""

    def __init__(self, *, store: Store, doors: Doors, flow: Flow, run_id: str, token: int,
                 owner: str, policy: Policy, cursor: Cursor, clock: Callable[[], float],
                 lease_ttl: float, lease: LeaseClock) -> None:
        self.store, self.doors, self.flow, self.run_id = store, doors, flow, run_id
        self.token, self.owner, self.policy, self.clock = token, owner, policy, clock
        self.lease_ttl, self.lease = lease_ttl, lease
        self.stopping: threading.Event | None = None
        self.flows: Mapping[str, Flow] = {flow.name: flow}  # the engine's: ctx.child's flows
        c = cursor
        self.version, self.superstep, self.state = c.version, c.superstep, c.state
        self.next, self.seen, self.sends, self.sends_at = c.next, c.seen, c.sends, c.sends_at
        self.base, self.deltas, self.scan_from, self.found = c.base, c.deltas, c.scan_from, c.found
        self.base_version = c.base_version
        self.waits = c.waits  # engine/run/waits.py: paused tasks this resume need not run
        self.absorbed: list[int] = []
        self.deferred: list[Op] = []
        self.inline: list[Op] = []
        self.committed: list[str] = []
        self.last_committed: list[str] = []
        self.steps_since_cp = 0
        self.labels: dict[str, str] = {}  # Send task id -> how errors name it (search[3])
        self.held = HeldOutcomes(self._fenced, name=run_id,
                                 at_return=policy.tool_outcomes == "at_return")
        self._fence = (run_id, token)
        self.callers: set[str] = set()  # nodes seen calling a tool in this worker
        self.threads = TaskThreads(run_id)  # parallel sync tasks' threads, kept while leased
        self.trace: RunSpan | None = None  # engine/run/tracing.py: this worker's run span
        self._run_scope: StepScope | None = None  # made at the first superstep (flows set)
        self.step_trace: StepSpan | None = None

    @cached_property
    def fingerprint(self) -> str:
        """The flow's digest, made when a full checkpoint first needs it: most runs write
        none after their first (a fan-out flow's 200 nodes took 0.1 ms a digest)."""
        return self.flow.fingerprint()

    def commit(self, records: Sequence[Record], task: str | None = None) -> list[int]:
        """A fenced commit; held tool outcomes (``task``'s, or all) ride in it."""
        return self.held.carry(records, task)

    def _fenced(self, records: Sequence[Record]) -> list[int]:
        return self.store.commit(records, fence=self._fence)

    # -- the loop ----------------------------------------------------------
    def run(self) -> None:
        with self._traced(), self._leased():
            while self.next or self.sends:
                if self._stop_requested():
                    return
                if self.trace is None:  # no span: no context manager entered per superstep
                    if self._settle(self._results(self._tasks())):
                        return
                    continue
                with self._traced_step():
                    if self._settle(self._results(self._tasks())):
                        return
            self._checkpoint(Status.DONE, release=True)

    async def arun(self) -> None:
        """``run`` on the caller's event loop: async nodes run on it, blocking work off it."""
        with self._traced(), self._leased():
            while self.next or self.sends:
                if await off_loop(self._stop_requested):
                    return
                with self._traced_step():
                    tasks = self._tasks()
                    done, todo = self._found(tasks)
                    results = self._ordered(tasks, done, await arun_tasks(self._scope(), todo))
                    if await off_loop(self._settle, results):
                        return
            await off_loop(self._checkpoint, Status.DONE, release=True)

    @contextmanager
    def _leased(self) -> Iterator[None]:
        """Renew the lease while the run advances; a stop from outside ends INTERRUPTED.

        Ctrl-C (KeyboardInterrupt) or a cancelled ``astart``/``aresume`` task
        releases the lease, so any worker can resume at once, and propagates. So does
        giving up on the run: a lease this worker can no longer prove (``LeaseUnproven``)
        or a store that failed under it. Releasing costs the run no attempt, where a
        lease left to expire would count as a worker that died.
        """
        end_renewals = renewer_for(self.store).add(self.run_id, self.token, self.lease_ttl,
                                                   self.lease)
        try:
            yield
        except KeyboardInterrupt:
            self.interrupted("interrupted (KeyboardInterrupt)")
            raise
        except asyncio.CancelledError:
            self.interrupted("interrupted (its asyncio task was cancelled)")
            raise
        except StoreFull as exc:  # the disk filled up: leave the run resumable by any worker
            release_on_full_store(self.store, exc, self.interrupted, lease_ttl=self.lease_ttl)
            raise
        except LeaseUnproven as exc:  # still ours, perhaps: the fence decides
            self.interrupted(f"gave the run up: {exc}", quiet=True)
            raise
        except StaleLease:
            raise  # another worker holds it: nothing of ours to release
        except StoreError as exc:  # the store failed under the run: let it go if it can
            self.interrupted(f"gave the run up: the store failed ({exc})", quiet=True)
            raise
        finally:
            self.threads.close()
            self.held.close()
            end_renewals()

    def _traced(self) -> AbstractContextManager[None]:
        """This worker's run span, ended (after the lease) with the status left."""
        return _UNTRACED if self.trace is None else self.trace.running(self.store)

    def _traced_step(self) -> AbstractContextManager[Any]:
        if self.trace is None:
            return _UNTRACED
        return self.trace.superstep(self.superstep, self)

    def _stop_requested(self) -> bool:
        """At a superstep boundary: stop for a shutdown if asked; True if stopped."""
        if self.stopping is not None and self.stopping.is_set():
            self._interrupt()
            return True
        return False

    def _scope(self) -> StepScope:
        """What this superstep's tasks and their ctx may use of the run (read-only)."""
        base = self._run_scope
        if base is None:  # what stays the same while this worker holds the run
            base = self._run_scope = StepScope(
                store=self.store, flow=self.flow, policy=self.policy, run_id=self.run_id,
                token=self.token, superstep=self.superstep, version=self.version,
                state=self.state, clock=self.clock, held=self.held, flows=self.flows,
                threads=self.threads, lease=self.lease)
        return base.at(self.superstep, self.version, self.state, self.step_trace)

    def _tasks(self) -> list[Task]:
        tasks = plan_tasks(self.superstep, self.next, self.sends)
        # a label differs from the node's name only for a Send task (after the names)
        self.labels = {t.id: t.label for t in tasks[len(self.next):]} if self.sends else {}
        return tasks

    def _settle(self, results: list[TaskResult]) -> bool:
        """Commit, fold and checkpoint a superstep's results; True if the run stops here."""
        ok = _all_ok(results)
        self._commit_deferred(results, keep=self._checkpoint_follows(ok))
        if not ok and self._stopped_by(results):
            return True
        try:
            self._fold(results)
        except Exception as exc:  # a reducer or route failed: the superstep cannot fold
            self._commit_deferred(results, keep=False)
            self._fail("(fold)", "".join(traceback.format_exception(exc)))
            return True
        if self.sends:  # a map is planned: its Sends are durable before any of them runs
            self._checkpoint(Status.RUNNING)
            faults.point("map_planned")
        elif self.next and self.policy.due(self.steps_since_cp):
            self._checkpoint(Status.RUNNING)
        return False

    def _results(self, tasks: list[Task]) -> list[TaskResult]:
        if not self.found and not self.waits:  # nothing of this superstep ran before
            return run_tasks(self._scope(), tasks)
        done, todo = self._found(tasks)
        return self._ordered(tasks, done, run_tasks(self._scope(), todo))

    def _found(self, tasks: list[Task]) -> tuple[dict[str, TaskResult], list[Task]]:
        """Tasks whose output a crashed worker already committed, tasks that would only
        pause again at a request still open (engine/run/waits.py), and those left to run."""
        done: dict[str, TaskResult] = {}
        waits, self.waits = self.waits, {}  # they hold for the superstep resumed only
        for task in tasks:
            if task.id in self.found:
                seq, write = self.found.pop(task.id)
                done[task.id] = TaskResult(task.id, task.node, "ok", list(write.ops), seq)
            elif task.id in waits:
                done[task.id] = TaskResult(task.id, task.node, "pause", pause=waits[task.id])
        return done, [t for t in tasks if t.id not in done]

    @staticmethod
    def _ordered(tasks: list[Task], done: dict[str, TaskResult],
                 ran: list[TaskResult]) -> list[TaskResult]:
        for r in ran:
            done[r.task] = r
        return [done[task.id] for task in tasks]

    def _checkpoint_follows(self, ok: bool) -> bool:
        """Will this superstep fold and commit a checkpoint at once (if nothing fails)?

        ``ok``: every task returned an update. Only then may the last task's output
        ride in the checkpoint; ``next`` is not
        known before folding, so a final (DONE) checkpoint under "exit" or every-N
        commits the output on its own: a pending write is never wrong, only larger.
        """
        return ok and self.policy.due(self.steps_since_cp + 1)

    def _commit_deferred(self, results: list[TaskResult], keep: bool) -> None:
        """Outputs not yet committed: keep them for the checkpoint, or commit them at once.

        The checkpoint carries them as one run of ops at one place in ``writes``,
        so they ride in it only if they are adjacent in task order (replay order
        is task order); else they are committed together as pending writes.
        """
        if not self.policy.pending_writes or (keep and len(results) == 1):
            return  # (one output, or none, is adjacent to itself)
        todo = [i for i, r in enumerate(results) if r.kind == "ok" and r.seq is None]
        if not todo or (keep and todo[-1] - todo[0] == len(todo) - 1):
            return
        records = [PendingWrite(run_id=self.run_id, task=results[i].task,
                                superstep=self.superstep, node=results[i].node,
                                ops=results[i].ops, at=self.clock()) for i in todo]
        seqs = self.commit(records)
        for i, seq in zip(todo, seqs, strict=True):
            results[i].seq = seq
        faults.point("after_pending_write")

    def _stopped_by(self, results: list[TaskResult]) -> bool:
        """Handle a lost lease, a failure or a pause; True if the run stops here."""
        lost = [r for r in results if r.kind == "lost"]
        if lost:
            raise lost[0].exc  # type: ignore[misc]  # lease lost or disk full: write nothing
        failed = [r for r in results if r.kind == "fail"]
        if failed:
            self._fail(failed[0].node, failed[0].error or "")
            return True
        paused = [r for r in results if r.kind == "pause"]
        if paused:
            self._pause([(r.pause, self.labels.get(r.task, r.node))
                         for r in paused if r.pause is not None])
            return True
        return False

    def _interrupt(self) -> None:
        """Stop at this boundary for a shutdown; the run stays resumable."""
        self._checkpoint(Status.INTERRUPTED, release=True, extra=[StatusChanged(
            run_id=self.run_id, status=Status.INTERRUPTED, reason="worker shut down",
            at=self.clock())])

    def interrupted(self, reason: str, *, quiet: bool = False) -> None:
        """Stopped mid-superstep (Ctrl-C, a cancelled task, given up): INTERRUPTED, lease
        released.

        No checkpoint: the stop may land anywhere, even between a commit and the
        bookkeeping after it. The latest checkpoint and the pending writes after
        it are already what a resume reads, so a status and a released lease are
        all it takes for any worker to resume at once. If the run already ended
        (the stop came just after its DONE, pause or failure commit released the
        lease), the fence refuses this commit and the run stays as it ended.
        ``quiet``: a store that fails this commit too is logged, not raised (the
        lease then expires as a dead worker's would).
        """
        try:
            self.commit(let_go_records(self.run_id, self.token, self.owner, self.clock(),
                                       reason))
        except StaleLease:
            pass  # it ended, or another worker owns it now: not ours to write
        except StoreError as exc:
            if not quiet:
                raise
            log.warning("run %s: could not release its lease (%s); it expires in at most "
                        "%gs", self.run_id, exc, self.lease_ttl)

    def _fail(self, node: str, error: str) -> None:
        """Record the failure; finished siblings' pending writes stay for the resume."""
        reason = "folding the superstep failed" if node == "(fold)" else f"node {node!r} failed"
        self._checkpoint(Status.FAILED, release=True, folding=False, extra=[StatusChanged(
            run_id=self.run_id, status=Status.FAILED, node=node, error=error, reason=reason,
            at=self.clock())])

    def _pause(self, paused: list[tuple[Any, str]]) -> None:
        """Commit the pause; ``paused``: each paused task's Paused and its label."""
        requests = [rec for p, _ in paused for rec in p.records]
        status = pause_status({p.waiting["type"] for p, _ in paused})
        # a wait of the kind the status names (its waiting is what resumes the run), and
        # of those the one whose deadline comes first (the watcher's timer is set for it)
        named = [pair for pair in paused
                 if pause_status({pair[0].waiting["type"]}) == status] or paused
        pause, item = min(named, key=lambda pair: deadline(pair[0]))  # equals: the first
        waiting = pause.waiting
        if waiting.get("node_id") != item:  # a Send task: say which item waits (search[3])
            waiting = {**waiting, "item": item}
        self._checkpoint(status, release=True, waiting=waiting, extra=requests, folding=False)
        faults.point("after_pause_committed")
        asked = [req for req in requests if isinstance(req, ApprovalRequested)]
        for req in asked:  # a wait for a signal has no request file
            write_request_file(self.doors, req)
        if asked:
            faults.point("after_request_file")

    def _fold(self, results: list[TaskResult]) -> None:
        """Fold a finished superstep; assigns nothing unless reducers and routes all succeed."""
        labels = self.labels
        writes = [(labels.get(r.task, r.node) if labels else r.node, r.ops) for r in results]
        state, custom = fold(self.flow, self.state, writes)
        names = [r.node for r in results]
        holders = self.held.take_holders()
        if holders:
            self.callers.update(r.node for r in results if r.task in holders)
        seen = {k: dict(v) for k, v in self.seen.items()} if self.seen else {}
        self.next, self.sends = self.flow.successors(names, state, seen)
        self.sends_at = -1  # a new plan: the next checkpoint stores it
        self.state, self.seen = state, seen
        if self.policy.pending_writes:
            for r in results:
                if r.seq is not None:
                    self.absorbed.append(r.seq)
                else:  # outputs committed with this checkpoint (adjacent: one marker)
                    if DEFERRED not in self.absorbed:
                        self.absorbed.append(DEFERRED)
                    self.deferred.extend(refer(r.ops, r.task, r.calls) if r.calls else r.ops)
        else:
            self.inline.extend(op for _, ops in writes for op in ops if op[1] != "custom")
        if custom:
            self.inline.extend(custom)
        committed = self.committed
        for n in names:
            if n not in committed:
                committed.append(n)
        self.version += 1
        self.superstep += 1
        self.steps_since_cp += 1

    # -- commits -----------------------------------------------------------
    def _checkpoint(self, status: str, *, release: bool = False, waiting: Any = None,
                    extra: Sequence[Record] = (), folding: bool = True) -> None:
        if not folding:  # it records scan_from: a held checkpoint's seq must be known
            self.held.flush()
        full = self.policy.snapshot == "full" or self.deltas + 1 >= self.full_interval()
        stored = self.sends_at if self.sends else -1  # a planned map refers to its Sends
        cp = Checkpoint(
            run_id=self.run_id, version=self.version, superstep=self.superstep, status=status,
            full=full, state=self.state if full else None, base=-1 if full else self.base,
            writes=[] if full else self.absorbed,
            deferred=[] if full else shorten(self.deferred, self.superstep),
            ops=[] if full else self.inline,
            committed=self.committed or self.last_committed, next=self.next,
            seen=self.seen,
            waiting=waiting, scan_from=-1 if folding else self.scan_from,
            flow=self.flow.name if full else "", fingerprint=self.fingerprint if full else "",
            at=self.clock(), sends_at=stored,
            sends=[] if stored >= 0 else [[node, arg] for node, arg in self.sends],
        )
        records: list[Record] = [cp, *extra]
        if release:
            records.append(LeaseReleased(run_id=self.run_id, owner=self.owner, token=self.token,
                                         at=self.clock()))
        if folding and self._rides(cp, records):
            self.deltas += 1
            self._after_checkpoint()
            return
        seq = self.commit(records)[0]
        if self.sends and stored < 0:
            self.sends_at = seq
        faults.point("after_checkpoint")
        if full:
            self.base, self.deltas, self.base_version = seq, 0, self.version
        else:
            self.deltas += 1
        if folding:
            self.scan_from = seq
        self._after_checkpoint()

    def _rides(self, cp: Checkpoint, records: list[Record]) -> bool:
        """Hold a plain RUNNING delta that carries held tool outcomes: it rides in the
        run's next commit with them (engine/run/held.py). True if held.

        Only such a checkpoint: a full one or a map's plan is referred to by seq, a
        stop (pause, failure, done) releases the lease and must be durable at once.

        And only before steps whose nodes have called a tool here (a loop of tool
        steps), whose first commit is the prepare it rides in. Before any other node
        (an LLM step) it would ride in that step's checkpoint, after the step ran: a
        crash in that one commit lost two supersteps and left the outcome unknown for
        the whole next step. Committed now, redo stays within one superstep.
        """
        if not self.callers or cp.status != Status.RUNNING or cp.full or self.sends \
                or len(records) != 1:
            return False
        if not self.next or not all(node in self.callers for node in self.next):
            return False

        def committed(seq: int) -> None:
            self.scan_from = seq

        return self.held.hold_checkpoint(cp, committed)

    def _after_checkpoint(self) -> None:
        self.last_committed = self.committed or self.last_committed
        self.absorbed, self.inline, self.committed, self.deferred = [], [], [], []
        self.steps_since_cp = 0

    def full_interval(self) -> int:
        """Deltas allowed before the next full snapshot.

        An explicit ``full_every`` is a hard bound. By default the interval grows
        with the run's age (full snapshots at versions 64, 256, 1024, ...): a full
        snapshot re-stores a state that grows with the run, and geometric spacing
        keeps their total within 4/3 of the newest one, so bytes stay O(run).
        """
        if self.policy.full_every is not None:
            return self.policy.full_every
        return max(GEOMETRIC_MIN, (GEOMETRIC_GROWTH - 1) * self.base_version)



def let_go_records(run_id: str, token: int, owner: str, at: float,
                   reason: str) -> list[Record]:
    """What a worker commits to let a run go at once: INTERRUPTED, its lease released."""
    return [StatusChanged(run_id=run_id, status=Status.INTERRUPTED, reason=reason, at=at),
            LeaseReleased(run_id=run_id, owner=owner, token=token, at=at)]


def let_go(store: Store, run_id: str, token: int, owner: str, clock: Callable[[], float],
           reason: str) -> bool:
    """Release a lease this worker took but cannot use (its run unreadable now), so any
    worker resumes the run at once and the retake costs it no attempt; False if the
    lease is not ours any more or the store cannot be written either (it then expires)."""
    try:
        store.commit(let_go_records(run_id, token, owner, clock(), reason),
                     fence=(run_id, token))
    except StaleLease:
        return False
    except StoreError as exc:
        log.warning("run %s: could not release its lease (%s); it expires as a dead "
                    "worker's would", run_id, exc)
        return False
    return True


def _all_ok(results: list[TaskResult]) -> bool:
    """Did every task return an update (none failed, paused or lost the lease)?"""
    for r in results:
        if r.kind != "ok":
            return False
    return True


def deadline(pause: Any) -> float:
    """When a pause's wait ends by itself: a timer's due time, its request's expiry
    (infinity: never).

    ``run.waiting`` names one wait of a pause, and its deadline is the one a watcher
    sets a timer for (``RunView.workable_at``): the run wakes at the earliest timer, and
    a map item's request that expires earlier would otherwise wait for the next
    decision to be noticed.
    """
    if pause.waiting["type"] == Waiting.TIMER:
        return timers.earliest_key(pause.waiting)
    aid = pause.waiting.get("approval_id")
    at = next((r.expires_at for r in pause.records
               if isinstance(r, ApprovalRequested) and r.approval_id == aid), pause.expires_at)
    return float("inf") if at is None else at
