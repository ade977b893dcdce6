"""Which runs may need a watcher: a derived table of every run that is not finished.

A watcher rescans its home every second or so, to find runs submitted by another
process, orphans whose worker died, and approvals that expired. Reading every run
head for that costs in proportion to every run the home ever had (4.6% of a core
over 20,000 finished runs). This table holds one key per run that is not DONE,
FAILED or CANCELLED (its run id; the value is its status), so a rescan reads only
those runs' heads: O(unfinished runs), whatever the history.

``index.apply`` folds it from the head it has just computed (``fold``), so a
commit, ``bide doctor`` (a replay compared byte for byte) and a rebuild agree. It
is written only when a run's status changes, never on the other records of a run.
Homes made before the table existed gain it on their first writable open
(``build``, store format 3).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import Any, Protocol

import msgspec

from ...formats import pack_value, unpack_value
from ...formats.errors import CorruptIndex

ATTENTION = "attention"


class Attention(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A run that is not finished, as the rescan needs to know it."""

    status: str


class _Tables(Protocol):
    def get(self, table: str, key: bytes) -> bytes | None: ...
    def put(self, table: str, key: bytes, value: bytes) -> None: ...
    def delete(self, table: str, key: bytes) -> None: ...


class _Scanner(Protocol):
    def scan(self, table: str, prefix: bytes = b"", *,
             reverse: bool = False) -> Iterator[tuple[bytes, bytes]]: ...


def fold(tables: _Tables, run_id: str, status: str | None) -> None:
    """Keep the run's entry in step with its status (None: finished, so no entry).

    Reads before it writes, so the many records that leave the status as it was
    touch no page of this table.
    """
    key = run_id.encode()
    have = tables.get(ATTENTION, key)
    if status is None:
        if have is not None:
            tables.delete(ATTENTION, key)
        return
    want = pack_value(Attention(status=status))
    if have != want:
        tables.put(ATTENTION, key, want)


def run_ids(reader: _Scanner) -> Iterator[str]:
    """The ids of every run that is not finished, in run id order."""
    for key, _ in reader.scan(ATTENTION):
        yield key.decode()


def read_value(key: bytes, raw: bytes) -> Attention:
    """Decode one entry, checking its checksum.

    Raises:
        CorruptIndex: the checksum fails or the value is not an entry.
    """
    return unpack_value(raw, Attention, table=ATTENTION, key=key)


def build(tables: _Tables, heads: Iterable[tuple[bytes, bytes]], finished: Collection[str],
          decode: Any) -> int:
    """Fill the table from the run heads (the store format 2 -> 3 upgrade).

    A head that does not decode is left out: the upgrade must not fail on it, and
    ``bide doctor`` reports the damaged head (and, after a rebuild, the entry).

    Returns:
        The number of entries written.
    """
    n = 0
    for key, raw in heads:
        try:
            head = decode(key, raw)
        except CorruptIndex:
            continue
        if head.status not in finished:
            fold(tables, head.run_id, head.status)
            n += 1
    return n
