"""Two homes compared after ``bide copy``: the same log bytes and the same derived tables.

Both sides are walked in key order side by side, so memory stays flat however
large the home. The log is compared byte for byte at every seq; each derived
table (``index.DERIVED``: run heads and statuses, latest states, intents,
approvals, the LangGraph indexes...) key by key. Lease renewals are not
compared: ``bide copy`` leaves them behind (it refuses a run whose lease is live).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...formats import CorruptIndex
from ..storage.index import DERIVED, RUNLOG, read_index, seq_key, seq_of
from ..storage.store import Reader

LIMIT = 10  # differences named before the rest are only counted


def differences(source: Reader, destination: Reader, *, limit: int = LIMIT) -> list[str]:
    """What differs between two snapshots, one line each (the first ``limit``, then a count)."""
    found: list[str] = []
    more = 0
    for line in _all_differences(source, destination):
        if len(found) < limit:
            found.append(line)
        else:
            more += 1
    return found + ([f"... and {more} more differences"] if more else [])


def _all_differences(source: Reader, destination: Reader) -> Iterator[str]:
    for seq, mine, theirs in _merged(_log(source), _log(destination)):
        yield _what("log", f"seq {seq_of(seq)}", mine, theirs, "bytes differ")
    for table in DERIVED:
        for key, mine, theirs in _merged(source.scan(table), destination.scan(table)):
            if mine is not None and theirs is not None and _same(table, key, mine, theirs):
                continue
            yield _what(table, _shown(table, key), mine, theirs, "values differ")


def _log(reader: Reader) -> Iterator[tuple[bytes, bytes]]:
    for seq, raw in reader.log():
        yield seq_key(seq), raw


def _merged(a: Iterator[tuple[bytes, bytes]], b: Iterator[tuple[bytes, bytes]]
            ) -> Iterator[tuple[bytes, bytes | None, bytes | None]]:
    """``(key, a's value, b's value)`` wherever the two key-ordered walks disagree."""
    x, y = next(a, None), next(b, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            assert x is not None
            yield x[0], x[1], None
            x = next(a, None)
        elif x is None or y[0] < x[0]:
            yield y[0], None, y[1]
            y = next(b, None)
        else:
            if x[1] != y[1]:
                yield x[0], x[1], y[1]
            x, y = next(a, None), next(b, None)


def _what(table: str, key: str, mine: bytes | None, theirs: bytes | None, differ: str) -> str:
    if theirs is None:
        return f"{table} {key}: in the source, missing from the destination"
    if mine is None:
        return f"{table} {key}: in the destination, not in the source"
    return f"{table} {key}: {differ}"


def _same(table: str, key: bytes, mine: bytes, theirs: bytes) -> bool:
    """Equal once decoded: a source written before index checksums, read without upgrading."""
    try:
        return bool(read_index(table, key, mine) == read_index(table, key, theirs))
    except (CorruptIndex, KeyError):
        return False


def _shown(table: str, key: bytes) -> str:
    if table == RUNLOG and len(key) > 9:
        return f"{key[:-9].decode(errors='replace')}@{seq_of(key)}"
    return key.decode(errors="replace").replace("\x00", " ")
