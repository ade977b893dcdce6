"""``bide copy SRC DST``: a home moved record by record into an empty store, and verified.

From LMDB to PostgreSQL and back (or LMDB to LMDB, PostgreSQL to PostgreSQL, or
any ``Store`` object such as ``MemoryStore``). Decisions, and why:

- **Seqs are kept** (``engine/storage/restore.py``): records name other records by seq,
  so the destination holds the same bytes at the same seqs, and its derived
  tables are what the same ``index.apply`` makes of them. PostgreSQL's gaps stay
  gaps in LMDB; later commits in the destination go on above the source's last seq.
- **Only into an empty destination**: no records, no runs. Anything there is
  named and nothing is written. Merging two homes is not a copy.
- **A marker first, removed last.** The destination carries a copy marker from
  before its first record until after its last: a copy killed half-way leaves a
  destination the next ``bide copy`` refuses as *interrupted* (``--resume``
  finishes it: batches commit whole and in seq order, so it goes on after the
  destination's last seq). bide never deletes the destination's data itself.
- **One snapshot of the source**, read in batches of bounded size so memory
  stays flat. A run under a live lease refuses the copy: a worker still
  advancing it would leave its next commits behind in the source. Stop the
  workers first; expired leases are copied as they are (a watcher on the
  destination takes those runs over), and lease renewals are not copied.
- **The signing requirement** (``signing.json`` of a directory home, a row of a
  PostgreSQL home's database) is carried, so it is never lost. **This host's
  files**: request files are written again
  for every decision still waiting (they name the home to decide in);
  decision files waiting in the source's inbox are named, never moved.
- **Verified**: doctor on both ends, then the two homes are walked side by side
  (``copy_verify``): every log record's bytes and every derived table equal.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api.runtime import Engine
from ..base import faults
from ..base.errors import CopyRefused, NotAHome
from ..human import signing
from ..postgres import home as pg_home
from ..run.approvals import Doors, request_of, write_request_file
from ..run.run_view import RunView
from ..storage.restore import Row
from ..storage.store import Reader, Store
from ..upkeep.maintenance import DoctorReport, doctor
from .copy_verify import differences

BATCH_RECORDS = 500  # records per destination transaction
BATCH_BYTES = 4 << 20  # ...or fewer, when they are large
Home = str | os.PathLike[str] | Store


@dataclass
class CopyReport:
    """What ``copy_home`` copied, and what the doctor and the comparison found."""

    source: str
    destination: str
    records: int = 0
    bytes: int = 0
    batches: int = 0
    runs: dict[str, int] = field(default_factory=dict)  # runs by status, in the destination
    resumed_from: int | None = None  # the first seq this call copied, when resuming
    seconds: float = 0.0
    source_doctor: DoctorReport = field(default_factory=DoctorReport)
    destination_doctor: DoctorReport = field(default_factory=DoctorReport)
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # this host's files: what moved, what not

    @property
    def ok(self) -> bool:
        return self.source_doctor.ok and self.destination_doctor.ok and not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "source": self.source, "destination": self.destination,
                "records": self.records, "bytes": self.bytes, "batches": self.batches,
                "runs": self.runs, "resumed_from": self.resumed_from,
                "seconds": round(self.seconds, 3),
                "source_doctor": self.source_doctor.to_dict(),
                "destination_doctor": self.destination_doctor.to_dict(),
                "differences": self.differences, "notes": self.notes}


@dataclass(frozen=True)
class _End:
    """One side of a copy: its store, this host's directory for it, its name for messages."""

    name: str
    store: Store
    local: Path | None


def copy_home(source: Home, destination: Home, *, resume: bool = False,
              source_local: str | os.PathLike[str] | None = None,
              destination_local: str | os.PathLike[str] | None = None,
              batch_records: int = BATCH_RECORDS, now: float | None = None) -> CopyReport:
    """Copy every record of ``source`` into the empty ``destination``, then verify both.

    Args:
        source, destination: a home directory, a ``postgresql://`` URL, or a ``Store``.
        resume: finish a copy from the same source that was interrupted.
        source_local, destination_local: this host's directory of a PostgreSQL end
            (its inbox, requests and ``signing.json``; default ``.bide``). A
            directory home is its own.
        batch_records: records per destination transaction (at most).
        now: the time leases are judged at (default: the source store's clock).

    Returns:
        The report; ``ok`` is False when the doctor or the comparison found a difference.

    Raises:
        CopyRefused: the destination is not empty (or holds an interrupted copy), the
            source fails the doctor or has a run under a live lease, they are one
            home, or their signing requirements differ. Nothing is written.
        NotAHome: the source is not a bide home.
    """
    if batch_records < 1:
        raise ValueError(f"batch_records must be at least 1, not {batch_records}")
    started = time.monotonic()
    names = _name(source), _name(destination)
    if names[0] == names[1]:
        raise CopyRefused(*names, "they are the same home")
    with ExitStack() as closing:
        src = _open(source, source_local, create=False, closing=closing)
        report = CopyReport(*names, source_doctor=doctor(src.store))
        _check_source(src, names[1], report.source_doctor, now)
        dst = _open(destination, destination_local, create=True, closing=closing)
        marker, report.resumed_from = _check_destination(src, dst, resume)
        _copy(src, dst, marker, report.resumed_from or 0, batch_records, now, report)
        report.destination_doctor = doctor(dst.store)
        with src.store.reader() as a, dst.store.reader() as b:
            report.differences = differences(a, b)
            report.runs = _statuses(b)
    report.seconds = time.monotonic() - started
    return report


# -- the two ends ---------------------------------------------------------------------
def _name(home: Home) -> str:
    if isinstance(home, (str, os.PathLike)):
        text = os.fspath(home)
        return pg_home.redacted(text) if pg_home.is_url(text) else str(Path(text).resolve())
    return str(home.home)


def _open(home: Home, local: str | os.PathLike[str] | None, *, create: bool,
          closing: ExitStack) -> _End:
    if not isinstance(home, (str, os.PathLike)):
        return _End(str(home.home), home, None if local is None else Path(local))
    try:  # an existing home is opened as it is: a refused copy leaves it untouched
        engine = Engine(home, create=False, local=local)
    except NotAHome:
        if not create:
            raise
        engine = Engine(home, create=True, local=local)
    closing.enter_context(engine)
    return _End(_name(home), engine.store, engine.home)


def _check_source(src: _End, destination: str, checked: DoctorReport,
                  now: float | None) -> None:
    """Refuse a damaged source, or one a worker is advancing right now."""
    if not checked.ok:
        raise CopyRefused(src.name, destination, f"the source fails bide doctor "
                          f"({checked.problems[0]}); repair it first (bide doctor --rebuild)")
    with src.store.reader() as r:
        _refuse_live_leases(r, src.name, destination, now)


def _refuse_live_leases(r: Reader, source: str, destination: str, now: float | None) -> None:
    leased = [h for h in r.heads() if RunView(r, h).lease_live(now)]
    if leased:
        h, more = leased[0], len(leased) - 1
        raise CopyRefused(source, destination, f"run {h.run_id} is leased by {h.lease_owner}"
                          + (f" (and {more} more runs are leased)" if more else "")
                          + ": a worker is advancing it; stop the workers (bide watch, apps) "
                          "or wait for their leases to expire, then copy")


def _check_destination(src: _End, dst: _End, resume: bool) -> tuple[str, int | None]:
    """The marker to keep in the destination and, when resuming, the first seq to copy;
    or a refusal."""
    _check_signing(src, dst)
    found = dst.store.copy_marker()
    with dst.store.reader() as r:
        last, runs = r.last_seq(), [h.run_id for h in r.heads()]
    if found is not None:
        return _resumable(src, dst, found, last, resume), last + 1
    if last >= 0 or runs:
        shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise CopyRefused(src.name, dst.name, f"the destination is not empty: it holds records "
                          f"up to seq {last} and {len(runs)} runs" + (f" ({shown})" if runs
                          else "") + "; copy into a new, empty home")
    return json.dumps({"source": src.name, "started": time.time()}), None


def _resumable(src: _End, dst: _End, found: str, last: int, resume: bool) -> str:
    """The marker of an interrupted copy, if ``resume`` may finish it."""
    try:
        earlier = json.loads(found)
    except ValueError:
        earlier = {}
    came_from = earlier.get("source", "(unknown)") if isinstance(earlier, dict) else "(unknown)"
    if resume and came_from == src.name:
        return found
    what = (f"an earlier bide copy from {came_from} into it was interrupted (it holds "
            f"records up to seq {last}); ")
    if resume:
        raise CopyRefused(src.name, dst.name, what + f"--resume finishes a copy from that "
                          f"same source only, not from {src.name}", interrupted=True)
    raise CopyRefused(src.name, dst.name, what + "run the same bide copy again with --resume "
                      "to finish it, or set the destination aside (a new directory or "
                      "database) and copy again; bide deletes nothing", interrupted=True)


# -- copying -----------------------------------------------------------------------------
def _copy(src: _End, dst: _End, marker: str, start: int, batch_records: int, now: float | None,
          report: CopyReport) -> None:
    with src.store.reader() as r:
        _refuse_live_leases(r, src.name, dst.name, now)  # again, in the snapshot copied
        _restore(dst, [], marker)  # the marker first
        if (carried := _carry_signing(src, dst)) is not None:
            report.notes.append(carried)
        for batch in _batches(r, start, batch_records):
            _restore(dst, batch, marker)
            report.records += len(batch)
            report.bytes += sum(len(raw) for _, raw in batch)
            report.batches += 1
        last = r.last_seq()
        report.notes += _local_notes(src, dst)
    _restore(dst, [], None, last)  # the marker last


def _restore(dst: _End, rows: list[Row], marker: str | None, last_seq: int = -1) -> None:
    """One destination transaction, between the fault points every write has."""
    faults.point("before_commit")
    dst.store.restore(rows, marker=marker, last_seq=last_seq)
    faults.point("after_commit")


def _batches(r: Reader, start: int, most: int) -> Iterator[list[Row]]:
    batch: list[Row] = []
    size = 0
    for seq, raw in r.log(start):
        if batch and (len(batch) >= most or size + len(raw) > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((seq, raw))
        size += len(raw)
    if batch:
        yield batch


def _statuses(r: Reader) -> dict[str, int]:
    counts: dict[str, int] = {}
    for head in r.heads():
        counts[head.status] = counts.get(head.status, 0) + 1
    return dict(sorted(counts.items()))


# -- this host's files ------------------------------------------------------------------
def _marker(end: _End) -> signing.Marker | None:
    """Where ``end`` keeps its signing requirement: the database a PostgreSQL home's hosts
    share, or a directory home's ``signing.json``; None when this host has neither."""
    if end.local is None and not isinstance(end.store, signing.SharedSettings):
        return None
    return signing.marker(end.local if end.local is not None else Path("."), end.store)


def _check_signing(src: _End, dst: _End) -> None:
    """Refuse (before writing) a destination that requires another key than the source."""
    there, here = _marker(dst), _marker(src)
    if there is None or here is None:
        return
    mine, theirs = signing.requirement(here), signing.requirement(there)
    if mine is not None and theirs is not None and mine["key_id"] != theirs["key_id"]:
        raise CopyRefused(src.name, dst.name, f"the source requires decisions signed with "
                          f"{mine['key_id']}, the destination with {theirs['key_id']}")


def _carry_signing(src: _End, dst: _End) -> str | None:
    """Carry the signing requirement: a home that requires signed decisions still does,
    wherever the destination keeps it (its ``signing.json``, or its database's row)."""
    here, there = _marker(src), _marker(dst)
    found = None if here is None else signing.requirement(here)
    if found is None or there is None:
        return None
    there.write_once(found)
    where = (f"the row {signing.SETTING!r} of {dst.name}'s bide.meta" if there.shared
             is not None else str(there.home / signing.MARKER))
    return f"signed decisions required ({found['key_id']}): {where}"


def _local_notes(src: _End, dst: _End) -> list[str]:
    """Write request files for the decisions waiting; name the source's waiting inbox files."""
    notes = []
    if dst.local is not None:
        with dst.store.reader() as r:
            waiting = [a for a in r.approvals() if a.decision is None]
        doors = Doors.of(dst.local, url=dst.name if pg_home.is_url(dst.name) else None)
        for state in waiting:
            write_request_file(doors, request_of(state))
        if waiting:
            notes.append(f"{len(waiting)} request files written to {dst.local / 'requests'}")
    if src.local is not None and not src.local.is_dir():
        notes.append(f"no directory {src.local} for the source on this host: no request or "
                     "inbox files looked at (name it with --source-local)")
    inbox = src.local / "inbox" if src.local is not None else None
    left = sorted(p.name for p in inbox.glob("*.json")) if inbox and inbox.is_dir() else []
    if left:
        notes.append(f"{len(left)} decision files wait in {inbox} and were not copied "
                     f"({', '.join(left[:3])}{', ...' if len(left) > 3 else ''}): let the "
                     "source's watcher take them first, or move them into the destination's "
                     "inbox")
    return notes
