"""The LMDB implementation of ``Store``.

LMDB facts this code leans on (measured, see DESIGN.md): ``append=True`` needs a
key above the last key of the whole database, so the log uses one global
big-endian sequence; a durable commit is two flushes (its pages under the writer
lock, its meta page after it: ``durable_point.py``), ``sync=False`` survives a
killed process; growing the map is refused while a write transaction is open
in this process, and another process must adopt the new size with
``set_mapsize(0)`` after ``MapResizedError``; one handle per process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

import lmdb

from ...formats import Checkpoint, Record, decode, encode, unpack_value
from ..base import faults
from ..base.errors import (
    DurabilityLost,
    NewerStore,
    NotAHome,
    ReadOnlyHome,
    StoreError,
    StoreFull,
)
from ..base.permissions import PRIVATE_FILE, open_private, private_dir
from ..base.vocabulary import FINISHED
from . import attention, latest
from .attention import ATTENTION
from .change_feed import ChangeFeed, file_feed
from .durable_point import DurablePoint
from .group_commit import Batch, Finish, GroupCommit, Request, run_alone
from .hot_cache import CACHED, MISS, HotCache, Layer
from .index import (
    DERIVED,
    FRAMED,
    RUNLOG,
    RUNS,
    RunHead,
    apply,
    call_results,
    keep_head,
    refold_without,
    runlog_key,
    runlog_type,
    seq_key,
    seq_of,
    take_head,
    with_checksum,
)
from .latest import SEGMENTS, STATE
from .leases import check_fence, grants, renew_if_held, stamp_grants
from .lmdb_layout import (
    LEGACY,
    LEGACY_ONLY,
    MAIN,
    MAX_DBS,
    META,
    NAMED,
    TREE,
    Layout,
    head_at,
    layout_of,
    past_entries,
    run_end,
)
from .restore import COPY_MARKER, Row, restore_rows
from .store import LEASES, LOG, Check, Later, Logged, Observed, WriteEvent, numbered
from .table_reads import TableReads

# 2: derived index values carry a checksum (index.with_checksum);
# 3: the attention table lists the runs that are not finished (attention.build);
# 4: the latest-state index (engine/storage/latest.py), built for every run on upgrade;
# 5: the log, run log, run heads and latest state in LMDB's main database (lmdb_layout.TREE)
STORE_FORMAT = 5
_TREE_FORMAT = 5  # from this format on, the store is laid out as lmdb_layout.TREE
_HIGH_WATER = b"deleted_last_seq"  # seqs are never given twice, even after `delete`
DEFAULT_MAP_SIZE = 64 << 20
DEFAULT_MAX_SIZE = 1 << 40
DURABILITIES = ("durable", "fast")
T = TypeVar("T")

_OPEN_RETRIES = 100  # lmdb.open racing another process that keeps growing the map
_INTERRUPTED = "data.mdb.interrupted-"  # a creation killed half-way, set aside
RESERVE = "disk-full-reserve"  # room kept for the commit that releases a run on a full disk
RESERVE_BYTES = 256 << 10
_LOW_SPACE = 1 << 20  # below this, an I/O error during a commit is a full disk (a short write)


class _Handle(NamedTuple):
    """This process's one environment for a store path, shared by every ``LMDBStore`` on it.

    ``dbs`` are opened once, with the environment: py-lmdb's ``open_db()``
    without a transaction begins a write transaction while holding the GIL, so
    a thread calling it while another thread of this process holds LMDB's
    writer lock (and waits for the GIL inside a commit) hangs the process.
    ``write_lock`` is this process's one writer path: a thread waits for it in
    Python (the GIL released) before ``begin(write=True)``.
    """

    env: lmdb.Environment
    users: int  # LMDBStores of this process open on it (not `count`: a tuple method)
    mode: str
    pid: int
    dbs: dict[str, Any]
    write_lock: threading.RLock
    readonly: str | None  # why this process cannot write the store, or None
    hot: HotCache  # hot derived values, exact or absent (engine/storage/hot_cache.py)
    durable: DurablePoint | None  # under "durable": the flush that acknowledges commits


_handles: dict[str, _Handle] = {}
_handles_lock = threading.Lock()


class _Gate:
    """This process's transactions share the gate; changing the map size takes it alone.

    py-lmdb's ``set_mapsize`` cancels every open transaction of the process, so
    a thread that grows the map (or adopts another process's growth) first
    waits for the other threads' transactions to end, and none starts meanwhile.
    A thread's own nested transactions never wait (they would deadlock).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # taken as it is: Condition's own enter is Python
        self._cond = threading.Condition(self._lock)
        self._active = 0
        self._resizing = False
        self._mine = threading.local()
        self._shared = _Shared(self)  # one object for every use: entered at every commit

    def _held(self) -> int:
        return getattr(self._mine, "n", 0)

    def holding(self) -> bool:
        """Whether this thread has a transaction open (a read snapshot, most likely)."""
        return self._held() > 0

    def shared(self) -> _Shared:
        return self._shared

    def _enter(self) -> None:
        with self._lock:
            held = getattr(self._mine, "n", 0)  # ``_held``, inlined
            if not held:
                while self._resizing:
                    self._cond.wait()
            self._active += 1
            self._mine.n = held + 1

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1
            self._mine.n -= 1
            if self._resizing:  # only ``exclusive`` waits for the count to drop
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            try:
                while self._active > self._held():
                    self._cond.wait()
            except BaseException:  # a Ctrl-C while the others' transactions end: left set,
                self._resizing = False  # every later transaction of the process would
                self._cond.notify_all()  # wait for a resize that never comes
                raise
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class _Shared:
    """``with gate.shared():`` as a plain object (a generator's context manager cost a
    commit more than the gate itself)."""

    __slots__ = ("gate",)

    def __init__(self, gate: _Gate) -> None:
        self.gate = gate

    def __enter__(self) -> None:
        self.gate._enter()

    def __exit__(self, *exc: object) -> None:
        self.gate._leave()


_gate = _Gate()


def _acquire_env(path: Path, durability: str, map_size: int) -> _Handle:
    """One environment per process and path (LMDB forbids opening it twice)."""
    key = str(path.resolve())
    with _handles_lock:
        found = _handles.get(key)
        if found is not None and found.pid == os.getpid():
            if found.mode != durability:
                raise StoreError(
                    f"{path} is already open in this process with durability={found.mode!r}; "
                    f"open it again with the same durability, not {durability!r}", path=path,
                )
            _handles[key] = found = found._replace(users=found.users + 1)
            return found
        readonly = why_readonly(path)
        with nullcontext() if readonly is not None else _creating(path):
            env = _open_env(key, durability, map_size, readonly=readonly is not None)
            try:
                dbs = _open_dbs(env, readonly=readonly is not None)
            except BaseException:
                env.close()
                raise
        point = None if durability != "durable" or readonly is not None else DurablePoint(
            lambda: int(env.info()["last_txnid"]), lambda: env.sync(True))
        _handles[key] = found = _Handle(env, 1, durability, os.getpid(), dbs, threading.RLock(),
                                        readonly, HotCache(), point)
        return found


def _initialized(data: Path) -> bool:
    """LMDB writes a new file's two meta pages before anything else: a file shorter than
    that holds no commit (a process was killed while creating it)."""
    try:
        return data.stat().st_size >= 2 * os.sysconf("SC_PAGE_SIZE")
    except FileNotFoundError:
        return False


@contextmanager
def _creating(path: Path) -> Iterator[None]:
    """While a store may be new, create it under ``grow.lock`` (one creator at a time,
    across processes), first setting aside a ``data.mdb`` an earlier creator was killed
    writing: renamed beside it with the time, never deleted. An initialized store
    needs no lock."""
    if _initialized(path / "data.mdb"):
        yield
        return
    fd = open_private(path / "grow.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
        data = path / "data.mdb"
        if data.exists() and data.stat().st_size and not _initialized(data):
            # no creator is running, so one was killed (an empty file LMDB fills itself)
            os.replace(data, path / f"{_INTERRUPTED}{time.time_ns()}")
        yield
    finally:
        os.close(fd)


def why_readonly(path: Path) -> str | None:
    """Why this process cannot write the store at ``path`` (None: it can).

    ``os.access`` answers for a read-only mount even as root (who ignores modes).
    """
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        return "its file system is mounted read-only"
    for p in (path, path / "data.mdb", path / "lock.mdb"):
        if p.exists() and not os.access(p, os.W_OK):
            return f"no permission to write {p}"
    return None


def _open_env(key: str, durability: str, map_size: int, *,
              readonly: bool) -> lmdb.Environment:
    """``lmdb.open``, retried while another process grows the map under it.

    py-lmdb's open reads the map size, then begins a transaction: a process
    growing the map in between makes that begin fail with ``MapResizedError``.
    Opening again reads the new size. A read-only store is opened without
    LMDB's lock file (it cannot be written): reads are then not protected
    against a process writing the same files meanwhile, which a read-only
    mount or a copy never has.
    """
    # "durable": LMDB flushes a commit's pages, and its meta page is flushed after the
    # writer lock is released (durable_point.py); "fast" flushes nothing
    sync = durability == "durable"
    for _ in range(_OPEN_RETRIES):
        try:
            if readonly:
                return lmdb.open(key, map_size=map_size, subdir=True, max_dbs=MAX_DBS,
                                 readonly=True, lock=False, readahead=False)
            return lmdb.open(
                key, map_size=map_size, subdir=True, max_dbs=MAX_DBS, sync=sync,
                metasync=False, readahead=False, max_readers=256, mode=PRIVATE_FILE,
            )
        except lmdb.MapResizedError:
            continue  # the other process grew the map between our two steps; read it again
        except lmdb.InvalidError as exc:  # never "fixed" by bide: the file may hold data
            raise StoreError(f"{key}/data.mdb is not an LMDB file ({exc}); restore the "
                             "home from a copy", path=key) from None
    raise StoreError(f"could not open {key}: the map kept growing under {_OPEN_RETRIES} tries",
                     path=key)


def _open_dbs(env: lmdb.Environment, *, readonly: bool) -> dict[str, Any]:
    """Open (creating) every named database in ONE explicit write transaction.

    Called only while the environment is new to this process, so no other
    thread of this process can hold its writer lock.
    """
    if readonly:  # py-lmdb begins a read-only transaction here: no writer lock to wait for
        dbs = existing_dbs(env, None, write=False)  # handles opened in a read txn die with it
        if any(name not in dbs for name in (LEGACY.named if LOG in dbs else NAMED)):
            raise StoreError(f"{env.path()} is read-only and lacks a table this bide "
                             "needs; open it once where it is writable", path=env.path())
        return dbs
    while True:
        try:
            with env.begin(write=True) as txn:
                dbs = existing_dbs(env, txn, write=True)  # an older layout's too, until moved
                dbs.update({name: env.open_db(name.encode(), txn=txn) for name in NAMED})
            env.sync(True)  # the meta page too (metasync=False): a new store is on disk
            return dbs
        except lmdb.MapResizedError:
            env.set_mapsize(0)  # no other transaction of ours exists on this new env


def existing_dbs(env: lmdb.Environment, txn: lmdb.Transaction[bytes] | None, *,
                 write: bool) -> dict[str, Any]:
    """The main database and every named database the store has: an older layout's
    too (``lmdb_layout.LEGACY``) until it is moved. A home already moved whose emptied
    old databases are still there (a crash after the move) loses them when ``write``.

    ``txn`` None: each handle is opened in a transaction of its own (py-lmdb keeps a
    handle opened in an explicit read-only transaction only while that one is open).
    """
    def opened(name: bytes | None, create: bool) -> Any:
        if txn is None:
            return env.open_db(name, create=create)
        return env.open_db(name, txn=txn, create=create)

    dbs = {MAIN: opened(None, True)}
    for name in dict.fromkeys((*NAMED, *LEGACY_ONLY)):
        try:
            dbs[name] = opened(name.encode(), False)
        except lmdb.NotFoundError:
            continue  # a table newer than the home, or one an older layout had
    fmt = None
    if META in dbs:
        with nullcontext(txn) if txn is not None else env.begin() as reading:
            fmt = reading.get(b"format", db=dbs[META])
    if fmt is not None and int(fmt) >= _TREE_FORMAT:
        for name in LEGACY_ONLY:
            if name in dbs and write and txn is not None:
                txn.drop(dbs.pop(name), delete=True)
            dbs.pop(name, None)
    return dbs


def _release_env(path: Path) -> None:
    key = str(path.resolve())
    with _handles_lock:
        found = _handles[key]
        if found.users > 1:
            _handles[key] = found._replace(users=found.users - 1)
            return
        del _handles[key]
    found.env.close()


class _Body(Generic[T]):
    """A write body as a batch runs it, keeping the store's hot cache exact: a body that
    stages its reads and writes gets a layer, kept if it returns; any other body
    poisons the transaction (the next one starts from an empty cache)."""

    __slots__ = ("store", "plain", "staged")

    def __init__(self, store: LMDBStore,
                 plain: Callable[[lmdb.Transaction[bytes]], T] | None,
                 staged: Callable[[lmdb.Transaction[bytes], Layer | None], T] | None) -> None:
        self.store, self.plain, self.staged = store, plain, staged

    def __call__(self, txn: lmdb.Transaction[bytes]) -> T:
        hot = self.store.hot
        if self.staged is None:
            assert self.plain is not None
            hot.poison()
            return self.plain(txn)
        layer = hot.layer(txn.id())
        if layer is None:
            return self.staged(txn, None)
        try:
            result = self.staged(txn, layer)
        except BaseException:
            layer.drop()
            raise
        layer.keep()
        return result


class _Rollback(Exception):
    """Every request of a batch failed: abort its transaction (nothing to commit)."""


_BATCH_RETRIED = (lmdb.MapFullError, lmdb.MapResizedError)  # the whole batch, after growing
# what stops the whole batch rather than one request: a retry, or a signal to the leader's
# thread (Ctrl-C lands in whichever body the main thread happens to run)
_NOT_A_REQUEST_S = (*_BATCH_RETRIED, KeyboardInterrupt, SystemExit)


def _begin(txn: lmdb.Transaction[bytes], batch: Batch) -> None:
    """A write transaction starts: its store's hot cache settles the last one (every
    body comes through ``LMDBStore._write``, wrapped as a ``_Body``)."""
    body = batch[0].body
    if isinstance(body, _Body):
        body.store.hot.begin(txn.id(), body.store)


def _run_one(txn: lmdb.Transaction[bytes], request: Request[Any]) -> None:
    """A batch of one runs in the transaction itself: no nested transaction to pay for."""
    _begin(txn, [request])
    try:
        request.succeed(request.body(txn))
    except _NOT_A_REQUEST_S:
        raise
    except BaseException as exc:  # noqa: BLE001 - the request's own failure, handed to its caller
        request.fail(exc)
        raise _Rollback from None


def _run_nested(env: lmdb.Environment, txn: lmdb.Transaction[bytes], batch: Batch) -> None:
    """Each request in a nested transaction: one that raises is rolled back alone."""
    _begin(txn, batch)
    for request in batch:
        child = env.begin(write=True, parent=txn, buffers=False)
        try:
            result = request.body(child)
        except _NOT_A_REQUEST_S:
            child.abort()
            raise
        except BaseException as exc:  # noqa: BLE001 - the request's own failure (a pause too)
            child.abort()
            request.fail(exc)
        else:
            child.commit()
            request.succeed(result)
    if all(request.exc is not None for request in batch):
        raise _Rollback


def _get(txn: lmdb.Transaction[bytes], dbs: dict[str, Any], lay: Layout, hot: Layer | None,
         table: str, key: bytes) -> bytes | None:
    """The value at a derived table's ``key``: from the hot cache when it knows it."""
    if hot is not None and table in CACHED:
        found = hot.values.get((table, key), MISS)  # ``Layer.get``, inlined
        if found is not MISS:
            return found  # type: ignore[return-value]
    rule, home = lay.routes.get(table) or lay.route(table)
    raw = txn.get(key if rule is None else rule(key), db=dbs[home])
    if hot is not None and table in CACHED:
        hot.seen(table, key, raw)
    return raw


class TxnTables:
    """``index.Tables`` over an LMDB write transaction (commit, delete, rebuild);
    ``hot``: a commit's layer of the hot cache, written through."""

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, Any],
                 hot: Layer | None = None, *, clock: Callable[[], float] | None = None) -> None:
        self.txn, self.dbs, self.lay, self.hot = txn, dbs, layout_of(dbs), hot
        if clock is not None:
            self.clock = clock

    def get(self, table: str, key: bytes) -> bytes | None:
        return _get(self.txn, self.dbs, self.lay, self.hot, table, key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        rule, home = self.lay.routes.get(table) or self.lay.route(table)
        self.txn.put(key if rule is None else rule(key), value, db=self.dbs[home])
        if self.hot is not None:
            self.hot.wrote = True
            if table in CACHED:
                self.hot.seen(table, key, value)

    def delete(self, table: str, key: bytes) -> None:
        rule, home = self.lay.routes.get(table) or self.lay.route(table)
        self.txn.delete(key if rule is None else rule(key), db=self.dbs[home])
        if self.hot is not None and table in CACHED:
            self.hot.seen(table, key, None)

    def append_log(self, seq: int, raw: bytes) -> None:
        """Put the log record ``seq`` (above every seq in the log: LMDB's append path)."""
        if self.hot is not None:
            self.hot.wrote = True
        rule, home = self.lay.routes[LOG]
        key = seq_key(seq)
        self.txn.put(key if rule is None else rule(key), raw, db=self.dbs[home], append=True)

    def delete_log(self, seq: int) -> None:
        self.txn.delete(self.lay.physical(LOG, seq_key(seq)), db=self.dbs[self.lay.home_db(LOG)])

    def record(self, seq: int) -> Record:
        raw = self.txn.get(self.lay.physical(LOG, seq_key(seq)),
                           db=self.dbs[self.lay.home_db(LOG)])
        if raw is None:
            raise KeyError(f"no log record at seq {seq}")
        return decode(raw, key=seq)


def _clear_derived(txn: lmdb.Transaction[bytes], dbs: dict[str, Any], lay: Layout) -> None:
    """Empty every derived table (a rebuild follows): a database of its own is emptied
    whole; in a shared one, only the derived tables' keys go (never the log's)."""
    for name in dict.fromkeys(lay.home_db(t) for t in DERIVED):
        if LOG not in lay.shares or name != lay.home_db(LOG):
            txn.drop(dbs[name], delete=False)
            continue
        cur = txn.cursor(db=dbs[name])
        mine = [t for t in DERIVED if lay.home_db(t) == name]
        doomed = [key for key in cur.iternext(values=False)
                  if any(lay.logical(t, key) is not None for t in mine)]
        for key in doomed:
            txn.delete(key, db=dbs[name])


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key that starts with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _scan(txn: lmdb.Transaction[bytes], db: Any, prefix: bytes, *,
          reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of every key starting with ``prefix``, in key order or reversed."""
    cur = txn.cursor(db=db)
    if not reverse:
        if not cur.set_range(prefix):
            return
        for key, value in cur:
            if not key.startswith(prefix):
                return
            yield key, value
        return
    end = _prefix_end(prefix)
    found = cur.set_range(end) if end is not None else False
    if not (cur.prev() if found else cur.last()):
        return
    for key, value in cur.iterprev():
        if not key.startswith(prefix):
            return
        yield key, value


class LMDBReader(TableReads):
    """``store.Reader`` over one LMDB transaction (read or write); the typed readings
    come from ``TableReads`` over ``get``/``scan``."""

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, Any],
                 hot: Layer | None = None, *, clock: Callable[[], float] | None = None) -> None:
        self.txn, self.dbs, self.lay, self.hot = txn, dbs, layout_of(dbs), hot
        if clock is not None:
            self.clock = clock
        rule, home = self.lay.routes[LOG]
        self._log_db = dbs[home]
        self._log_prefix = b"" if rule is None else rule(b"")

    def raw(self, seq: int) -> bytes | None:
        return self.txn.get(self._log_prefix + seq_key(seq), db=self._log_db)

    def run_entries(self, run_id: str, start: int = 0) -> Iterator[tuple[int, str]]:
        """As ``TableReads.run_entries``, but seeking straight to ``start`` (resume and
        the commit fence read a long run's newest entries)."""
        prefix = self.lay.physical(RUNLOG, runlog_key(run_id, 0))[:-8]  # run ␀, as stored
        cur = self.txn.cursor(db=self.dbs[self.lay.home_db(RUNLOG)])
        if not cur.set_range(prefix + seq_key(max(start, 0))):
            return
        for key, raw in cur:
            if not key.startswith(prefix) or past_entries(key, len(prefix)):
                return  # past the run's log entries (its head and latest state follow them)
            yield seq_of(key), runlog_type(raw, key)

    def log(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        cur = self.txn.cursor(db=self._log_db)
        if not cur.set_range(self._log_prefix + seq_key(max(start, 0))):
            return
        for key, raw in cur:
            if not key.startswith(self._log_prefix):
                return
            yield seq_of(key), raw

    def last_seq(self) -> int:
        if self.hot is not None and (known := self.hot.last_seq) is not None:
            return known
        cur = self.txn.cursor(db=self._log_db)
        key = cur.key() if cur.last() else b""
        last = seq_of(key) if key.startswith(self._log_prefix) and key else -1
        gone = self.txn.get(_HIGH_WATER, db=self.dbs[META])  # set when `delete` took the last
        last = last if gone is None else max(last, seq_of(gone))
        if self.hot is not None:
            self.hot.last_seq = last
        return last

    def owned_head(self, run_id: str) -> RunHead | None:
        """``head``, the caller's own to change (a commit folds onto it, then keeps it)."""
        key = run_id.encode()
        raw = self.get(RUNS, key)
        return None if raw is None else take_head(raw, key)

    def get(self, table: str, key: bytes) -> bytes | None:
        """The value at ``key`` in a derived table (``index.DERIVED``), or None."""
        return _get(self.txn, self.dbs, self.lay, self.hot, table, key)

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of a derived table's keys starting with ``prefix``, in order."""
        lay, db = self.lay, self.dbs[self.lay.home_db(table)]
        if table == RUNS and lay.runs_shared:  # one head among each run's many keys
            heads = _heads(self.txn, db, lay, lay.scan_prefix(RUNS, prefix))
            return reversed(list(heads)) if reverse else heads
        found = _scan(self.txn, db, lay.scan_prefix(table, prefix), reverse=reverse)
        if not lay.filtered(table):
            return found
        return ((k, v) for key, v in found if (k := lay.logical(table, key)) is not None)


def _heads(txn: lmdb.Transaction[bytes], db: Any, lay: Layout,
           prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The run heads of runs whose id starts with ``prefix``, in run id order: a seek
    to each run's head, then past the run's other keys (its log entries and state)."""
    cur = txn.cursor(db=db)
    found = cur.set_range(prefix)
    while found:
        key = cur.key()
        if not key.startswith(prefix) or key[:1] == b"\xff":
            return  # past the prefix, or at the segments and the log
        if b"\x00" not in key:  # a named database's record
            found = cur.set_range(key + b"\x00")
            continue
        head = head_at(key)
        raw = txn.get(head, db=db)
        if raw is not None:
            yield lay.logical(RUNS, head) or b"", raw
        found = cur.set_range(run_end(key))


def _is_home(path: Path) -> bool:
    return (path / "store" / "data.mdb").is_file()


def _ours(p: Path) -> bool:
    """What creating a home makes first (a crash while creating it, or another thread
    or process creating it right now, can leave these), and a ``bide.toml`` an operator
    wrote before the first start (``home_config``)."""
    if p.name in ("inbox", "requests", "bide.toml"):
        return True
    return p.name == "store" and p.is_dir() and all(
        c.name in ("lock.mdb", "data.mdb", "grow.lock", RESERVE)
        or c.name.startswith(_INTERRUPTED) for c in p.iterdir())


def _check_home(path: Path, create: bool) -> None:
    if path.exists() and not path.is_dir():
        raise NotAHome(path, "it is a file, not a directory")
    if _is_home(path):
        return
    if not create:
        raise NotAHome(path, "no store/data.mdb in it (run `bide demo` or open it from Python "
                       "to create a home)")
    if path.exists() and not all(_ours(p) for p in path.iterdir()) and not _is_home(path):
        raise NotAHome(path, "the directory exists, is not empty and has no store/ in it; "
                       "bide will not write into a directory it did not create")


class LMDBStore(Observed):
    """A home's ``store/`` directory as an LMDB environment."""


    def __init__(
        self,
        home: str | os.PathLike[str],
        *,
        durability: str = "durable",
        create: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        max_size: int = DEFAULT_MAX_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
        self.home = Path(home)
        _check_home(self.home, create)
        self.path = self.home / "store"
        private_dir(private_dir(self.home) / "store")  # owner-only whatever the umask
        self.durability, self.max_size, self.clock = durability, max_size, clock
        self._pid = os.getpid()
        self._broken: str | None = None
        handle = _acquire_env(self.path, durability, map_size)
        self.env, self.dbs, self._write_lock = handle.env, handle.dbs, handle.write_lock
        self.hot, self._durable = handle.hot, handle.durable
        self._commits = GroupCommit(self._run_batch, str(self.path))
        self.batches = 0  # write transactions committed by this object (each one or more callers)
        self.readonly = handle.readonly
        self._closed = False
        try:
            self._check_format()
            if self.readonly is None:
                self.env.reader_check()
            if self.readonly is None and create:  # a reading open (the CLI's) writes no file
                self._keep_reserve()
        except BaseException:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------
    def _adopt_map_size(self) -> None:
        """Another process grew the map; adopt its size (cancels this process's txns)."""
        with _gate.exclusive():
            self.env.set_mapsize(0)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release_env(self.path)

    def change_feed(self, run_id: str) -> ChangeFeed:
        """Wake-ups for a follower: ``data.mdb`` written by any process (inotify), once the
        commit is published (its transaction id, what a new read transaction starts at)."""
        return file_feed(self.path / "data.mdb", self.on_commit, version=self._published)

    def _published(self) -> int:
        """The transaction a new reader starts at (``lock.mdb``'s, not the newest meta
        page's, which ``env.info()`` reports and which is written before it)."""
        with self.reader() as r:
            return int(r.txn.id())

    def _check_format(self) -> None:
        def check(txn: lmdb.Transaction[bytes]) -> None:
            raw = txn.get(b"format", db=self.dbs[META])
            if raw is None:
                txn.put(b"format", str(STORE_FORMAT).encode(), db=self.dbs[META])
                txn.put(b"created", repr(time.time()).encode(), db=self.dbs[META])
            elif int(raw) > STORE_FORMAT:
                raise NewerStore(self.path, int(raw), STORE_FORMAT)
            elif int(raw) < STORE_FORMAT:
                if int(raw) < 2:
                    self._add_index_checksums(txn)
                if int(raw) < 3:
                    self._add_attention(txn)
                if int(raw) < 4:
                    self._build_latest_state(txn)
                if LOG in self.dbs:
                    self._move_to_tree(txn)
                txn.put(b"format", str(STORE_FORMAT).encode(), db=self.dbs[META])

        with self.reader() as r:  # the common case needs no write lock and no fsync
            raw = r.txn.get(b"format", db=self.dbs[META])
        if raw is not None and int(raw) == STORE_FORMAT:
            return
        if raw is None and self.readonly is not None:
            raise NotAHome(self.home, f"its store was never initialized and {self.readonly}")
        self._write(check)
        moved = {name: self.dbs.pop(name) for name in LEGACY_ONLY if name in self.dbs}
        if moved:  # emptied by the move: now gone (a crash here: _open_dbs drops them)
            def drop(txn: lmdb.Transaction[bytes]) -> None:
                for db in moved.values():
                    txn.drop(db, delete=True)

            self._write(drop)

    def _move_to_tree(self, txn: lmdb.Transaction[bytes]) -> None:
        """Format 4 -> 5, in the opening transaction: move the log, run log, run heads
        and latest state into the main database (``lmdb_layout.TREE``), emptying their
        named databases (``_check_format`` deletes them once this has committed)."""
        main = self.dbs[MAIN]
        for name in LEGACY_ONLY:  # the log first: its keys are the main database's highest
            tables = (RUNLOG, STATE, SEGMENTS) if name == RUNLOG else (name,)
            for key, raw in txn.cursor(db=self.dbs[name]):
                table, logical = next((t, k) for t in tables
                                      if (k := LEGACY.logical(t, key)) is not None)
                txn.put(TREE.physical(table, logical), raw, db=main, append=name == LOG)
            txn.drop(self.dbs[name], delete=False)

    def _add_index_checksums(self, txn: lmdb.Transaction[bytes]) -> None:
        """Format 1 -> 2, in the opening transaction: frame every index value."""
        reader, tables = LMDBReader(txn, self.dbs), TxnTables(txn, self.dbs)
        for table in (*FRAMED, LEASES):
            if table in (STATE, SEGMENTS):
                continue  # newer than format 2: nothing to frame
            framed = [(key, new) for key, raw in reader.scan(table)
                      if (new := with_checksum(table, key, raw)) is not None]
            for key, new in framed:
                tables.put(table, key, new)

    def _add_attention(self, txn: lmdb.Transaction[bytes]) -> None:
        """Format 2 -> 3, in the opening transaction: list the runs not finished."""
        txn.drop(self.dbs[ATTENTION], delete=False)
        attention.build(TxnTables(txn, self.dbs), list(LMDBReader(txn, self.dbs).scan(RUNS)),
                        FINISHED,
                        lambda key, raw: unpack_value(raw, RunHead, table=RUNS, key=key))

    def _build_latest_state(self, txn: lmdb.Transaction[bytes]) -> None:
        """Format 3 -> 4, in the opening transaction: fold each run's checkpoints from
        its newest full one into the latest-state index (what a rebuild would write)."""
        reader, tables = LMDBReader(txn, self.dbs), TxnTables(txn, self.dbs)
        for head in list(reader.heads()):
            if head.base < 0:
                continue
            for seq, rtype in list(reader.run_entries(head.run_id, head.base)):
                if rtype == "checkpoint" and seq <= head.checkpoint:
                    cp = reader.record(seq)
                    assert isinstance(cp, Checkpoint)
                    latest.fold(tables, seq, cp, call_results(tables))

    # -- reading -----------------------------------------------------------
    @contextmanager
    def reader(self) -> Iterator[LMDBReader]:
        self._guard(write=False)
        while True:
            with _gate.shared():
                try:
                    txn = self.env.begin(buffers=False)
                except lmdb.MapResizedError:
                    txn = None
                if txn is not None:
                    try:
                        yield LMDBReader(txn, self.dbs, clock=self.clock)
                    finally:
                        txn.abort()
                    return
            self._adopt_map_size()

    # -- writing -----------------------------------------------------------
    def commit(
        self,
        records: Sequence[Record] | Callable[[LMDBReader], Sequence[Record | Later]],
        *,
        check: Check | None = None,
        fence: tuple[str, int] | None = None,
    ) -> list[int]:
        framed = None if callable(records) else [encode(r) for r in records]  # fail before any I/O
        stamp = callable(records) or grants(records)  # a lease's expiry is written in the txn

        def body(txn: lmdb.Transaction[bytes], hot: Layer | None) -> list[int]:
            reader = LMDBReader(txn, self.dbs, hot, clock=self.clock)
            head = self._check_fence(reader, *fence) if fence is not None else None
            if check is not None:
                check(reader)
            seq = reader.last_seq()
            batch: Sequence[Record]
            raws: list[bytes]
            if callable(records):
                given = records(reader)
                batch = numbered(given, range(seq + 1, seq + 1 + len(given)))
                raws = []
            else:  # records, none of them a Later (each was encoded)
                batch, raws = records, framed  # type: ignore[assignment]
            if stamp and (stamped := stamp_grants(batch, reader.now())) is not None:
                batch, raws = stamped, [encode(r) for r in stamped]
            elif callable(records):
                raws = [encode(r) for r in batch]
            seqs = []
            tables = TxnTables(txn, self.dbs, hot)
            for record, raw in zip(batch, raws, strict=True):
                seq += 1
                tables.append_log(seq, raw)
                if head is not None and record.run_id == head.run_id:  # type: ignore[attr-defined]
                    head = apply(tables, seq, len(raw), record, head)  # the fence's read
                else:
                    apply(tables, seq, len(raw), record)
                seqs.append(seq)
            if hot is not None:
                hot.last_seq = seq
                if head is not None and head.waiting is None:  # the next fence takes it
                    key = head.run_id.encode()
                    packed = hot.values.get((RUNS, key))
                    if packed is not None:
                        keep_head(key, packed, head)
            return seqs

        return self._observed_commit(lambda: self._write_staged(body), fence)

    def delete(self, select: Callable[[LMDBReader], Iterable[int]]) -> list[int]:
        """Remove log records (retention) and fix the indexes, in ONE write transaction.

        This is the one way records leave the log. Each run that loses records
        has its derived entries cleared (``index.keys_of``) and its remaining
        records replayed through ``apply``, so the tables equal a rebuild; a run
        left with no records disappears. Seqs are never given again: deleting
        the last record keeps its seq as a high-water mark.

        Args:
            select: a function of the transaction's reader returning the seqs to
                remove; seqs with no record are ignored.

        Returns:
            The seqs removed, in order.

        Raises:
            CorruptRecord: a record of an affected run cannot be decoded (nothing changes).
        """
        def body(txn: lmdb.Transaction[bytes]) -> list[int]:
            reader, tables = LMDBReader(txn, self.dbs), TxnTables(txn, self.dbs)
            last = reader.last_seq()
            doomed = refold_without(reader, tables, select(reader))
            for seq in doomed:
                tables.delete_log(seq)
            if last in doomed:
                txn.put(_HIGH_WATER, seq_key(last), db=self.dbs[META])
            return sorted(doomed)

        removed = self._write(body)
        self._notify(WriteEvent("delete", tuple(removed)))
        return removed

    def _check_fence(self, reader: LMDBReader, run_id: str, token: int) -> RunHead | None:
        return check_fence(reader, run_id, token, reader.now(), reader.owned_head)

    def renew_leases(self, leases: Sequence[tuple[str, int, float]]) -> list[bool]:
        def body(txn: lmdb.Transaction[bytes], hot: Layer | None) -> list[bool]:
            reader = LMDBReader(txn, self.dbs, hot, clock=self.clock)
            tables, now = TxnTables(txn, self.dbs, hot), reader.now()
            return [renew_if_held(reader, tables, run_id, token, now + ttl)
                    for run_id, token, ttl in leases]

        renewed = self._write_staged(body) if leases else []
        self._notify_renewals(leases, renewed)
        return renewed

    def _guard(self, write: bool) -> None:
        if self._closed:
            raise StoreError(f"the store at {self.path} is closed", path=self.path)
        if os.getpid() != self._pid:
            raise StoreError("this store was opened before fork(); open it again in the child",
                             path=self.path)
        if write and self.readonly is not None:
            raise ReadOnlyHome(self.home, self.readonly)
        if write and self._broken:
            raise DurabilityLost(self._broken, path=self.path)

    def _write(self, body: Callable[[lmdb.Transaction[bytes]], T]) -> T:
        """Run ``body`` in a write transaction, batched with other threads' (group commit).

        A thread that holds a read snapshot of this process commits alone: growing
        the map inside a batch waits for every snapshot to end, so it must not be
        left waiting on a batch.
        """
        return self._submit(_Body(self, body, None))

    def _write_staged(self, body: Callable[[lmdb.Transaction[bytes], Layer | None], T]) -> T:
        """``_write`` for a body whose reads and writes of ``hot_cache.CACHED`` tables all go
        through the layer it is given (None: the cache cannot serve this transaction)."""
        return self._submit(_Body(self, None, body))

    def _submit(self, body: _Body[T]) -> T:
        self._guard(write=True)
        if _gate.holding():
            return run_alone(self._run_batch, body)
        return self._commits.submit(body)

    def _run_batch(self, batch: Batch) -> Finish:
        """Commit ``batch`` in ONE write transaction, growing the map when it fills;
        return the wait that makes it durable (``durable_point.py``), if it needs one.

        With more than one request, each runs in its own nested transaction: one
        that raises (a stale fence, a failing check) is rolled back alone and gets
        its own exception; the others commit together.

        A batch stopped before its transaction committed (the map could not grow, an
        interrupt) fails the requests that had already succeeded in it: their nested
        transactions went with the parent's, so none of their records was stored.
        """
        committed, written = False, 0
        try:
            while True:
                try:
                    with _gate.shared(), self._write_lock:
                        with self.env.begin(write=True, buffers=False) as txn:
                            if len(batch) == 1:
                                _run_one(txn, batch[0])
                            else:
                                _run_nested(self.env, txn, batch)
                        committed = True
                        self.batches += 1
                        written = int(self.env.info()["last_txnid"]) if self._durable else 0
                    break
                except _Rollback:
                    break  # every request failed on its own: nothing to commit
                except lmdb.MapFullError:
                    self._grow(self.env.info()["map_size"])
                except lmdb.MapResizedError:
                    self._adopt_map_size()
                except lmdb.Error as exc:  # the commit itself failed: every request learns why
                    for request in batch:
                        if request.exc is None:
                            request.fail(self._translated(exc))
                    break
        except BaseException as exc:
            if not committed:
                for request in batch:
                    if request.settled and request.exc is None:
                        request.fail(self._not_committed(exc))
            raise
        for request in batch:  # lmdb.Error never escapes the store
            if isinstance(request.exc, lmdb.Error):
                request.fail(self._translated(request.exc))
        if not committed or self._durable is None:
            return None
        point = self._durable

        def finish() -> None:
            try:
                with _gate.shared():  # a map resize waits for the flush
                    point.wait(written)
            except (lmdb.Error, OSError) as exc:
                for request in batch:
                    if request.exc is None:
                        request.fail(self._flush_failed(exc))
        return finish

    def _flush_failed(self, exc: BaseException) -> StoreError:
        """A flush that ends a commit failed: what is on disk is unknown (an fsync error
        may have dropped the pages it could not write), so the store stops writing."""
        self._broken = f"the store at {self.path} failed to flush a commit ({exc}); the " \
                       "engine refuses further writes; reopen it to recover"
        error = DurabilityLost(self._broken, path=self.path)
        error.__cause__ = exc
        return error

    def _not_committed(self, exc: BaseException) -> StoreError:
        """What a request that succeeded in a batch abandoned before its commit gets
        (a new object per caller)."""
        if isinstance(exc, StoreFull):
            error: StoreError = StoreFull(self.path, exc.limit, free=exc.free)
        else:
            error = StoreError(f"the batch committing to {self.path} with this request stopped "
                               f"before its transaction committed ({exc!r}); nothing of it was "
                               "stored", path=self.path)
        error.__cause__ = exc
        return error

    def _translated(self, exc: lmdb.Error) -> StoreError:
        """The bide error for an LMDB error (a new object each time: one per caller)."""
        if isinstance(exc, (lmdb.DiskError, lmdb.PanicError, lmdb.CorruptedError)):
            if (free := self._full_disk(exc)) is not None:
                error: StoreError = StoreFull(self.home, free=free)  # aborted: nothing written
            else:  # an I/O error during commit: we cannot know what is on disk; stop writing
                self._broken = f"the store at {self.path} failed to commit durably ({exc}); " \
                               "the engine refuses further writes; reopen it to recover"
                error = DurabilityLost(self._broken, path=self.path)
        elif (free := self._full_disk(exc)) is not None:
            error = StoreFull(self.home, free=free)
        else:
            error = StoreError(f"store error at {self.path}: {exc}", path=self.path)
        error.__cause__ = exc
        return error

    def _full_disk(self, exc: lmdb.Error) -> int | None:
        """The free bytes of the filesystem if ``exc`` means it is full, else None.

        LMDB reports ENOSPC, or EIO for a short write. A commit that fails writing
        its pages aborts before the meta page, so the store stays as it was.
        """
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize
        text = str(exc)
        if any(os.strerror(e) in text for e in (errno.ENOSPC, errno.EDQUOT)):
            return free
        return free if os.strerror(errno.EIO) in text and free < _LOW_SPACE else None

    def _keep_reserve(self) -> None:
        """Allocate the reserve file, so that a full disk leaves room to release a run."""
        try:
            fd = os.open(self.path / RESERVE, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            return  # no room or no right to keep one: a full disk then may keep the run leased
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except OSError:
            pass  # the disk is already full: the reserve stays as big as it could be made
        finally:
            os.close(fd)

    def spend_reserve(self) -> bool:
        """Delete the reserve file to give a last small commit room; False if none was kept.

        The next open of the store allocates it again.
        """
        try:
            os.unlink(self.path / RESERVE)
        except FileNotFoundError:
            return False
        return True

    def _grow(self, full_at: int) -> None:
        """Double the map, serialized across processes by a lock file."""
        with open(self.path / "grow.lock", "a+b", opener=open_private) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._adopt_map_size()  # adopt what another process may have done already
                size = self.env.info()["map_size"]
                if size > full_at:
                    return  # another process grew it meanwhile; retry at the new size
                faults.point("during_map_growth")
                # adopting reads the size of the last commit: a growth no commit has used
                # yet is forgotten, so double what was full (a transaction needing 4x grows)
                size = max(size, full_at)
                new = min(size * 2, self.max_size)
                if new <= size:
                    raise StoreFull(self.path, self.max_size)
                with _gate.exclusive():
                    self.env.set_mapsize(new)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # -- maintenance -------------------------------------------------------
    def info(self) -> dict[str, Any]:
        info, stat = self.env.info(), self.env.stat()
        return {
            "map_size": info["map_size"],
            "used_bytes": (info["last_pgno"] + 1) * stat["psize"],
            "page_size": stat["psize"],
            "file_bytes": (self.path / "data.mdb").stat().st_size,
            "readers": info["num_readers"],
            "durability": self.durability,
        }

    def reader_check(self) -> int:
        """Clear reader slots left by dead processes (they pin old pages)."""
        return 0 if self.readonly is not None else self.env.reader_check()

    def rebuild_indexes(self, load: Callable[[LMDBReader], Iterable[Logged]]) -> int:
        """Empty the derived tables and replay ``load(reader)``, in ONE write transaction."""
        def body(txn: lmdb.Transaction[bytes]) -> int:
            records = list(load(LMDBReader(txn, self.dbs)))
            tables = TxnTables(txn, self.dbs)
            _clear_derived(txn, self.dbs, tables.lay)
            for seq, size, record in records:
                apply(tables, seq, size, record)
            return len(records)

        return self._write(body)

    def restore(self, rows: Sequence[Row], *, marker: str | None, last_seq: int = -1) -> None:
        """Put framed records back at their own seqs (``bide copy``), in ONE transaction.

        The rows are folded by ``index.apply`` (``restore.restore_rows``); ``marker`` is
        set as the copy marker (None clears it); seqs up to ``last_seq`` are never given.
        """
        def body(txn: lmdb.Transaction[bytes]) -> None:
            reader = LMDBReader(txn, self.dbs)
            last = reader.last_seq()

            tables = TxnTables(txn, self.dbs)

            def put_log(batch: Sequence[Row]) -> None:
                for seq, raw in batch:
                    tables.append_log(seq, raw)

            restore_rows(tables, last, rows, put_log)
            if last_seq > max([last, *(seq for seq, _ in rows)]):
                txn.put(_HIGH_WATER, seq_key(last_seq), db=self.dbs[META])
            if marker is None:
                txn.delete(COPY_MARKER.encode(), db=self.dbs[META])
            else:
                txn.put(COPY_MARKER.encode(), marker.encode(), db=self.dbs[META])

        self._write(body)
        self._notify(WriteEvent("restore", tuple(seq for seq, _ in rows)))

    def copy_marker(self) -> str | None:
        """The copy marker ``restore`` left (an interrupted ``bide copy``), or None."""
        with self.reader() as r:
            raw = r.txn.get(COPY_MARKER.encode(), db=self.dbs[META])
        return None if raw is None else raw.decode()


def log_records(env: lmdb.Environment, txn: lmdb.Transaction[bytes]) -> int:
    """How many records the log of the store open as ``env`` holds (``compact`` checks
    its copy against it)."""
    dbs = existing_dbs(env, txn, write=False)
    if LOG in dbs:
        return int(txn.stat(dbs[LOG])["entries"])
    return sum(1 for _ in LMDBReader(txn, dbs).log())


@contextmanager
def read_copy(path: Path) -> Iterator[LMDBReader]:
    """A reader over an LMDB store directory this process has not opened (a fresh copy).

    ``compact`` checks its copy through this before swapping it in.
    """
    size = max((path / "data.mdb").stat().st_size, DEFAULT_MAP_SIZE)
    env = lmdb.open(str(path), map_size=size, max_dbs=MAX_DBS, mode=PRIVATE_FILE)
    try:
        with env.begin() as txn:
            yield LMDBReader(txn, existing_dbs(env, txn, write=False))
    finally:
        env.close()
