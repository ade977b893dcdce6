"""The log one run at a time, so upkeep holds one run in memory, not the whole home.

``bide doctor`` and ``bide prune`` used to decode the whole log into one list and
fold it into in-memory tables: 200 MB of RSS for 20,000 runs, growing with the
home. The run log index (``RUNLOG``: run id, then seq) lists each run's seqs in
order, so a walk can read and fold one run, judge it, and let it go.

The index is derived from the log, so a walk that trusts it must check it:
``entries`` says which index entries lead to no record of their run, and the
caller counts the records it reached; when that count falls short of the log's,
``strays`` finds the log records the index does not list (one more pass, only
on a damaged home).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ...formats import decode
from ..storage.index import RUNLOG, run_prefix, runlog_key, seq_of
from ..storage.store import Logged, Reader


@dataclass
class RunRecords:
    """One run's log records reached through the index (``items``, in seq order), and
    the index entries that lead to no record of the run (``extra``: key, why)."""

    run_id: str
    items: list[Logged] = field(default_factory=list)
    extra: list[tuple[bytes, str]] = field(default_factory=list)
    entries: list[tuple[bytes, bytes]] = field(default_factory=list)  # (key, value) as indexed


def run_groups(reader: Reader) -> Iterator[tuple[str, list[tuple[bytes, bytes]]]]:
    """``(run_id, [(key, value)])`` of each run in the run log index, one run at a time."""
    run_id: str | None = None
    group: list[tuple[bytes, bytes]] = []
    for key, value in reader.scan(RUNLOG):
        this = key[:-9].decode(errors="replace")
        if this != run_id and group:
            yield run_id or "", group
            group = []
        run_id = this
        group.append((key, value))
    if group:
        yield run_id or "", group


def read_run(reader: Reader, run_id: str, entries: list[tuple[bytes, bytes]],
             strays: Sequence[int] = ()) -> RunRecords:
    """The run's records: those its index entries lead to, plus ``strays`` (seqs of the
    run that the index does not list).

    Raises:
        RecordError: a record cannot be decoded (callers checked the log first).
    """
    found = RunRecords(run_id, entries=entries)
    for key, _ in entries:
        seq = seq_of(key)
        raw = reader.raw(seq)
        if raw is None:
            found.extra.append((key, "in the index but not implied by the log"))
            continue
        record = decode(raw, key=seq)
        if getattr(record, "run_id", None) != run_id:
            found.extra.append((key, "in the index but not implied by the log"))
            continue
        found.items.append((seq, len(raw), record))
    for seq in strays:
        raw = reader.raw(seq)
        if raw is not None:
            found.items.append((seq, len(raw), decode(raw, key=seq)))
    found.items.sort(key=lambda item: item[0])
    return found


def strays(reader: Reader) -> dict[str, list[int]]:
    """``{run_id: [seq]}`` of the log records the run log index does not list.

    Raises:
        RecordError: a record cannot be decoded (callers checked the log first).
    """
    found: dict[str, list[int]] = {}
    for seq, raw in reader.log():
        run_id: str = decode(raw, key=seq).run_id  # type: ignore[attr-defined]
        if reader.get(RUNLOG, runlog_key(run_id, seq)) is None:
            found.setdefault(run_id, []).append(seq)
    return found


def indexed(reader: Reader, run_id: str) -> list[tuple[bytes, bytes]]:
    """The run log index entries of one run."""
    return list(reader.scan(RUNLOG, run_prefix(run_id)))
