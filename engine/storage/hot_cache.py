"""Process-local copies of a store's hot derived values: exact, or not there at all.

A durable commit reads the same few values every superstep (the run's head, its
lease renewal, the latest-state directory and list tail, the log's last seq),
and py-lmdb releases the GIL around every ``get``: under concurrency each read
lets another thread in. This cache answers those reads from memory.

It holds only what write transactions of this process read or wrote through it,
and only while that provably equals the store:

- it is kept per environment (``lmdb_store._Handle``), shared by every
  ``LMDBStore`` of the process on that path, and used only inside write
  transactions (one at a time);
- every change is logged to be undone: a request that raises (a stale fence, a
  failing check) is undone at once; a transaction is kept only once its commit is
  known: the next write transaction (``begin``) keeps it when the store counted one
  more committed batch and its id is the one right after (LMDB gives a write
  transaction the last committed id + 1, so a commit by another process, or any
  write of this process that did not come through here, shows as a gap; a commit
  that put nothing takes no id, so then the next has the same one), undoes
  it when the id is the same and nothing was committed (rolled back, or a batch
  retried after growing the map), and forgets everything otherwise;
- a transaction with any body that does not stage its writes here (retention
  ``delete``, ``doctor --rebuild``, ``restore``, the format move, a test's damage)
  is *poisoned*: the next transaction starts from an empty cache.

Every write goes to LMDB as well (write-through), so a read that misses, or a
scan, sees the same bytes. Values above ``MOST_BYTES`` are not kept.
"""

from __future__ import annotations

from typing import Protocol

from .latest import STATE
from .store import LEASES

RUNS = "runs"  # index.RUNS (the store imports this module; index imports the store's)
CACHED = frozenset({RUNS, LEASES, STATE})
MOST_ENTRIES = 4096  # past this, the first kept go first
MOST_BYTES = 2048  # a larger value is read from LMDB each time
MISS = object()  # not known here: ask LMDB
_ABSENT = object()  # in an undo log: the key was not in the cache
Key = tuple[str, bytes]


class Counted(Protocol):
    """What commits batches: its count of committed write transactions."""

    batches: int


class HotCache:
    """One environment's cache (see the module docstring)."""

    def __init__(self) -> None:
        self.values: dict[Key, bytes | None] = {}
        self.last_seq: int | None = None
        self.txn_id = -1  # the transaction that last began here (-1: none)
        self.store: Counted | None = None  # whose batch it is
        self.batches = 0  # that store's committed batches when it began
        self.undo: dict[Key, object] = {}  # the open transaction's changes, to be undone
        self.undo_seq: int | None = None
        self.poisoned = False
        self.wrote = False  # the open transaction put a value (so its commit takes a new id)

    def begin(self, txn_id: int, store: Counted) -> None:
        """A write transaction ``txn_id`` of ``store`` starts: settle the last one."""
        moved = -1 if self.store is None or self.poisoned else self.store.batches - self.batches
        # a commit that changed nothing leaves LMDB's last id as it was: the next is its own
        committed_as = self.txn_id + 1 if self.wrote else self.txn_id
        if moved == 1 and txn_id == committed_as:
            if len(self.values) > MOST_ENTRIES:  # it committed, and nobody wrote since
                for key in list(self.values)[:len(self.values) - MOST_ENTRIES]:
                    del self.values[key]
        elif moved == 0 and txn_id == self.txn_id:
            _restore(self.values, self.undo)  # rolled back, and nobody wrote since
            self.last_seq = self.undo_seq
        else:  # the first, poisoned, or another writer came between: nothing is known
            self.values.clear()
            self.last_seq = None
        self.txn_id, self.store, self.batches = txn_id, store, store.batches
        self.undo, self.undo_seq, self.poisoned, self.wrote = {}, self.last_seq, False, False

    def poison(self) -> None:
        """The open transaction writes what this cache does not see."""
        self.poisoned = True

    def layer(self, txn_id: int) -> Layer | None:
        """A request's view in transaction ``txn_id`` (None: that transaction did not
        ``begin`` here, or is poisoned; then nothing is read from or kept in the cache)."""
        if self.poisoned or txn_id != self.txn_id or self.store is None:
            return None
        return Layer(self)


def _restore(values: dict[Key, bytes | None], undo: dict[Key, object]) -> None:
    for key, old in undo.items():
        if old is _ABSENT:
            values.pop(key, None)
        else:
            values[key] = old  # type: ignore[assignment]


class Layer:
    """One request's reads and writes of cached tables, undone if it raises."""

    __slots__ = ("cache", "values", "undo", "seq_before", "wrote")

    def __init__(self, cache: HotCache) -> None:
        self.cache, self.values = cache, cache.values
        self.undo: dict[Key, object] = {}
        self.seq_before = cache.last_seq
        self.wrote = False  # put a value into any table (a delete may change nothing)

    def get(self, table: str, key: bytes) -> object:
        """The value at ``(table, key)``: bytes, None (absent), or ``MISS`` (ask LMDB,
        then tell ``seen``)."""
        return self.values.get((table, key), MISS)

    def seen(self, table: str, key: bytes, value: bytes | None) -> None:
        """What LMDB holds at ``(table, key)`` in this transaction (read or written)."""
        entry = (table, key)
        if entry not in self.undo:
            self.undo[entry] = self.values.get(entry, _ABSENT)
        if value is None or len(value) <= MOST_BYTES:
            self.values[entry] = value
        else:
            self.values.pop(entry, None)

    @property
    def last_seq(self) -> int | None:
        """The log's last seq, if known."""
        return self.cache.last_seq

    @last_seq.setter
    def last_seq(self, seq: int) -> None:
        self.cache.last_seq = seq

    def keep(self) -> None:
        """The request returned: its changes join its transaction's."""
        undo = self.cache.undo
        if not undo:  # the transaction's first request (a chain's only one): its changes
            self.cache.undo = self.undo
        else:
            for entry, old in self.undo.items():
                undo.setdefault(entry, old)
        self.cache.wrote = self.cache.wrote or self.wrote

    def drop(self) -> None:
        """The request raised: undo its changes."""
        _restore(self.values, self.undo)
        self.cache.last_seq = self.seq_before
