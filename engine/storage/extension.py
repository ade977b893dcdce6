"""What an index extension is: a family of records the core index folds through hooks.

The core index (``index.py``) knows runs, intents and approvals. Other record
families (LangGraph's checkpoints today) bring their own tables, folds and
retention rule as an ``Extension``, listed in ``extensions.py``; the core calls
them without naming them. The tables must be known before a store opens (a
backend creates them), so extensions are listed statically, not registered at
run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Logged = tuple[int, int, Any]  # (seq, framed size, record): a record as a replay reads it


@dataclass(frozen=True)
class Extension:
    """One record family's part of the index.

    Attributes:
        name: for messages.
        tables: the derived tables it writes (created by every backend).
        records: the record classes it owns.
        fold_tables: ``(tables, seq, record)``; fold a record into its tables.
        fold_head: ``(tables, head, seq, record)``; what a record says about its run's head.
        keys_of: ``(seq, record) -> [(table, key)]``; every key the folds may write.
        retain: ``(items, keep) -> seqs``; of one run's records (all of them, in log
            order), the seqs of the ones it owns that ``prune --keep`` keeps.
        read_value: ``(key, raw) -> value``; decode one of its table values, checking its
            checksum (doctor and the format upgrade); raises ``CorruptIndex``.
    """

    name: str
    tables: tuple[str, ...]
    records: tuple[type, ...]
    fold_tables: Callable[[Any, int, Any], None]
    fold_head: Callable[[Any, Any, int, Any], None]
    keys_of: Callable[[int, Any], list[tuple[str, bytes]]]
    retain: Callable[[list[Logged], int], set[int]]
    read_value: Callable[[bytes, bytes], Any]

    def owns(self, record: Any) -> bool:
        return isinstance(record, self.records)
