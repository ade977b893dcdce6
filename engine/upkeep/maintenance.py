"""Store-level upkeep: doctor (check), rebuild indexes, prune, stats.

The log is the truth; the derived tables (``index.DERIVED``) are what
``index.apply`` makes of it. ``check`` replays the whole log into in-memory
tables with that same ``apply`` and compares them with the stored ones, so a
stale index is found whatever made it stale. ``rebuild`` and ``prune`` rewrite
the derived tables the same way inside the write transaction that changes
the log, so readers never see the two disagree.

Compaction (copying the file without its free pages) lives in ``compaction``.
"""

from __future__ import annotations

import hashlib
import time
from array import array
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from ...formats import (
    Checkpoint,
    CorruptIndex,
    CorruptRecord,
    LeaseAcquired,
    LeaseReleased,
    PendingWrite,
    Record,
    RecordError,
    decode,
    record_type,
    unpack_value,
)
from ..base import faults
from ..base.errors import LogUnreadable
from ..base.permissions import exposure
from ..base.vocabulary import IN_DOUBT
from ..run.planned import dangling, referenced
from ..run.run_view import finished, unfolded_from
from ..storage.call_refs import unresolved
from ..storage.extensions import owner
from ..storage.index import (
    DERIVED,
    FRAMED,
    RUNLOG,
    RUNS,
    RunHead,
    apply,
    call_results,
    read_index,
    runlog_type,
    seq_key,
    seq_of,
)
from ..storage.store import LEASES, LOG, Logged, Reader, Store
from .run_walk import indexed, read_run, run_groups, strays

# What prune may take from a run it keeps; every other record (its identity, status history,
# tool calls, decisions, and any type prune does not know) stays.
_PRUNABLE = (Checkpoint, PendingWrite, LeaseAcquired, LeaseReleased)


# -- in-memory tables -------------------------------------------------------------
class MemTables:
    """``index.Tables`` as dicts: where a rebuild lands before it is compared."""

    def __init__(self, records: dict[int, Record] | None = None) -> None:
        self.data: dict[str, dict[bytes, bytes]] = {name: {} for name in DERIVED}
        self.records = records or {}

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.data[table].get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.data[table][key] = value

    def delete(self, table: str, key: bytes) -> None:
        self.data[table].pop(key, None)

    def record(self, seq: int) -> Record:
        return self.records[seq]


# -- problems and reports ---------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One thing wrong: its kind (corrupt, unreadable, missing, extra, differs,
    dangling: a reference to a record that is not there), table, key."""

    kind: str
    table: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.table} {self.key}: {self.detail}"

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "table": self.table, "key": self.key, "detail": self.detail}


@dataclass
class DoctorReport:
    records: int = 0
    runs: int = 0
    problems: list[Problem] = field(default_factory=list)
    rebuilt: bool = False
    warnings: list[str] = field(default_factory=list)  # e.g. a home others can write

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "records": self.records, "runs": self.runs,
                "rebuilt": self.rebuilt, "problems": [p.to_dict() for p in self.problems],
                "warnings": self.warnings}


# -- reading the whole log --------------------------------------------------------
def read_log(reader: Reader) -> tuple[list[tuple[int, int, Record]], list[Problem]]:
    """Decode every record: ``[(seq, bytes, record)]`` and the records that failed."""
    good: list[tuple[int, int, Record]] = []
    bad: list[Problem] = []
    for seq, raw in reader.log():
        try:
            good.append((seq, len(raw), decode(raw, key=seq)))
        except RecordError as exc:
            kind = "corrupt" if isinstance(exc, CorruptRecord) else "unreadable"
            bad.append(Problem(kind, LOG, f"seq {seq}", _whose(reader, seq) + str(exc)))
    return good, bad


def _whose(reader: Reader, seq: int) -> str:
    """``run r-1, checkpoint: `` for a seq, from the run log index (if it knows it)."""
    suffix = seq_key(seq)
    for key, raw in reader.scan(RUNLOG):
        if key.endswith(suffix) and seq_of(key) == seq:
            return f"run {key[:-9].decode(errors='replace')}, {_runlog_text(raw)}: "
    return ""


def rebuild_tables(records: list[tuple[int, int, Record]]) -> MemTables:
    """What the derived tables must hold for these log records."""
    mem = MemTables({seq: record for seq, _, record in records})
    for seq, size, record in records:
        apply(mem, seq, size, record)
    return mem


# -- doctor --------------------------------------------------------------------------
def check(reader: Reader) -> DoctorReport:
    """Verify every record's checksum, that references between records lead somewhere,
    and that the derived tables equal a rebuild.

    When some records cannot be read the reference check and the index comparison
    are skipped: without them both would differ everywhere those records matter,
    which says nothing new.

    Memory stays bounded by the largest run, not the home: the log is read in
    one pass for checksums, then one run at a time (``run_walk``) to fold its
    records and compare what they imply with the stored tables. Every run's
    derived keys are its own (``index.refold`` relies on the same), so a key
    nobody implied shows as a table holding more keys than the runs matched.
    """
    total, problems = scan_log(reader)
    report = DoctorReport(records=total, problems=problems)
    report.runs = sum(1 for _ in reader.scan(RUNS))
    damaged = index_checksums(reader)
    report.problems += damaged
    if problems:
        return report
    report.problems += _compare_runs(reader, total, {(p.table, p.key) for p in damaged})
    return report


def scan_log(reader: Reader) -> tuple[int, list[Problem]]:
    """Decode every record once, keeping none: how many there are, and those that fail."""
    total, bad = 0, []
    for seq, raw in reader.log():
        total += 1
        try:
            decode(raw, key=seq)
        except RecordError as exc:
            kind = "corrupt" if isinstance(exc, CorruptRecord) else "unreadable"
            bad.append(Problem(kind, LOG, f"seq {seq}", _whose(reader, seq) + str(exc)))
    return total, bad


def _compare_runs(reader: Reader, total: int, named: set[tuple[str, str]]) -> list[Problem]:
    """What differs between the stored tables and a rebuild, one run at a time."""
    present: Counter[str] = Counter()
    by_run: dict[str, list[Problem]] = {}
    reached = 0
    for run_id, entries in run_groups(reader):
        run = read_run(reader, run_id, entries)
        reached += len(run.items)
        by_run[run_id] = _run_problems(reader, run, named, present)
        if not by_run[run_id]:
            del by_run[run_id]  # keep only the runs with something to say
    lost: dict[str, list[int]] = {}
    if reached != total:  # log records the run log does not list: fold them in too
        lost = strays(reader)
        for run_id, seqs in lost.items():
            old: Counter[str] = Counter()  # recount this run's keys with its strays folded in
            _run_problems(reader, read_run(reader, run_id, indexed(reader, run_id)), named, old)
            present.subtract(old)
            run = read_run(reader, run_id, indexed(reader, run_id), seqs)
            by_run[run_id] = _run_problems(reader, run, named, present)
    problems = [p for found in by_run.values() for p in found]
    extra = [t for t in DERIVED if t != RUNLOG
             and sum(1 for _ in reader.scan(t)) > present[t]]
    return problems + _extras(reader, extra, named, lost)


def _run_problems(reader: Reader, run: Any, named: set[tuple[str, str]],
                  present: Counter[str]) -> list[Problem]:
    """One run: its index entries that lead nowhere, and every key its records imply
    that is missing or holds another value. Counts the implied keys found (``present``)."""
    problems = [Problem("extra", RUNLOG, _key_text(RUNLOG, key), why)
                for key, why in run.extra if (RUNLOG, _key_text(RUNLOG, key)) not in named]
    mem = rebuild_tables(run.items)
    have_runlog = dict(run.entries)
    for table in DERIVED:
        for key, want in mem.data[table].items():
            shown = _key_text(table, key)
            have = have_runlog.get(key) if table == RUNLOG else reader.get(table, key)
            if have is not None:
                present[table] += 1
            if (table, shown) in named:
                continue
            if have is None:
                problems.append(Problem("missing", table, shown,
                                        "implied by the log but not in the index"))
            elif have != want and not _same_content(table, key, have, want):
                problems.append(Problem("differs", table, shown,
                                        _difference(table, have, want)))
    problems += [Problem("dangling", LOG, f"seq {seq}", why)
                 for seq, why in dangling(_with_referenced(reader, run.items))
                 if any(seq == s for s, _, _ in run.items)]
    problems += [Problem("dangling", LOG, f"seq {seq}", why)
                 for seq, why in unresolved(run.items, call_results(mem))]
    return problems


def _with_referenced(reader: Reader, items: list[tuple[int, int, Record]]
                     ) -> list[tuple[int, Record]]:
    """The run's records, and any record of another run its checkpoints refer to (so
    ``dangling`` says what that record is, as it did over the whole log)."""
    mine = {seq for seq, _, _ in items}
    out = [(seq, record) for seq, _, record in items]
    for seq in referenced(r for _, _, r in items if isinstance(r, Checkpoint)) - mine:
        try:
            out.append((seq, reader.record(seq)))
        except KeyError:  # gone: dangling says so
            pass
    return out


def _extras(reader: Reader, tables: list[str], named: set[tuple[str, str]],
            lost: dict[str, list[int]]) -> list[Problem]:
    """The keys of ``tables`` that no run implies: a second walk over the runs notes an
    8-byte hash of every implied key (a damaged home only; 8 bytes a key, not the keys).
    ``lost``: the records the run log does not list, by run (``run_walk.strays``)."""
    if not tables:
        return []
    hashes = {t: array("q") for t in tables}
    walked = ((run_id, read_run(reader, run_id, entries, lost.get(run_id, [])))
              for run_id, entries in run_groups(reader))
    unlisted = ((run_id, read_run(reader, run_id, [], seqs)) for run_id, seqs in lost.items())
    for _, run in chain(walked, unlisted):
        mem = rebuild_tables(run.items)
        for t in tables:
            hashes[t].extend(_hash(key) for key in mem.data[t])
    found = []
    for t in tables:
        implied = sorted(hashes.pop(t))
        for key, _ in reader.scan(t):
            h = _hash(key)
            i = bisect_left(implied, h)
            if (i == len(implied) or implied[i] != h) and (t, _key_text(t, key)) not in named:
                found.append(Problem("extra", t, _key_text(t, key),
                                     "in the index but not implied by the log"))
    return found


def _hash(key: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big", signed=True)


def index_checksums(reader: Reader) -> list[Problem]:
    """Every index value whose checksum fails or that does not decode, as a problem."""
    problems = []
    for table in (*FRAMED, LEASES):
        for key, raw in reader.scan(table):
            try:
                read_index(table, key, raw)
            except CorruptIndex as exc:
                problems.append(Problem("corrupt", table, _key_text(table, key),
                                        f"{exc.why}; `bide doctor --rebuild` rewrites it"))
    return problems


def _key_text(table: str, key: bytes) -> str:
    if table == RUNLOG:
        return f"{key[:-9].decode(errors='replace')}@{seq_of(key)}"
    return key.decode(errors="replace").replace("\x00", " ")


def _same_content(table: str, key: bytes, have: bytes, want: bytes) -> bool:
    """Equal once decoded: a value written before index checksums (store format 1)
    still read on a home not yet opened for writing (e.g. read-only)."""
    if table not in FRAMED:
        return False
    try:
        return read_index(table, key, have) == read_index(table, key, want)
    except CorruptIndex:
        return False


def _runlog_text(raw: bytes) -> str:
    try:
        return runlog_type(raw, b"")
    except CorruptIndex:
        return "(corrupt type)"


def _difference(table: str, have: bytes, want: bytes) -> str:
    if table == RUNLOG:
        return f"type {_runlog_text(have)!r} in the index, {_runlog_text(want)!r} in the log"
    try:
        a = unpack_value(have, table=table, key=b"")
        b = unpack_value(want, table=table, key=b"")
    except CorruptIndex:  # an undecodable index value is itself the finding
        return "the index value does not decode"
    if isinstance(a, dict) and isinstance(b, dict):
        diffs = [f"{k}: {a.get(k)!r} in the index, {b.get(k)!r} from the log"
                 for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k)]
        return "; ".join(diffs[:3]) + (f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else "")
    return "value differs from the rebuild"


def doctor(store: Store, *, rebuild: bool = False) -> DoctorReport:
    """Check the store; with ``rebuild``, first rewrite the derived tables from the log.

    Raises:
        LogUnreadable: ``rebuild`` was asked but some records cannot be read.
    """
    if rebuild:
        rebuild_indexes(store)
    with store.reader() as r:
        report = check(r)
    report.rebuilt = rebuild
    report.warnings = exposure(Path(store.home))  # a non-file store's name: nothing
    if (marker := store.copy_marker()) is not None:
        report.warnings.append(f"a bide copy into this home has not finished ({marker}); "
                               "finish it with bide copy --resume before using the home")
    return report


def rebuild_indexes(store: Store) -> int:
    """Drop the derived tables and replay the whole log into them, in one transaction.

    Returns:
        The number of log records replayed.

    Raises:
        LogUnreadable: a record cannot be read (an index without it would lie).
    """

    def load(reader: Reader) -> list[Logged]:
        records, bad = read_log(reader)
        if bad:
            raise LogUnreadable("rebuild the indexes", bad)
        return records

    return store.rebuild_indexes(load)


# -- prune -----------------------------------------------------------------------------
@dataclass
class PruneReport:
    removed: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    runs_removed: list[str] = field(default_factory=list)
    runs_trimmed: dict[str, int] = field(default_factory=dict)
    kept: int = 0
    dry_run: bool = False

    @property
    def records(self) -> int:
        return sum(self.removed.values())

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "records_removed": self.records, "bytes": self.bytes,
                "removed_by_type": dict(self.removed), "runs_removed": self.runs_removed,
                "runs_trimmed": self.runs_trimmed, "records_kept": self.kept}


def prune(store: Store, *, keep: int = 1, finished_older_than: float | None = None,
          dry_run: bool = False, now: float | None = None) -> PruneReport:
    """Remove old checkpoints (and what only they needed), and old finished runs.

    Args:
        keep: checkpoints to keep per run (>= 1), each with the full snapshot,
            deltas and pending writes it is read from.
        finished_older_than: seconds; a DONE, FAILED or CANCELLED run whose last
            record is older than that is removed whole.
        dry_run: only report what would be removed.

    A run that is kept always keeps: its ``RunCreated`` and status changes, all
    intents and approvals, its latest checkpoint's chain (and the chain of the
    checkpoint that planned the Sends a kept one refers to), the pending writes a
    resume reads after it, and its lease records from the last acquisition on.
    The plan is made and carried out in one write transaction by
    ``Store.delete``, which also refolds the derived tables of the runs it
    touches and never gives a removed seq again. The file does not shrink
    (LMDB reuses the pages): ``compact`` does that.

    Raises:
        ValueError: ``keep`` < 1. LogUnreadable: some records cannot be read.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (a run's latest checkpoint), not {keep}")
    now = time.time() if now is None else now
    planned: list[PruneReport] = []

    def select(reader: Reader) -> set[int]:
        total, bad = scan_log(reader)
        if bad:
            raise LogUnreadable("prune", bad)
        report, doomed = _plan(reader, total, keep, finished_older_than, now)
        planned[:] = [report]
        faults.point("during_prune")  # inside the transaction: a crash here removes nothing
        return doomed

    if dry_run:
        with store.reader() as r:
            select(r)
        planned[0].dry_run = True
    else:
        store.delete(select)
    return planned[0]


def _plan(reader: Reader, total: int, keep: int, older: float | None,
          now: float) -> tuple[PruneReport, set[int]]:
    """What to remove, deciding one run at a time (``run_walk``): memory holds one run's
    records and the seqs to remove, not the log. A record the run log does not list is
    not seen here, so it stays (``bide doctor`` reports it)."""
    report, doomed = PruneReport(), set()
    removed: Counter[str] = Counter()
    for run_id, entries in run_groups(reader):
        items = read_run(reader, run_id, entries).items
        raw_head = rebuild_tables(items).data[RUNS].get(run_id.encode())
        if raw_head is None:
            continue  # records of a run with no RunCreated: not ours to judge, leave them
        head = unpack_value(raw_head, RunHead, table=RUNS, key=run_id.encode())
        if older is not None and finished(head) \
                and head.updated_at < now - older:
            drop = {seq for seq, _, _ in items}
            report.runs_removed.append(run_id)
        else:
            kept = needed(items, keep)
            drop = {seq for seq, _, _ in items if seq not in kept}
            if drop:
                report.runs_trimmed[run_id] = len(drop)
        for seq, size, record in items:
            if seq in drop:
                removed[record.TYPE] += 1
                report.bytes += size
        doomed |= drop
    report.removed = dict(removed)
    report.kept = total - len(doomed)
    return report, doomed


def needed(items: list[tuple[int, int, Record]], keep: int) -> set[int]:
    """The seqs of one run's records that prune keeps (see ``prune``)."""
    kept = set()
    cps = [(seq, r) for seq, _, r in items if isinstance(r, Checkpoint)]
    last_lease = max((seq for seq, _, r in items if isinstance(r, LeaseAcquired)), default=-1)
    owners = {ext for _, _, r in items if (ext := owner(r)) is not None}
    for ext in owners:  # a record family of an index extension keeps by its own rule
        kept |= ext.retain(items, keep)
    for seq, _, r in items:
        if owner(r) is not None:
            continue
        if not isinstance(r, _PRUNABLE):
            kept.add(seq)
        elif isinstance(r, (LeaseAcquired, LeaseReleased)) and seq >= last_lease:
            kept.add(seq)
    by_seq = dict(cps)
    chosen = cps[-keep:]
    # a later checkpoint of a planned map reads its Sends in the planning checkpoint
    chosen += [(s, by_seq[s]) for s in sorted(referenced(cp for _, cp in chosen)) if s in by_seq]
    for seq, cp in chosen:
        base = seq if cp.full else cp.base
        for cseq, chained in cps:
            if base <= cseq <= seq:  # the base snapshot and every delta read on top of it
                kept.add(cseq)
                kept.update(chained.writes)
    if cps:
        last_seq, last = cps[-1]
        start = unfolded_from(last_seq, last)
        kept.update(seq for seq, _, r in items if isinstance(r, PendingWrite) and seq >= start)
    return kept


# -- stats ----------------------------------------------------------------------------
def stats(store: Store) -> dict[str, Any]:
    """Store size and map usage, records (count and bytes) by type, runs by status."""
    info = store.info()
    by_type: dict[str, dict[str, int]] = {}
    with store.reader() as r:
        for seq, raw in r.log():
            try:
                rtype = record_type(raw, key=seq)
            except RecordError:
                rtype = "(unreadable)"
            slot = by_type.setdefault(rtype, {"count": 0, "bytes": 0})
            slot["count"] += 1
            slot["bytes"] += len(raw)
        statuses = Counter(h.status for h in r.heads())
        in_doubt = sum(1 for i in r.intents() if i.status in IN_DOUBT)
        waiting = sum(1 for a in r.approvals() if a.decision is None)
    return {
        "home": str(store.home),
        "store": {**info, "map_used": info["used_bytes"] / info["map_size"]},
        "records": dict(sorted(by_type.items())),
        "total_records": sum(v["count"] for v in by_type.values()),
        "total_bytes": sum(v["bytes"] for v in by_type.values()),
        "runs": dict(sorted(statuses.items())),
        "total_runs": sum(statuses.values()),
        "intents_in_doubt": in_doubt,
        "approvals_waiting": waiting,
    }
