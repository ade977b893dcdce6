"""Child runs: ``ctx.child(flow, input)`` starts one run of another flow and waits for it.

A child's run id is derived from its parent's and the call (the task and the call's
index in its node, or the ``key`` given), so a node that runs again after a crash
finds the child it started and never starts a second. The child's ``RunCreated``
rides in the parent's pause commit (with ``ChildStarted`` in the parent's log and
``ChildOf`` in the child's): a child exists exactly when its parent has paused for it.

The parent waits as ``WAITING_CHILD`` until every child it started has ended
(``ready``: read from the children's heads, found through the parent's own log, so no
run is scanned that is not its child). When a child ends, ``ChildEnded`` is committed
to the parent's log: it wakes a watcher at once (PostgreSQL: the commit's NOTIFY), and
a crash before it costs only that wake-up: a rescan finds the parent ready.

With no watcher, ``engine.start``/``resume`` run a parent's runnable children in the
calling worker and then go on with the parent (``carry_on``). Cancelling a parent
cancels its unfinished children, and theirs, in the same transaction (``cascade``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from ...formats import (
    ChildEnded,
    ChildOf,
    ChildStarted,
    LeaseAcquired,
    LeaseReleased,
    Record,
    StatusChanged,
    check_serializable,
)
from ...formats.errors import NotSerializable
from ..base import faults
from ..base.errors import (
    ChildFailed,
    InvalidChild,
    Nondeterminism,
    Paused,
    RunNotResumable,
    StaleLease,
    UnknownFlow,
)
from ..base.vocabulary import FINISHED, Status, Waiting
from ..storage.index import RunHead
from ..storage.store import Reader
from .host import Host
from .lease_clock import Grant
from .runs import MAX_RUN_ID, Run, run_records
from .state import materialize

if TYPE_CHECKING:
    from .step import StepScope



class Advance(Protocol):
    """One worker's advance of one run (``executor.Execution``)."""

    def run(self) -> None: ...

    async def arun(self) -> None: ...


class ChildRunner(Host, Protocol):
    """What running children in this worker needs of the Engine: it can run a run."""

    inline_children: bool  # False under a watcher: its workers run the children

    def get(self, run_id: str) -> Run: ...

    def resume(self, run_id: str) -> Run: ...

    async def aresume(self, run_id: str) -> Run: ...

    def _take(self, run_id: str) -> Run | Grant: ...

    def _execution(self, run_id: str, grant: Grant) -> Advance: ...


MAX_DEPTH = 16  # runs nested deeper than this are a flow that starts itself for ever
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,47}")
_PREFIX = 64  # of the parent's id kept in a child's id (the rest is a digest)


# -- identity --------------------------------------------------------------------------
def child_id(parent: str, task: str, index: int, key: str | None) -> str:
    """The id of the child a call starts: the same for the same call on every run."""
    prefix = parent if len(parent) <= _PREFIX else f"{parent[:_PREFIX - 13]}-{_digest(parent)}"
    label = key if key is not None else _digest(f"{task}\0{index}")
    out = f"{prefix}~{label}"
    assert len(out) <= MAX_RUN_ID
    return out


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(errors="surrogateescape"), digest_size=6).hexdigest()


def check_key(run_id: str, key: Any) -> str | None:
    """``key`` if it can name a child (None: the call names it).

    Raises:
        InvalidChild: not 1-48 letters, digits, ``_.:-``, starting with a letter or digit.
    """
    if key is None or (isinstance(key, str) and _KEY.fullmatch(key)):
        return key
    raise InvalidChild(run_id, f"key {key!r} must be 1-48 letters, digits or '_.:-', "
                       "starting with a letter or digit")


# -- the links, read from the logs ------------------------------------------------------------
def link(reader: Reader, run_id: str) -> ChildOf | None:
    """The run's link to its parent, or None for a run nobody started with ``ctx.child``."""
    for seq, rtype in reader.run_entries(run_id):
        if rtype == ChildOf.TYPE:
            record = reader.record(seq)
            assert isinstance(record, ChildOf)
            return record
        if rtype == "checkpoint":
            return None  # ChildOf rides with the run's first checkpoint, just before it
    return None


def started(reader: Reader, parent: str) -> list[ChildStarted]:
    """Every child the run started, in the order it started them."""
    out = []
    for seq, rtype in reader.run_entries(parent):
        if rtype == ChildStarted.TYPE:
            record = reader.record(seq)
            assert isinstance(record, ChildStarted)
            out.append(record)
    return out


def unfinished(reader: Reader, parent: str) -> list[RunHead]:
    """The heads of the run's children that have not ended."""
    heads = (reader.head(c.child) for c in started(reader, parent))
    return [h for h in heads if h is not None and h.status not in FINISHED]


def ready(reader: Reader, head: RunHead) -> bool:
    """Can a WAITING_CHILD run go on: every child it started has ended?"""
    return not unfinished(reader, head.run_id)


# -- ctx.child ------------------------------------------------------------------------------------
def child(scope: StepScope, node: str, task: str, index: int, flow: str, input: Any,  # noqa: A002
          key: str | None) -> dict[str, Any]:
    """``ctx.child``: the child's final state once DONE; pause the parent until then.

    Raises:
        ChildFailed: the child ended FAILED or CANCELLED.
        UnknownFlow, InvalidChild: nothing is started.
    """
    key = check_key(scope.run_id, key)
    cid = child_id(scope.run_id, task, index, key)
    with scope.reader() as r:
        head = r.head(cid)
        if head is None:
            raise Paused(waiting(node, cid, flow), _start(scope, r, node, task, index, cid,
                                                          flow, input, key))
        mine = link(r, cid)
        if mine is None or mine.parent != scope.run_id:
            raise InvalidChild(scope.run_id, f"run {cid!r} exists and is not its child; "
                               "give ctx.child another key")
        if head.flow != flow:
            raise Nondeterminism(node, index, f"child run of flow {head.flow!r}",
                                 f"child run of flow {flow!r}")
        if head.status == Status.DONE:
            return materialize(r, cid, head.checkpoint)
    if head.status in (Status.FAILED, Status.CANCELLED):
        raise ChildFailed(scope.run_id, cid, head.status, head.error or head.reason)
    raise Paused(waiting(node, cid, flow), [])


def waiting(node: str, cid: str, flow: str) -> dict[str, Any]:
    """``run.waiting`` of a parent paused for child ``cid``."""
    return {"type": Waiting.CHILD.value, "node_id": node, "run_id": cid, "flow": flow}


def _start(scope: StepScope, r: Reader, node: str, task: str, index: int, cid: str,
           flow: str, input: Any, key: str | None) -> list[Record]:  # noqa: A002
    """The records that start the child, to ride in the parent's pause commit."""
    if flow not in scope.flows:
        raise UnknownFlow(flow, list(scope.flows))
    if not isinstance(input, dict | None):
        raise InvalidChild(scope.run_id, f"its input must be a dict (the child's state), "
                           f"not {type(input).__name__}")
    state = dict(input or {})
    for name, value in state.items():
        try:
            check_serializable(value, f"the input {name!r} of child run {cid!r}")
        except NotSerializable as exc:
            raise InvalidChild(scope.run_id, str(exc)) from None
    mine = link(r, scope.run_id)
    depth = 1 if mine is None else mine.depth + 1
    if depth > MAX_DEPTH:
        raise InvalidChild(scope.run_id, f"runs nest {MAX_DEPTH} deep already (does flow "
                           f"{flow!r} start itself for ever?)")
    now = scope.clock()
    first = run_records(scope.flows[flow], cid, state, scope.policy.to_dict(),
                        Status.PENDING, now)
    return [ChildStarted(run_id=scope.run_id, child=cid, flow=flow, node=node, task=task,
                         index=index, key=key, at=now),
            first[0], ChildOf(run_id=cid, parent=scope.run_id, node=node, depth=depth, at=now),
            *first[1:]]


# -- a child ended: wake its parent -------------------------------------------------------
def tell_parent(engine: ChildRunner, run_id: str) -> str | None:
    """If run ``run_id`` is a child that has ended, record that in its parent's log
    (unless the parent has finished): the parent's watcher is woken. Returns the
    parent's id, if any."""
    def build(r: Reader) -> list[Record]:
        head = r.head(run_id)
        mine = link(r, run_id)
        if head is None or mine is None or head.status not in FINISHED:
            return []
        parent = r.head(mine.parent)
        if parent is None or parent.status in FINISHED:
            return []  # nobody to wake (a child ends once; a second wake-up is harmless)
        return [ChildEnded(run_id=mine.parent, child=run_id, status=head.status,
                           error=head.error, at=engine.clock())]

    with engine.store.reader() as r:
        head, mine = r.head(run_id), link(r, run_id)
    if mine is None or head is None or head.status not in FINISHED:
        return None
    faults.point("after_child_ended")
    if engine.store.commit(build):
        faults.point("after_parent_woken")
    return mine.parent


# -- no watcher: the caller's worker runs the children -------------------------------------
# the parents whose children this worker (thread, or asyncio task) is running
_carrying: ContextVar[frozenset[str]] = ContextVar("bide_carrying", default=frozenset())


def carry_on(engine: ChildRunner, run: Run) -> Run:
    """After a run advanced (or was asked to) in this worker, with no watcher: a parent
    waiting for children has every child that can go on run here, then goes on itself
    once they all ended, until it stops for something else; an ended child tells its
    parent, and resumes it if it was the last to end and no parent loop here has it."""
    parent = tell_parent(engine, run.run_id)
    if not engine.inline_children:
        return run
    if parent is not None and parent not in _carrying.get() and _parent_ready(engine, parent):
        _resume_quietly(engine, parent)
    mark = _carrying.set(_carrying.get() | {run.run_id})
    try:
        while run.status == Status.WAITING_CHILD:
            for head in _children(engine, run.run_id):
                _resume_quietly(engine, head.run_id)
            token = _retake(engine, run.run_id)
            if token is None:
                break
            engine._execution(run.run_id, token).run()
            run = engine.get(run.run_id)
            tell_parent(engine, run.run_id)
    finally:
        _carrying.reset(mark)
    return run


async def acarry_on(engine: ChildRunner, run: Run) -> Run:
    """``carry_on`` on the caller's event loop (async nodes of every run share it)."""
    from ..base.offload import off_loop

    parent = await off_loop(tell_parent, engine, run.run_id)
    if not engine.inline_children:
        return run
    if (parent is not None and parent not in _carrying.get()
            and await off_loop(_parent_ready, engine, parent)):
        await _aresume_quietly(engine, parent)
    mark = _carrying.set(_carrying.get() | {run.run_id})
    try:
        while run.status == Status.WAITING_CHILD:
            for head in await off_loop(_children, engine, run.run_id):
                await _aresume_quietly(engine, head.run_id)
            token = await off_loop(_retake, engine, run.run_id)
            if token is None:
                break
            await (await off_loop(engine._execution, run.run_id, token)).arun()
            run = await off_loop(engine.get, run.run_id)
            await off_loop(tell_parent, engine, run.run_id)
    finally:
        _carrying.reset(mark)
    return run


def _resume_quietly(engine: ChildRunner, run_id: str) -> None:
    try:
        engine.resume(run_id)
    except (RunNotResumable, StaleLease):
        pass  # another worker has it, or it ended meanwhile: it goes on there


async def _aresume_quietly(engine: ChildRunner, run_id: str) -> None:
    try:
        await engine.aresume(run_id)
    except (RunNotResumable, StaleLease):
        pass


def _parent_ready(engine: ChildRunner, parent: str) -> bool:
    with engine.store.reader() as r:
        head = r.head(parent)
        return head is not None and head.status == Status.WAITING_CHILD and ready(r, head)


def to_offer(engine: ChildRunner, run: Run) -> list[RunHead]:
    """What a watcher worker offers after advancing ``run``: a waiting parent's children
    that have not ended, or an ended child's parent once it can go on."""
    with engine.store.reader() as r:
        if run.status == Status.WAITING_CHILD:
            return unfinished(r, run.run_id)
        mine = link(r, run.run_id) if run.status in FINISHED else None
        parent = None if mine is None else r.head(mine.parent)
        if parent is not None and parent.status == Status.WAITING_CHILD and ready(r, parent):
            return [parent]
    return []


def _children(engine: ChildRunner, run_id: str) -> list[RunHead]:
    faults.point("after_parent_paused")
    with engine.store.reader() as r:
        return unfinished(r, run_id)


def _retake(engine: ChildRunner, run_id: str) -> Grant | None:
    """The parent's lease to go on with it, or None while a child has not ended."""
    taken = engine._take(run_id)
    return None if isinstance(taken, Run) else taken


# -- cancel: the whole tree in one transaction ----------------------------------------------
def cascade(r: Reader, run_id: str, *, at: float, owner: str) -> list[Record]:
    """Records that cancel every unfinished descendant of ``run_id`` (taking over the
    lease of any worker on one), to ride in the commit that cancels ``run_id``."""
    records: list[Record] = []
    for head, parent in _descendants(r, run_id):
        if head.lease_owner is not None:
            token = head.lease_token + 1
            records += [LeaseAcquired(run_id=head.run_id, owner=owner, token=token,
                                      expires_at=at, attempts=head.attempts, at=at),
                        LeaseReleased(run_id=head.run_id, owner=owner, token=token, at=at)]
        records.append(StatusChanged(run_id=head.run_id, status=Status.CANCELLED,
                                     reason=f"its parent run {parent} was cancelled", at=at))
    mine = link(r, run_id)
    if mine is not None:  # a cancelled child wakes its own parent (ChildFailed there)
        records.append(ChildEnded(run_id=mine.parent, child=run_id, status=Status.CANCELLED,
                                  error="cancelled", at=at))
    return records


def _descendants(r: Reader, run_id: str, depth: int = 0) -> Iterator[tuple[RunHead, str]]:
    """Every unfinished run below ``run_id``, with its parent's id."""
    for head in unfinished(r, run_id):
        yield head, run_id
        if depth < MAX_DEPTH:
            yield from _descendants(r, head.run_id, depth + 1)


# -- what the read commands show --------------------------------------------------------------
def waiting_text(w: dict[str, Any]) -> str:
    """``bide runs``'s WAITING ON for a run waiting for a child run."""
    return f"child {w.get('run_id')} ({w.get('item') or w.get('node_id')}, flow {w.get('flow')})"


def describe(record: ChildStarted | ChildOf | ChildEnded) -> str:
    """One child record, as ``bide log`` shows it."""
    match record:
        case ChildStarted():
            return (f"started {record.child} (flow {record.flow}) in {record.node}"
                    + (f", key {record.key}" if record.key else ""))
        case ChildOf():
            return f"child of {record.parent} (its {record.node}), depth {record.depth}"
    return f"{record.child} ended {record.status}" + (
        f": {record.error}" if record.error else "")


def family(reader: Reader, run_id: str) -> dict[str, Any]:
    """``bide show``'s links: the run's parent (or None) and its children with status."""
    mine = link(reader, run_id)
    kids = []
    for c in started(reader, run_id):
        head = reader.head(c.child)
        kids.append({"run_id": c.child, "flow": c.flow, "node": c.node, "key": c.key,
                     "status": None if head is None else head.status})
    return {"parent": None if mine is None else mine.parent, "children": kids}


def pending_rows(reader: Reader, run_ids: Iterator[str]) -> list[dict[str, Any]]:
    """``bide pending``'s rows for the runs among ``run_ids`` that wait for child runs: the
    keys of a decision's row (``approval_id`` None) plus ``child`` and ``children`` (the
    ids of those not ended)."""
    rows: list[dict[str, Any]] = []
    for run_id in run_ids:
        head = reader.head(run_id)
        if head is None or head.status != Status.WAITING_CHILD:
            continue
        w = head.waiting or {}
        rows.append({"approval_id": None, "run_id": run_id, "kind": Waiting.CHILD.value,
                     "node": w.get("node_id"), "action": f"child {w.get('run_id')}",
                     "payload": None, "digest": None, "allowed": [], "tool": None,
                     "intent": None, "requested_at": head.updated_at, "expires_at": None,
                     "schema": None, "question": None, "until": None,
                     "child": w.get("run_id"),
                     "children": [h.run_id for h in unfinished(reader, run_id)]})
    return rows
