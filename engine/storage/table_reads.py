"""The typed half of ``store.Reader``, written once over a backend's raw ``get``/``scan``.

A backend that keeps every table as ordered key -> bytes (memory, PostgreSQL)
implements ``get``, ``scan`` and ``raw``; this mixin turns them into run heads,
records, intents, approvals and leases, so those readings cannot drift apart
between backends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ...formats import Record, decode, unpack_value
from .index import (
    APPROVALS,
    INTENTS,
    RUNLOG,
    RUNS,
    ApprovalState,
    IntentState,
    RunHead,
    run_prefix,
    runlog_type,
    seq_key,
    seq_of,
)
from .store import LEASES


class TableReads:
    """Mixed into a reader that has ``get(table, key)``, ``scan(table, prefix)``, ``raw(seq)``."""

    # The store's clock (a backend gives its readers its own): lease expiries are written
    # and judged in it. PostgreSQL's readers override ``now`` with the server's clock.
    clock: Callable[[], float] = time.time

    def now(self) -> float:
        """The store's time: what a lease's expiry is written in and compared with."""
        return self.clock()

    def get(self, table: str, key: bytes) -> bytes | None:
        raise NotImplementedError

    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def raw(self, seq: int) -> bytes | None:
        raise NotImplementedError

    def head(self, run_id: str) -> RunHead | None:
        key = run_id.encode()
        raw = self.get(RUNS, key)
        return None if raw is None else unpack_value(raw, RunHead, table=RUNS, key=key)

    def heads(self) -> Iterator[RunHead]:
        for key, raw in self.scan(RUNS):
            yield unpack_value(raw, RunHead, table=RUNS, key=key)

    def record(self, seq: int) -> Record:
        raw = self.raw(seq)
        if raw is None:
            raise KeyError(f"no log record at seq {seq}")
        return decode(raw, key=seq)

    def run_entries(self, run_id: str, start: int = 0) -> Iterator[tuple[int, str]]:
        first = run_prefix(run_id) + seq_key(max(start, 0))
        for key, raw in self.scan(RUNLOG, run_prefix(run_id)):
            if key >= first:
                yield seq_of(key), runlog_type(raw, key)

    def intent(self, run_id: str, key: str) -> IntentState | None:
        ikey = run_prefix(run_id) + key.encode()
        raw = self.get(INTENTS, ikey)
        return None if raw is None else unpack_value(raw, IntentState, table=INTENTS, key=ikey)

    def intents(self, run_id: str | None = None) -> Iterator[IntentState]:
        prefix = b"" if run_id is None else run_prefix(run_id)
        for key, raw in self.scan(INTENTS, prefix):
            yield unpack_value(raw, IntentState, table=INTENTS, key=key)

    def approval(self, approval_id: str) -> ApprovalState | None:
        key = approval_id.encode()
        raw = self.get(APPROVALS, key)
        return None if raw is None else unpack_value(raw, ApprovalState, table=APPROVALS, key=key)

    def approvals(self) -> Iterator[ApprovalState]:
        for key, raw in self.scan(APPROVALS):
            yield unpack_value(raw, ApprovalState, table=APPROVALS, key=key)

    def lease_expiry(self, run_id: str) -> tuple[int, float] | None:
        key = run_id.encode()
        raw = self.get(LEASES, key)
        return None if raw is None else unpack_value(raw, tuple[int, float], table=LEASES, key=key)
