"""The store seam: an append-only log of framed records plus derived indexes.

``Store`` is the contract every backend implements (LMDB today; a server
database for many-machine deployments later). ``tests/test_store_contract.py``
runs one suite against each implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..formats import Record
from .index import ApprovalState, IntentState, RunHead

Check = Callable[["Reader"], None]


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

    def log(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """Every ``(seq, framed bytes)`` of the log from ``start`` on."""

    def last_seq(self) -> int:
        """The highest seq in the log, or -1 for an empty log."""

    def get(self, table: str, key: bytes) -> bytes | None:
        """The value at ``key`` in a derived table (``index.DERIVED``), or None."""

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of a derived table's keys starting with ``prefix``, in key order."""


class Store(Protocol):
    """Where a home's records live. Every method is safe across processes."""

    path: Any
    durability: str

    def commit(
        self,
        records: Sequence[Record] | Callable[[Reader], Sequence[Record]],
        *,
        check: Check | None = None,
        fence: tuple[str, int] | None = None,
    ) -> list[int]:
        """Append ``records`` and fold them into the indexes in ONE transaction.

        Args:
            records: the records, or a function of the transaction's reader that
                returns them (when what to write depends on what is there).
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

    def renew_lease(self, run_id: str, token: int, expires_at: float) -> bool:
        """Extend a lease without a log record; False if ``token`` no longer holds it."""

    def reader(self) -> AbstractContextManager[Reader]:
        """A read snapshot; usable while other processes write."""

    def spend_reserve(self) -> bool:
        """Free the room kept for a last small commit on a full disk; False if none."""

    def close(self) -> None: ...
