"""``bide.open(home)`` → ``Engine``: register flows, start, resume, inspect runs."""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...formats import (
    Checkpoint,
    LeaseAcquired,
    PendingWrite,
    StatusChanged,
    check_serializable,
)
from ...formats.errors import NotSerializable
from ..base import faults
from ..base.errors import (
    BideError,
    ConfigError,
    DecisionRefused,
    FlowMismatch,
    RunExists,
    RunNotResumable,
    StaleLease,
    StateNotSerializable,
    StoreError,
    UnknownApproval,
    UnknownFlow,
    UnknownRun,
    UnknownSchedule,
)
from ..base.offload import off_loop
from ..base.permissions import private_dir
from ..base.vocabulary import FINISHED, LANGGRAPH, WAITING, Decision, Status, Waiting
from ..human import signing
from ..human.in_doubt import request_preview
from ..postgres import home as pg_home
from ..read import inspect
from ..run import children, lease_clock, reviews, schedules, signals, timers
from ..run.approvals import Doors, check_decision, decided, undecided
from ..run.blocking import BLOCKED, block_records, describe, signature
from ..run.executor import Cursor, Execution, let_go
from ..run.flow import Flow
from ..run.lease_clock import Grant, LeaseClock
from ..run.planned import holder, next_of, sends_of
from ..run.policy import Policy
from ..run.recovery import RecoveredRun, RecoverOutcome, RecoverReport
from ..run.run_view import RESUMED, STARTED, RunView, ended
from ..run.runs import CheckpointInfo, Run, check_run_id, run_records
from ..run.schedules import Schedule
from ..run.state import materialize
from ..run.waits import still_waiting
from ..storage import attention
from ..storage.index import RunHead
from ..storage.lmdb_store import DEFAULT_MAP_SIZE, DEFAULT_MAX_SIZE, LMDBStore
from ..storage.store import Check, Reader, Store
from .drivers import ThreadDriver
from .surface import Surface

if TYPE_CHECKING:  # engine/run/tracing.py imports OpenTelemetry: only a traced engine loads it
    from ..run.tracing import Tracing


class Engine(Surface):
    """A bide home opened by this process. Use as a context manager, or call ``close()``.

    The read side, upkeep and the inbox door are in ``Surface``."""

    def __init__(self, home: str | os.PathLike[str], *, durability: str = "durable",
                 create: bool = True, map_size: int = DEFAULT_MAP_SIZE,
                 max_size: int = DEFAULT_MAX_SIZE, lease_ttl: float = 30.0,
                 approval_key: bytes | str | None = None,
                 clock: Callable[[], float] = time.time, store: Store | None = None,
                 local: str | os.PathLike[str] | None = None,
                 inbox: str | os.PathLike[str] | None = None,
                 requests: str | os.PathLike[str] | None = None, tracer: Any = None) -> None:
        self.tracing: Tracing | None = None
        if tracer is not None:  # only a traced engine imports OpenTelemetry (bide[otel])
            from ..base.optional import load
            try:
                load("opentelemetry.trace", "otel", "tracing")
            except ImportError as exc:
                raise ConfigError("tracer=", f"{exc}") from None
            from ..run.tracing import Tracing
            self.tracing = Tracing(tracer)
        url = None
        if pg_home.is_url(home):  # the records in that database; this host's files in `local`
            store = pg_home.open_store(str(home), durability=durability, create=create,
                                       clock=clock)
            home, url = local if local is not None else ".bide", store.home
        self.home = Path(home)
        self.doors = Doors.of(self.home, url=url, local=local is not None, inbox=inbox,
                              requests=requests)
        # ``store``: records kept elsewhere than ``<home>/store`` (the home still holds
        # the inbox); the engine then uses its durability
        self.store: Store = store if store is not None else LMDBStore(
            self.home, durability=durability, create=create, map_size=map_size,
            max_size=max_size, clock=clock)
        durability = self.store.durability
        if create and self.store.readonly is None:  # a reading open changes nothing on disk
            for door in (self.doors.inbox, self.doors.requests):
                if door is not None:
                    private_dir(door)
        self.durability = durability
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.approval_key = approval_key.encode() if isinstance(approval_key, str) else approval_key
        if self.approval_key is not None:
            self._require_signing(create)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.flows: dict[str, Flow] = {}
        # runs whose own problem stopped ``recover``: why, and the head it was recorded on
        self.blocked: dict[str, tuple[str, tuple[Any, ...]]] = {}
        self.stopping = threading.Event()
        # with no watcher, start/resume run a parent's child runs in the caller's worker
        self.inline_children = True
        # what advances runs that are not bide flows: LangGraph threads (``drive``)
        self.driver: ThreadDriver | None = None

    def _require_signing(self, create: bool) -> None:
        """A key given to a writing open marks the home: every process then requires it."""
        assert self.approval_key is not None  # called only when a key was given
        try:
            marker = signing.marker(self.home, self.store)
            if create:
                signing.require(marker, self.approval_key, now=self.clock())
            else:
                signing.check(marker, self.approval_key)
        except BaseException:
            self.store.close()
            raise

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def register(self, *flows: Flow) -> None:
        """Make flows runnable by name in this engine."""
        for flow in flows:
            flow.validate()
            self.flows[flow.name] = flow
        self.blocked.clear()  # a flow that changed may unblock them

    def flow(self, name: str) -> Flow:
        if name not in self.flows:
            raise UnknownFlow(name, [*self.flows, *self._graphs()])
        return self.flows[name]

    def drive(self, driver: ThreadDriver) -> None:
        """Let ``driver`` advance the runs of its flow (``bide.langgraph.serve_graphs``)."""
        self.driver = driver
        self.blocked.clear()

    def works_on(self, head: RunHead) -> bool:
        """Can this engine advance runs like ``head``'s? A LangGraph thread only with a
        driver: without one, a watcher leaves threads to whoever has their graph."""
        return head.flow != LANGGRAPH or self.driver is not None

    def _graphs(self) -> list[str]:
        return [] if self.driver is None else self.driver.names()

    # -- starting and resuming ---------------------------------------------
    def start(self, flow: str, input: dict[str, Any] | None = None, *,  # noqa: A002
              run_id: str | None = None, policy: Policy | None = None) -> Run:
        """Create a run and run it in this thread until it is done, paused or failed."""
        sent = lease_clock.now()
        run_id = self._create(flow, input, run_id, policy, status=Status.RUNNING)
        faults.point("after_run_created")
        return self._advance(run_id, Grant(1, sent))

    async def astart(self, flow: str, input: dict[str, Any] | None = None, *,  # noqa: A002
                     run_id: str | None = None, policy: Policy | None = None) -> Run:
        """``start`` for async code: async nodes run on the caller's event loop.

        Store commits, sync nodes and plain tools run in threads, so the loop
        stays free while the run advances. Cancelling the awaiting task leaves
        the run INTERRUPTED, resumable at once.
        """
        sent = lease_clock.now()
        run_id = await off_loop(self._create, flow, input, run_id, policy, status=Status.RUNNING)
        faults.point("after_run_created")
        return await self._aadvance(run_id, Grant(1, sent))

    async def asubmit(self, flow: str, input: dict[str, Any] | None = None, *,  # noqa: A002
                      run_id: str | None = None, policy: Policy | None = None) -> str:
        """``submit`` without blocking the event loop."""
        return await off_loop(self.submit, flow, input, run_id=run_id, policy=policy)

    def submit(self, flow: str, input: dict[str, Any] | None = None, *,  # noqa: A002
               run_id: str | None = None, policy: Policy | None = None) -> str:
        """Record a PENDING run and return its id at once; a watcher or ``resume`` runs it."""
        return self._create(flow, input, run_id, policy, status=Status.PENDING)

    def _create(self, flow_name: str, input: Any, run_id: str | None, policy: Policy | None,
                status: str, *, extra: Sequence[Any] = (), check: Check | None = None) -> str:
        """Commit a new run; ``extra`` records ride in the same commit, after ``check``.

        ``flow_name`` may name a graph of the engine's driver: the run is a thread."""
        run_id = check_run_id(run_id) if run_id is not None else f"r-{uuid.uuid4().hex[:12]}"
        policy = policy or Policy()
        state = dict(input or {})
        for key, value in state.items():
            try:
                check_serializable(value, key)
            except NotSerializable as exc:
                raise StateNotSerializable.of("(input)", key, exc) from None
        now = self.clock()
        records: list[Any]
        if self.driver is not None and flow_name not in self.flows \
                and flow_name in self.driver.names():
            records = self.driver.created(flow_name, run_id, state, status, now)
        else:
            records = run_records(self.flow(flow_name), run_id, state, policy.to_dict(),
                                  status, now)
        span = None
        if status == Status.RUNNING:
            if self.tracing is not None:
                span = self.tracing.begin(run_id, flow_name)
            records.append(LeaseAcquired(run_id=run_id, owner=self.owner, token=1,
                                         expires_at=0.0, ttl=self.lease_ttl, at=now,
                                         trace="" if span is None else span.ref))
        records.extend(extra)

        def unique(r: Reader) -> None:
            if r.head(run_id) is not None:
                raise RunExists(run_id)
            if check is not None:
                check(r)

        self.store.commit(records, check=unique)  # refused: its span is dropped, not ended
        if span is not None and self.tracing is not None:
            self.tracing.hold(run_id, 1, span)
        return run_id

    def resume(self, run_id: str) -> Run:
        """Continue a run from its latest checkpoint (after a crash, a pause or a failure)."""
        taken = self._take(run_id)
        if isinstance(taken, Run):  # waiting: for child runs, this worker may run them
            return children.carry_on(self, taken)
        return self._advance(run_id, taken)

    async def aresume(self, run_id: str) -> Run:
        """``resume`` for async code: async nodes run on the caller's event loop."""
        taken = await off_loop(self._take, run_id)
        if isinstance(taken, Run):  # waiting: for child runs, this worker may run them
            return await children.acarry_on(self, taken)
        return await self._aadvance(run_id, taken)

    def _take(self, run_id: str) -> Run | Grant:
        """Lease the run to resume it (its grant), or the run if it waits on a decision."""
        head = self._head(run_id)
        if ended(head):
            raise RunNotResumable(run_id, f"it is {head.status}")
        if head.status in WAITING and not self._decided(head):
            return self.get(run_id)  # nothing to do until someone decides
        if not timers.is_due(head, self.clock()):
            return self.get(run_id)  # SLEEPING: nothing to do before its due time
        if head.flow == LANGGRAPH:  # its graph checks what it can resume
            if self.driver is None:
                raise RunNotResumable(run_id, "it is a LangGraph thread and this engine has "
                                      "no graph for it (bide watch --app MODULE:ATTR naming "
                                      "the compiled graph)")
            return self._acquire(run_id)
        with self.store.reader() as r:  # the flow must still fit before anything is written
            cp, _, found = RunView(r, head).unfolded()
            sends = sends_of(r, head.checkpoint, cp)
        self._check_fits(head, [*cp.next, *(node for node, _ in sends)], found)
        return self._acquire(run_id)

    def recover(self, *, max_age: float = 86400.0, max_attempts: int = 5) -> RecoverReport:
        """Resume every run that can go on: pending, interrupted, decided, or orphaned.

        An orphan (RUNNING, its worker gone) older than ``max_age`` seconds is
        FAILED as "expired"; one whose workers died ``max_attempts`` times is
        FAILED rather than retried forever. Runs another live worker holds are skipped.

        Returns:
            A ``RecoverReport``: the list of runs this call advanced, as they stand
            afterwards, with what became of every other run it looked at.
        """
        return self._recover_all(max_age, max_attempts)

    def _recover_all(self, max_age: float, max_attempts: int, *,
                     resume: Callable[[RunHead, str], Run] | None = None,
                     told: Callable[[RecoveredRun], None] | None = None) -> RecoverReport:
        """``recover``'s pass; a watcher's ``once`` passes its own ``resume`` (given the
        run's head) and is ``told`` each run not advanced, as the pass goes."""
        advanced: list[Run] = []
        entries: list[tuple[float, RecoveredRun]] = []
        for head in self._runnable():
            entry = self._recover_one(head, max_age, max_attempts,
                                      None if resume is None else functools.partial(resume, head))
            if isinstance(entry, Run):
                advanced.append(entry)
                entry = RecoveredRun(run_id=head.run_id, outcome="advanced", was=head.status,
                                     status=str(entry.status), reason=entry.error)
            elif told is not None:
                told(entry)
            entries.append((head.created_at, entry))
        entries.sort(key=lambda pair: pair[0], reverse=True)  # newest first, as runs()
        return RecoverReport(advanced, [entry for _, entry in entries])

    def _recover_one(self, head: RunHead, max_age: float, max_attempts: int,
                     resume: Callable[[str], Run] | None = None) -> Run | RecoveredRun:
        """Advance one run (with ``resume``, ``self.resume`` by default), or say why not."""
        if head.run_id in self.blocked and self.blocked[head.run_id][1] == signature(head):
            return self._left(head, "blocked", self.blocked[head.run_id][0])
        if head.status == Status.RUNNING:
            if self.clock() - head.updated_at > max_age:
                return self._give_up(head, f"expired: orphaned for more than {max_age:.0f}s")
            if head.attempts >= max_attempts:
                return self._give_up(head, f"its worker died {head.attempts} times; "
                                     "not retried")
        try:
            return (resume or self.resume)(head.run_id)
        except (RunNotResumable, StaleLease) as exc:
            # another worker got there first, or took the run over mid-way: theirs now
            return self._left(head, "skipped", str(exc))
        except StoreError:
            raise  # the store's problem, not this run's: every run is affected
        except BideError as exc:  # this run's own (flow mismatch, corrupt record...)
            why = self._block(head.run_id, exc)
            return self._left(head, "blocked", why, recorded_now=True)

    def _left(self, head: RunHead, outcome: RecoverOutcome, why: str, *,
              recorded_now: bool = False) -> RecoveredRun:
        """A run recover did not advance, with its status now."""
        with self.store.reader() as r:
            now_head = r.head(head.run_id) or head  # pruned meanwhile: as it was
        return RecoveredRun(run_id=head.run_id, outcome=outcome, was=head.status,
                            status=now_head.status, reason=why, recorded_now=recorded_now)

    def _block(self, run_id: str, exc: Exception) -> str:
        why = describe(exc)
        now = self.clock()
        self.store.commit(lambda r: block_records(r, run_id, why, owner=self.owner, now=now,
                                                  node=getattr(exc, "node", None)))
        self.blocked[run_id] = (why, signature(self._head(run_id)))
        return why

    def _runnable(self) -> list[RunHead]:
        """Every run a watcher can advance now; reads only the runs not finished."""
        now = self.clock()
        with self.store.reader() as r:
            heads = (r.head(run_id) for run_id in attention.run_ids(r))
            return [h for h in heads if h is not None and self.works_on(h)
                    and RunView(r, h).needs_work(now)]

    def _give_up(self, head: RunHead, reason: str) -> RecoveredRun:
        def check(r: Reader) -> None:
            now_head = r.head(head.run_id)
            if now_head is None or now_head.lease_token != head.lease_token:
                raise RunNotResumable(head.run_id, "another worker took it meanwhile")

        try:
            self.store.commit([StatusChanged(run_id=head.run_id, status=Status.FAILED,
                                             reason=reason, error=reason, at=self.clock())],
                              check=check)
        except RunNotResumable as exc:
            return self._left(head, "skipped", str(exc))
        return RecoveredRun(run_id=head.run_id, outcome="given_up", was=head.status,
                            status=Status.FAILED, reason=reason)

    def _decided(self, head: RunHead) -> bool:
        with self.store.reader() as r:
            if head.status == Status.WAITING_SIGNAL:
                return signals.ready(r, head, self.clock())
            if head.status == Status.WAITING_CHILD:
                return children.ready(r, head)
            return RunView(r, head).wait_settled(self.clock())

    def _acquire(self, run_id: str) -> Grant:
        """Take the run's lease in one transaction, fencing out any earlier worker.

        Whether the lease it replaces has ended is judged by the store's clock
        (``Reader.now``), and the store writes the new lease's expiry in it."""
        now = self.clock()
        span = None
        if self.tracing is not None:
            head = self._head(run_id)
            span = self.tracing.begin(run_id, head.flow, store=self.store, was=head.status)

        def build(r: Reader) -> list[Any]:
            head = r.head(run_id)
            if head is None:
                raise UnknownRun(run_id)
            if ended(head):
                raise RunNotResumable(run_id, f"it is {head.status}")
            view = RunView(r, head)
            req = view.awaited_approval() if head.status in WAITING else None
            if req is not None and not view.wait_settled(now):
                raise RunNotResumable(run_id, f"it waits for decision {req.approval_id}")
            if not timers.is_due(head, now):
                raise RunNotResumable(run_id, f"it sleeps until {timers.due_at(head)}")
            if head.lease_owner != self.owner and view.lease_live():
                raise RunNotResumable(run_id, f"worker {head.lease_owner} holds its lease "
                                      f"for {view.lease_left():.1f}s more")
            orphaned = head.lease_owner is not None
            records: list[Any] = [LeaseAcquired(
                run_id=run_id, owner=self.owner, token=head.lease_token + 1,
                expires_at=0.0, ttl=self.lease_ttl,
                attempts=head.attempts + (1 if orphaned else 0), at=now,
                trace="" if span is None else span.ref)]
            if head.status != Status.RUNNING or head.reason == BLOCKED:
                why = STARTED if head.status == Status.PENDING else RESUMED
                records.append(StatusChanged(run_id=run_id, status=Status.RUNNING, reason=why,
                                             at=now))
            return records

        # refused (another worker holds the run...): its span is dropped, never ended,
        # so only a worker that took the run exports a run span
        sent = lease_clock.now()
        seq = self.store.commit(build)[0]
        faults.point("after_lease_acquired")
        with self.store.reader() as r:
            lease = r.record(seq)
        assert isinstance(lease, LeaseAcquired)
        if span is not None and self.tracing is not None:
            self.tracing.hold(run_id, lease.token, span)
        return Grant(lease.token, sent)

    def _advance(self, run_id: str, grant: Grant) -> Run:
        if self.driver is not None and self._head(run_id).flow == self.driver.flow:
            self.driver.advance(run_id, grant)
            return self.get(run_id)
        self._execution(run_id, grant).run()
        return children.carry_on(self, self.get(run_id))

    async def _aadvance(self, run_id: str, grant: Grant) -> Run:
        if self.driver is not None and (await off_loop(self._head, run_id)).flow == \
                self.driver.flow:
            return await off_loop(self._advance, run_id, grant)
        ex = await off_loop(self._execution, run_id, grant)
        await ex.arun()
        return await children.acarry_on(self, await off_loop(self.get, run_id))

    def _execution(self, run_id: str, grant: Grant) -> Execution:
        """The worker for a run this process holds; a read that fails before it can run
        lets the lease go at once (``let_go``), so the run does not wait out its lease."""
        try:
            head = self._head(run_id)
            flow = self.flow(head.flow)
            cursor = self._cursor(head)
        except StoreError as exc:
            let_go(self.store, run_id, grant.token, self.owner, self.clock,
                   f"reading the run failed: {exc}")
            raise
        ex = Execution(store=self.store, doors=self.doors, flow=flow, run_id=run_id,
                       token=grant.token, owner=self.owner, policy=Policy.from_dict(head.policy),
                       cursor=cursor, clock=self.clock, lease_ttl=self.lease_ttl,
                       lease=LeaseClock(self.lease_ttl, grant.sent_at))
        ex.stopping = self.stopping
        ex.flows = self.flows
        if self.tracing is not None:
            ex.trace = self.tracing.take(run_id, grant.token)
        return ex

    def _cursor(self, head: RunHead) -> Cursor:
        """Load the latest checkpoint and the pending writes not yet folded into it."""
        with self.store.reader() as r:
            requests: list[int] = []
            cp, start, found = RunView(r, head).unfolded(requests)
            sends = sends_of(r, head.checkpoint, cp)
            state = materialize(r, head.run_id, head.checkpoint)
            deltas = sum(1 for s, t in r.run_entries(head.run_id, head.base + 1)
                         if t == "checkpoint" and s <= head.checkpoint)
            base = r.record(head.base)
            assert isinstance(base, Checkpoint)
            waits = still_waiting(r, head.run_id, requests, cp, self.clock())
        self._check_fits(head, [*cp.next, *(node for node, _ in sends)], found)
        return Cursor(version=cp.version, superstep=cp.superstep, state=state, next=list(cp.next),
                      seen={k: dict(v) for k, v in cp.seen.items()},
                      sends=sends, sends_at=holder(head.checkpoint, cp),
                      base=head.base, deltas=deltas, base_version=base.version,
                      scan_from=start - 1 if cp.scan_from < 0 else cp.scan_from, found=found,
                      waits=waits)

    def _check_fits(self, head: RunHead, needed: list[str],
                    found: dict[str, tuple[int, PendingWrite]]) -> None:
        """Raise FlowMismatch if a node the run needs next is gone from its flow."""
        flow = self.flow(head.flow)
        for name in needed:
            if name not in flow.nodes:
                raise FlowMismatch(head.run_id, name, "next", flow=head.flow)
        for _, write in found.values():
            if write.node not in flow.nodes:
                raise FlowMismatch(head.run_id, write.node, "pending-write", flow=head.flow)

    # -- decisions -----------------------------------------------------------
    def decide(self, approval_id: str, decision: Decision | str, *, by: str | None = None,
               reason: str | None = None, result: Any = None) -> bool:
        """Record a decision (approve/reject, or mark_done/retry/abort). Runs nothing.

        Returns:
            True if recorded now, False if the same decision was already recorded.
        """
        if result is not None:
            check_serializable(result, f"the result given with decision {decision!r}")
        recorded = [True]

        def check(r: Reader) -> None:
            _, again = check_decision(r, approval_id, decision, now=self.clock(), value=result)
            recorded[0] = not again
            if again:
                raise _AlreadyDecided()

        with self.store.reader() as r:
            req, again = check_decision(r, approval_id, decision, now=self.clock(),
                                        value=result)
        if again:
            return False
        try:
            self.store.commit([decided(req, decision, by=by, reason=reason, result=result,
                                       at=self.clock())], check=check)
        except _AlreadyDecided:
            return False
        return recorded[0]

    async def adecide(self, approval_id: str, decision: Decision | str, *, by: str | None = None,
                      reason: str | None = None, result: Any = None) -> bool:
        """``decide`` without blocking the event loop."""
        return await off_loop(self.decide, approval_id, decision, by=by, reason=reason,
                              result=result)

    def answer(self, approval_id: str, value: Any, *, by: str | None = None,
               reason: str | None = None) -> bool:
        """Answer a question (``ctx.ask``) with ``value``. Runs nothing: resume the run (or
        let a watcher) and ``ctx.ask`` returns the value, converted to its schema.

        Returns:
            True if recorded now, False if this same answer was already recorded.

        Raises:
            UnknownApproval. InvalidAnswer: ``value`` does not match the question's schema.
            DecisionNotAllowed: ``approval_id`` is not a question. DecisionRefused:
            answered otherwise already, or expired. Nothing is recorded then.
        """
        check_serializable(value, f"the answer to {approval_id!r}")
        return self.decide(approval_id, Decision.ANSWER, by=by, reason=reason, result=value)

    def review_answer(self, approval_id: str, *,
                      edit: Sequence[dict[str, Any] | None] | None = None,
                      respond: str | None = None) -> Any:
        """The answer a HITL review (LangChain's ``HumanInTheLoopMiddleware``) takes for
        these edits — ``edit``: the arguments of each call under review, in order, None
        for a call approved as it is — or for replying ``respond`` in every call's place.
        Records nothing: give it to ``answer``.

        Raises:
            UnknownApproval. DecisionRefused: not a review, or the edit or reply is one
                its review configs do not allow.
        """
        with self.store.reader() as r:
            req = r.approval(approval_id)
        if req is None:
            raise UnknownApproval(approval_id)
        review = reviews.review_of(req.payload, req.schema)
        if review is None or (edit is None) == (respond is None):
            raise DecisionRefused(approval_id, "it is not a HITL review" if review is None
                                  else "give either the edited arguments or a reply")
        try:
            return review.edited(list(edit)) if edit is not None else review.responded(
                str(respond))
        except ValueError as exc:
            raise DecisionRefused(approval_id, str(exc)) from None

    async def aanswer(self, approval_id: str, value: Any, *, by: str | None = None,
                      reason: str | None = None) -> bool:
        """``answer`` without blocking the event loop."""
        return await off_loop(self.answer, approval_id, value, by=by, reason=reason)

    def check_decision(self, approval_id: str, decision: Decision | str, *,
                       value: Any = None) -> dict[str, Any]:
        """Check, without writing anything, that ``decision`` can be recorded now
        (``value``: an answer's, checked against the question's schema).

        Returns:
            The request (as in ``pending()``), to bind a decision file to it.

        Raises:
            UnknownApproval: no such request.
            DecisionRefused: the decision is not one the request allows, the request was
                already decided (says what and by whom), or it expired.
        """
        with self.store.reader() as r:
            req = undecided(r, approval_id, decision, now=self.clock(), value=value)
        return inspect.pending_row(req)

    # -- signals ---------------------------------------------------------------
    def signal(self, run_id: str, name: str, data: Any = None, *, by: str | None = None) -> int:
        """Send signal ``name`` with ``data`` to a run. Runs nothing: a run waiting for it
        (``ctx.wait_for``) goes on when resumed (or by a watcher); a run not waiting yet
        keeps it, and its next ``wait_for(name)`` takes it (oldest first, once).

        Returns:
            The signal's log seq (its place in the run's queue).

        Raises:
            UnknownRun. SignalRefused: the run is DONE or CANCELLED (a FAILED run may
            be resumed, so it keeps signals). NotSerializable: ``data`` is not kept.
        """
        return signals.send(self.store, run_id, name, data, now=self.clock(), by=by)

    async def asignal(self, run_id: str, name: str, data: Any = None, *,
                      by: str | None = None) -> int:
        """``signal`` without blocking the event loop."""
        return await off_loop(self.signal, run_id, name, data, by=by)

    # -- schedules -------------------------------------------------------------
    def schedule(self, name: str, flow: str, *, every: float | None = None,
                 cron: str | None = None, input: dict[str, Any] | None = None,  # noqa: A002
                 catch_up: bool = False, tz: str | None = None,
                 check_flow: bool = True) -> Schedule:
        """Record (or replace) schedule ``name``: ``bide watch`` starts one run of ``flow``
        with ``input`` per slot, every ``every`` seconds (aligned to the epoch) or at each
        time ``cron`` names (UTC, or ``tz``). See ``engine/run/schedules.py``.

        ``check_flow=False`` records a flow this process has not registered (``bide
        schedule`` without ``--app``); a watcher whose app lacks it logs and skips it.

        Raises:
            InvalidSchedule: a bad name, interval, cron string or time zone, or both or
                neither of every/cron. UnknownFlow: this engine has no such flow.
        """
        every_s, cron_s = schedules.check(name, every=every, cron=cron, tz=tz,
                                          input=dict(input or {}))
        if check_flow:
            self.flow(flow)
        schedules.record(self.store, name, flow, every=every_s, cron=cron_s, tz=tz,
                         input=dict(input or {}), catch_up=catch_up, now=self.clock())
        return self.schedule_of(name)

    def unschedule(self, name: str) -> None:
        """Remove schedule ``name``; its runs stay. Raises UnknownSchedule."""
        schedules.remove(self.store, name, now=self.clock())

    def schedules(self) -> list[Schedule]:
        """Every schedule of the home, by name, with its next due slot and last started."""
        with self.store.reader() as r:
            return [schedules.shown(s) for s in schedules.states(r)]

    def schedule_of(self, name: str) -> Schedule:
        """One schedule. Raises UnknownSchedule."""
        with self.store.reader() as r:
            found = schedules.state(r, name)
        if found is None:
            raise UnknownSchedule(name)
        return schedules.shown(found)

    def pending(self) -> list[dict[str, Any]]:
        """Decisions waiting: approvals, questions (kind ``input``: ``question`` and the
        ``schema`` of the answer) and reconciliations nobody has decided yet; and runs
        waiting for a signal (kind ``signal``: ``signal``, ``until``; no approval id)."""
        with self.store.reader() as r:
            rows = [inspect.pending_row(a, request_preview(r, a)) for a in r.approvals()
                    if a.decision is None
                    and not (a.kind == Waiting.TIMER and timers.run_ended(r, a.run_id))]
            rows += signals.pending_rows(r, attention.run_ids(r))
            rows += children.pending_rows(r, attention.run_ids(r))
        return sorted(rows, key=lambda a: a["requested_at"])

    # -- reading ---------------------------------------------------------------
    def _head(self, run_id: str) -> RunHead:
        with self.store.reader() as r:
            head = r.head(run_id)
        if head is None:
            raise UnknownRun(run_id)
        return head

    def get(self, run_id: str) -> Run:
        """The run as it stands in the store."""
        return self._run(self._head(run_id))

    def _run(self, head: RunHead) -> Run:
        return Run(head, lambda: self.state(head.run_id))

    def runs(self, status: Status | str | None = None, flow: str | None = None) -> list[Run]:
        """Every run, optionally of one status (a Status or its name, any case) or flow.

        Newest first. Raises UnknownStatus for a status that does not exist.
        """
        wanted = None if status is None else Status.of(status).value
        with self.store.reader() as r:
            heads = [h for h in r.heads()
                     if (wanted is None or h.status == wanted)
                     and (flow is None or h.flow == flow)]
        heads.sort(key=lambda h: h.created_at, reverse=True)
        return [self._run(h) for h in heads]

    def checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of the run in order, with the bytes each one committed."""
        self._head(run_id)
        out = []
        with self.store.reader() as r:
            for seq, rtype in r.run_entries(run_id):
                if rtype != "checkpoint":
                    continue
                raw = r.raw(seq) or b""
                cp = r.record(seq)
                assert isinstance(cp, Checkpoint)
                out.append(CheckpointInfo(seq, cp.version, cp.superstep, cp.status,
                                          list(cp.committed), next_of(r, seq, cp),
                                          cp.full,
                                          len(raw), cp.at))
        return out

    def state(self, run_id: str, version: int | None = None) -> dict[str, Any]:
        """The run's state at its latest checkpoint, or at checkpoint ``version``.

        A LangGraph thread's is its channel values, read by the engine's driver."""
        head = self._head(run_id)
        if head.flow == LANGGRAPH:
            if self.driver is None:
                raise ConfigError("graphs", f"{run_id} is a LangGraph thread: its state is read "
                                      "by bide.langgraph (serve_graphs on this engine, or "
                                      "bide.langgraph.thread_state)")
            return self.driver.state(run_id, version)
        with self.store.reader() as r:
            seq = head.checkpoint if version is None else RunView(r, head).checkpoint_seq(version)
            return materialize(r, run_id, seq)

    def intents(self, run_id: str) -> list[dict[str, Any]]:
        """The run's tool calls: key, tool, status, idempotency key, result or error."""
        self._head(run_id)
        with self.store.reader() as r:
            return [_intent_row(i) for i in r.intents(run_id)]

    def records(self, run_id: str) -> Iterator[tuple[int, str, int]]:
        """``(seq, type, bytes)`` of each of the run's records, in log order."""
        with self.store.reader() as r:
            rows = [(s, t, len(r.raw(s) or b"")) for s, t in r.run_entries(run_id)]
        return iter(rows)


class _AlreadyDecided(Exception):
    """The same decision landed between our read and our commit."""


def _intent_row(i: Any) -> dict[str, Any]:
    return {"key": i.key, "tool": i.tool, "status": i.status, "node": i.node,
            "idempotency_key": i.idempotency_key, "attempts": i.attempts, "result": i.result,
            "error": i.error, "error_type": i.error_type, "via": i.via,
            "approval_id": i.approval_id, "decision": i.decision, "by": i.by, "reason": i.reason}


def open(home: str | os.PathLike[str] = ".bide", *,  # noqa: A001
         durability: str = "durable", create: bool = True, map_size: int = DEFAULT_MAP_SIZE,
         max_size: int = DEFAULT_MAX_SIZE, lease_ttl: float = 30.0,
         approval_key: bytes | str | None = None,
         clock: Callable[[], float] = time.time, store: Store | None = None,
         local: str | os.PathLike[str] | None = None,
         inbox: str | os.PathLike[str] | None = None,
         requests: str | os.PathLike[str] | None = None, tracer: Any = None) -> Engine:
    """Open a bide home (created if missing, unless ``create=False``).

    ``home`` is a directory, or a ``postgresql://`` URL: the records then live in
    that database (``pip install 'bide[postgres]'``), shared by every host.

    Args:
        durability: ``"durable"`` fsyncs every commit; ``"fast"`` survives a killed
            process, not power loss.
        create: False opens an existing home only and changes nothing on disk.
        map_size, max_size: the LMDB map's first and largest size, in bytes.
        lease_ttl: seconds a worker's lease on a run lasts between renewals.
        approval_key: the HMAC key decision files must be signed with.
        clock: where time comes from (tests inject one).
        store: keep the records in this ``Store`` (e.g. ``MemoryStore``) instead of
            ``<home>/store``; the home still holds the inbox, and the store's own
            durability applies.
        local: with a PostgreSQL home, this host's directory for the inbox (default
            ``.bide``) and, when given, the request files.
        inbox: the directory decision files are taken from (default ``inbox/`` in the
            home, or in ``local``).
        requests: the directory request files are written to (default ``requests/`` in
            the home; with a PostgreSQL home, in ``local`` if given, else none).
        tracer: an OpenTelemetry ``Tracer`` (``pip install 'bide[otel]'``): spans for
            run → superstep → node → tool call (engine/run/tracing.py). None: no tracing.
    """
    return Engine(home, durability=durability, create=create, map_size=map_size,
                  max_size=max_size, lease_ttl=lease_ttl, approval_key=approval_key,
                  clock=clock, store=store, local=local, inbox=inbox, requests=requests,
                  tracer=tracer)


__all__ = ["Engine", "FINISHED", "open"]
