"""The store seam: an append-only log of framed records plus derived indexes.

``Store`` is the contract every backend implements (LMDB today; a server
database for many-machine deployments later). ``tests/test_store_contract.py``
runs one suite against each implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ...formats import Record
from ..base import faults
from ..base.errors import StaleLease
from .index import ApprovalState, IntentState, RunHead

Check = Callable[["Reader"], None]
LOG, LEASES = "log", "leases"  # the log, and lease renewals (readable like a derived table)
Logged = tuple[int, int, Record]  # (seq, framed size, record), as a replay reads the log
Later = Callable[[Sequence[int]], Record]
"""A record naming records before it in the same commit (a delta's base): built from
their seqs once the store gave them, since no caller can predict them (PostgreSQL's
come from a sequence with gaps and other hosts' commits)."""


def numbered(batch: Sequence[Record | Later], seqs: Sequence[int]) -> list[Record]:
    """``batch`` with every ``Later`` item built from the seqs given to the items before it."""
    return [item(seqs[:i]) if callable(item) else item for i, item in enumerate(batch)]


@dataclass(frozen=True)
class WriteEvent:
    """One write a store made durable, or a fenced commit it refused.

    Observers (``Store.on_commit``) see every write without patching the store:
    bench counts transactions, torture logs what must survive a crash.
    """

    kind: str  # "commit", "delete", "renew_lease" (one per lease) or "restore" (bide copy)
    seqs: tuple[int, ...] = ()
    fence: tuple[str, int] | None = None
    refused: bool = False  # a fenced commit refused (StaleLease); nothing was written


Observer = Callable[[WriteEvent], None]
_everywhere: list[Observer] = []


def observe(observer: Observer) -> Callable[[], None]:
    """Call ``observer`` after every write of every store this process opens (as
    ``Store.on_commit`` does for one store): for harnesses that do not hold the store.

    Returns:
        A function that removes the observer.
    """
    _everywhere.append(observer)
    return lambda: _everywhere.remove(observer)


def notify(observers: Iterable[Observer], event: WriteEvent) -> None:
    """Tell one store's observers, then the process-wide ones, about ``event``."""
    for observer in (*observers, *_everywhere):
        observer(event)


class Observed:
    """``Store.on_commit`` for a backend: its own observers, told before the process-wide ones."""

    _observers: tuple[Observer, ...] = ()

    def on_commit(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer`` after each durable write (see ``Store.on_commit``)."""
        self._observers = (*self._observers, observer)

        def remove() -> None:
            self._observers = tuple(o for o in self._observers if o is not observer)

        return remove

    def _notify(self, event: WriteEvent) -> None:
        notify(self._observers, event)

    def _notify_renewals(self, leases: Sequence[tuple[str, int, float]],
                         renewed: Sequence[bool]) -> None:
        """One ``renew_lease`` event per lease of a ``renew_leases`` call."""
        for (run_id, token, _), ok in zip(leases, renewed, strict=True):
            self._notify(WriteEvent("renew_lease", fence=(run_id, token), refused=not ok))

    def _observed_commit(self, write: Callable[[], list[int]],
                         fence: tuple[str, int] | None) -> list[int]:
        """Run a backend's commit between its fault points and tell the observers what
        came of it (the seqs, or a fenced commit refused), the same for every backend."""
        faults.point("before_commit")
        try:
            seqs = write()
        except StaleLease:
            self._notify(WriteEvent("commit", fence=fence, refused=True))
            raise
        if self._observers or _everywhere:  # (most commits have nobody to tell)
            self._notify(WriteEvent("commit", tuple(seqs), fence))
        faults.point("after_commit")
        return seqs


class Reader(Protocol):
    """A consistent snapshot of the store (one read transaction)."""

    def head(self, run_id: str) -> RunHead | None:
        """The run's derived head, or None if there is no such run."""

    def heads(self) -> Iterator[RunHead]:
        """Every run head, in run id order."""

    def record(self, seq: int) -> Record:
        """Decode the log record at ``seq``.

        Raises:
            KeyError: no record at ``seq``. CorruptRecord / NewerSchema: see formats.
        """

    def raw(self, seq: int) -> bytes | None:
        """The framed bytes at ``seq`` (for sizes and checksums)."""

    def run_entries(self, run_id: str, start: int = 0) -> Iterator[tuple[int, str]]:
        """``(seq, record type)`` of the run's records from ``start`` on, in log order."""

    def intent(self, run_id: str, key: str) -> IntentState | None: ...
    def intents(self, run_id: str | None = None) -> Iterator[IntentState]: ...
    def approval(self, approval_id: str) -> ApprovalState | None: ...
    def approvals(self) -> Iterator[ApprovalState]: ...
    def lease_expiry(self, run_id: str) -> tuple[int, float] | None:
        """``(token, expires_at)`` of the latest renewal, if any."""

    def now(self) -> float:
        """The store's time, in which leases are granted, renewed, fenced and taken over.

        One clock for every worker of a home: LMDB's is the machine's (the store's
        ``clock``); PostgreSQL's is the server's, read in the transaction, so a host
        whose clock is off neither takes over a live lease nor keeps a dead one.
        """

    def log(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """Every ``(seq, framed bytes)`` of the log from ``start`` on."""

    def last_seq(self) -> int:
        """The highest seq in the log, or -1 for an empty log."""

    def get(self, table: str, key: bytes) -> bytes | None:
        """The value at ``key`` in a table, or None.

        Args:
            table: a derived table (``index.DERIVED``) or ``"leases"`` (renewals).
        """

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of a table's keys starting with ``prefix``, in key order.

        Args:
            table: as for ``get``. prefix: b"" scans the whole table.
            reverse: highest key first.
        """


class ChangeFeed(Protocol):
    """Wake-ups for one reader of one store (``change_feed`` has the implementations)."""

    def wait(self, timeout: float) -> bool:
        """Block until the store may have changed, or ``timeout`` seconds passed.

        Returns:
            True if woken by a change (the reader should read again), False on timeout.
        """

    def close(self) -> None:
        """Release what the feed holds (a file descriptor, a connection, an observer)."""


class Store(Protocol):
    """Where a home's records live. Every method is safe across processes."""

    home: Any  # the home directory (a path), or the URL-like name of a non-file store
    path: Any
    durability: str
    readonly: str | None  # why this process cannot write the store, or None

    def commit(
        self,
        records: Sequence[Record] | Callable[[Reader], Sequence[Record | Later]],
        *,
        check: Check | None = None,
        fence: tuple[str, int] | None = None,
    ) -> list[int]:
        """Append ``records`` and fold them into the indexes in ONE transaction.

        Args:
            records: the records, or a function of the transaction's reader that
                returns them (when what to write depends on what is there); such a
                function may return ``Later`` items, built by ``numbered``.
            check: run inside the transaction before anything is written; raise to abort.
            fence: ``(run_id, token)``; the commit is refused unless the token still
                holds the run's lease.

        Returns:
            The log seqs given to the records, in order.

        Raises:
            StaleLease: ``fence`` lost its lease. StoreFull: size limit reached.
            DurabilityLost: the commit could not be made durable.
        """

    def delete(self, select: Callable[[Reader], Iterable[int]]) -> list[int]:
        """Remove the log records ``select(reader)`` names, unfolding them from the
        indexes (``index.unapply``), in ONE transaction. Seqs are never reused.

        Returns:
            The seqs removed, highest first.
        """

    def renew_leases(self, leases: Sequence[tuple[str, int, float]]) -> list[bool]:
        """Extend leases without a log record, in ONE transaction, each to the store's
        ``now()`` plus its time to live.

        Args:
            leases: ``(run_id, token, ttl)`` each; ``ttl`` in seconds.

        Returns:
            For each lease, True if renewed, False if ``token`` no longer holds it.
        """

    def reader(self) -> AbstractContextManager[Reader]:
        """A read snapshot; usable while other processes write."""

    def spend_reserve(self) -> bool:
        """Free the room kept for a last small commit on a full disk; False if none."""

    def rebuild_indexes(self, load: Callable[[Reader], Iterable[Logged]]) -> int:
        """Empty every derived table and fold ``load(reader)`` into them, in ONE transaction.

        Args:
            load: a function of the transaction's reader returning the log records to
                replay; it may raise to abort (nothing changes).

        Returns:
            The number of records replayed.
        """

    def restore(self, rows: Sequence[tuple[int, bytes]], *, marker: str | None,
                last_seq: int = -1) -> None:
        """Put framed records back at their own seqs and fold them (``index.apply``), in
        ONE transaction: how ``bide copy`` fills a destination (``engine/storage/restore.py``).

        Args:
            rows: ``(seq, framed bytes)`` in ascending seq order, above the last seq.
            marker: the copy marker to leave in the store (a copy under way), or None
                to clear it.
            last_seq: seqs up to this one are never given by later commits.

        Raises:
            ValueError: a seq at or below the store's last seq (nothing is written).
        """

    def copy_marker(self) -> str | None:
        """The marker an unfinished ``restore`` sequence left, or None."""

    def on_commit(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer`` after each durable write of this store object (and each
        refused fenced commit), in the writing thread, before ``after_commit`` faults.

        Returns:
            A function that removes the observer.
        """

    def change_feed(self, run_id: str) -> ChangeFeed:
        """Wake-ups for a reader following ``run_id`` (``engine/storage/change_feed.py``): a
        ``ChangeFeed`` whose ``wait`` returns when a commit, by any process, may have
        touched the run, without reading the store in a loop. Close it when done.
        """

    def info(self) -> dict[str, Any]:
        """Sizes and usage: ``map_size``, ``used_bytes``, ``page_size``, ``file_bytes``,
        ``readers``, ``durability`` (a backend without a map reports its own measure)."""

    def reader_check(self) -> int:
        """Clear read slots left by dead processes; returns how many were cleared."""

    def close(self) -> None:
        """Release this object's hold on the store (idempotent)."""
