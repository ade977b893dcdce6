"""An in-memory ``Store``: the second backend behind the seam.

It keeps a home's log and derived tables in this process's memory, under a
name (``memory:<anything>``); opening the same name again in the process sees
the same records, as reopening an LMDB home does. Nothing survives the
process. It exists so the ``Store`` contract is proven by two implementations
(``tests/test_store_contract.py`` runs against both) and for fast tests; it is
the shape a server database backend (PostgreSQL) follows: a reader over a
snapshot, one transaction per ``commit``/``delete``, folds from ``index.apply``.

Transactions are copy-on-write: a writer copies each table it touches and
publishes the new set of tables when its body returns, so a reader holds an
unchanging snapshot and a failing body leaves nothing behind.
"""

from __future__ import annotations

import threading
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from ...formats import Record, encode
from ..base.errors import NotAHome, StoreError
from .change_feed import ChangeFeed, ObservedFeed
from .index import (
    DERIVED,
    apply,
    refold_without,
    seq_key,
    seq_of,
)
from .leases import check_fence, renew_if_held, stamp_grants
from .restore import COPY_MARKER, Row, restore_rows
from .store import (
    LEASES,
    LOG,
    Check,
    Later,
    Logged,
    Observed,
    WriteEvent,
    numbered,
    observe,
)
from .table_reads import TableReads

SCHEME = "memory:"
_TABLES = (LOG, LEASES, *DERIVED)
_LAST = "last_seq"  # not a table: the highest seq ever given (seqs are never reused)
T = TypeVar("T")

# table name -> {key: value}, plus _LAST -> int; never mutated once published
Snapshot = dict[str, Any]


class _Space:
    """One named store's published snapshot and its writer lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.tables: Snapshot = {**{t: {} for t in _TABLES}, _LAST: -1}


_spaces: dict[str, _Space] = {}
_spaces_lock = threading.Lock()


class MemoryReader(TableReads):
    """``store.Reader`` over one snapshot (or a writer's view of its own changes)."""

    def __init__(self, tables: Snapshot, *, clock: Callable[[], float] | None = None) -> None:
        self._tables = tables
        if clock is not None:
            self.clock = clock

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables[table].get(key)

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        data = self._tables[table]
        keys = sorted(data)
        found = []
        for key in keys[bisect_left(keys, prefix):]:  # keys with a prefix are contiguous
            if not key.startswith(prefix):
                break
            found.append(key)
        for key in reversed(found) if reverse else found:
            yield key, data[key]

    def raw(self, seq: int) -> bytes | None:
        return self.get(LOG, seq_key(seq))

    def log(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        first = seq_key(max(start, 0))
        for key, raw in self.scan(LOG):
            if key >= first:
                yield seq_of(key), raw

    def last_seq(self) -> int:
        return int(self._tables[_LAST])

    def marker(self) -> str | None:
        return self._tables.get(COPY_MARKER)


class _Txn(MemoryReader):
    """A writer's view: reads see its own writes; tables are copied on first write."""

    def __init__(self, base: Snapshot, *, clock: Callable[[], float] | None = None) -> None:
        super().__init__(dict(base), clock=clock)
        self._copied: set[str] = set()

    def _table(self, table: str) -> dict[bytes, bytes]:
        if table not in self._copied:
            self._tables[table] = dict(self._tables[table])
            self._copied.add(table)
        return self._tables[table]

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._table(table)[key] = value

    def delete(self, table: str, key: bytes) -> None:
        self._table(table).pop(key, None)

    def clear(self, table: str) -> None:
        self._tables[table] = {}
        self._copied.add(table)

    def set_last(self, seq: int) -> None:
        self._tables[_LAST] = max(seq, self._tables[_LAST])

    def mark(self, marker: str | None) -> None:
        self._tables[COPY_MARKER] = marker

    def snapshot(self) -> Snapshot:
        return self._tables


class MemoryStore(Observed):
    """A ``Store`` in this process's memory (see the module docstring)."""

    readonly: str | None = None

    def __init__(self, name: str | None = None, *, durability: str = "durable",
                 create: bool = True, clock: Callable[[], float] = time.time) -> None:
        self.home = self.path = name or f"{SCHEME}{uuid.uuid4().hex}"
        self.durability, self.clock = durability, clock
        with _spaces_lock:
            space = _spaces.get(self.home)
            if space is None:
                if not create:
                    raise NotAHome(self.home, "no such in-memory store in this process")
                space = _spaces[self.home] = _Space()
        self._space = space
        self._closed = False

    def close(self) -> None:
        self._closed = True

    def change_feed(self, run_id: str) -> ChangeFeed:
        """Wake-ups for a follower: every commit in this process (where the store lives;
        another store object may hold the same space)."""
        return ObservedFeed(observe)

    def _guard(self) -> None:
        if self._closed:
            raise StoreError(f"the store at {self.path} is closed")

    @contextmanager
    def reader(self) -> Iterator[MemoryReader]:
        self._guard()
        yield MemoryReader(self._space.tables, clock=self.clock)

    def _write(self, body: Callable[[_Txn], T]) -> T:
        self._guard()
        with self._space.lock:
            txn = _Txn(self._space.tables, clock=self.clock)
            result = body(txn)
            self._space.tables = txn.snapshot()  # publish: readers from now on see it
            return result

    def commit(self, records: Sequence[Record] | Callable[[MemoryReader],
                                                          Sequence[Record | Later]],
               *, check: Check | None = None,
               fence: tuple[str, int] | None = None) -> list[int]:
        framed = None if callable(records) else [encode(r) for r in records]

        def body(txn: _Txn) -> list[int]:
            if fence is not None:
                self._check_fence(txn, *fence)
            if check is not None:
                check(txn)
            seqs, seq = [], txn.last_seq()
            given = records(txn) if callable(records) else records
            batch = numbered(given, range(seq + 1, seq + 1 + len(given)))
            raws = framed if framed is not None else [encode(r) for r in batch]
            if (stamped := stamp_grants(batch, txn.now())) is not None:
                batch, raws = stamped, [encode(r) for r in stamped]
            for record, raw in zip(batch, raws, strict=True):
                seq += 1
                txn.put(LOG, seq_key(seq), raw)
                apply(txn, seq, len(raw), record)
                seqs.append(seq)
            txn.set_last(seq)
            return seqs

        return self._observed_commit(lambda: self._write(body), fence)

    def _check_fence(self, reader: MemoryReader, run_id: str, token: int) -> None:
        check_fence(reader, run_id, token, reader.now())

    def delete(self, select: Callable[[MemoryReader], Iterable[int]]) -> list[int]:
        """Remove log records and refold their runs, as ``LMDBStore.delete`` does."""
        def body(txn: _Txn) -> list[int]:
            doomed = refold_without(txn, txn, select(txn))
            for seq in doomed:
                txn.delete(LOG, seq_key(seq))
            return sorted(doomed)

        removed = self._write(body)
        self._notify(WriteEvent("delete", tuple(removed)))
        return removed

    def renew_leases(self, leases: Sequence[tuple[str, int, float]]) -> list[bool]:
        def body(txn: _Txn) -> list[bool]:
            now = txn.now()
            return [renew_if_held(txn, txn, run_id, token, now + ttl)
                    for run_id, token, ttl in leases]

        renewed = self._write(body) if leases else []
        self._notify_renewals(leases, renewed)
        return renewed

    def rebuild_indexes(self, load: Callable[[MemoryReader], Iterable[Logged]]) -> int:
        def body(txn: _Txn) -> int:
            records = list(load(txn))
            for name in DERIVED:
                txn.clear(name)
            for seq, size, record in records:
                apply(txn, seq, size, record)
            return len(records)

        return self._write(body)

    def restore(self, rows: Sequence[Row], *, marker: str | None, last_seq: int = -1) -> None:
        """Put framed records back at their own seqs (``bide copy``), as ``LMDBStore.restore``."""
        def body(txn: _Txn) -> None:
            def put_log(batch: Sequence[Row]) -> None:
                for seq, raw in batch:
                    txn.put(LOG, seq_key(seq), raw)

            restore_rows(txn, txn.last_seq(), rows, put_log)
            txn.set_last(max([last_seq, *(seq for seq, _ in rows)]))
            txn.mark(marker)

        self._write(body)
        self._notify(WriteEvent("restore", tuple(seq for seq, _ in rows)))

    def copy_marker(self) -> str | None:
        """The copy marker ``restore`` left (an interrupted ``bide copy``), or None."""
        with self.reader() as r:
            return r.marker()

    def spend_reserve(self) -> bool:
        return False  # memory keeps no reserve file

    def info(self) -> dict[str, Any]:
        tables = self._space.tables
        used = sum(len(k) + len(v) for t in _TABLES for k, v in tables[t].items())
        return {"map_size": max(used, 1), "used_bytes": used, "page_size": 0,
                "file_bytes": 0, "readers": 0, "durability": self.durability}

    def reader_check(self) -> int:
        return 0  # no reader slots to leak


def forget_all(prefix: str) -> None:
    """Drop every in-memory store named ``memory:<prefix>...`` (frees a test's records)."""
    with _spaces_lock:
        for name in [n for n in _spaces if n.startswith(SCHEME + prefix)]:
            del _spaces[name]
