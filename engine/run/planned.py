"""Where a checkpoint's planned Sends are: in itself, or in the checkpoint that planned them.

The checkpoint that plans a map stores its Sends (``Checkpoint.sends``). Every
later checkpoint of the same superstep (a pause, an interruption, a failure)
runs the same Sends: it stores only ``sends_at``, the seq of that planning
checkpoint, so a map whose N items pause one after another writes O(N) bytes,
not N copies of N args. Seqs are kept by ``bide copy`` and restores, prune keeps
a referenced checkpoint (``referenced``), and ``bide doctor`` reports a
reference that leads nowhere (``dangling``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...formats import Checkpoint, CorruptRecord, Record
from ..storage.store import Reader
from .send import next_labels

Sends = list[tuple[str, dict[str, Any]]]


def holder(seq: int, cp: Checkpoint) -> int:
    """The seq of the checkpoint that stores ``cp``'s Sends (-1: it plans none)."""
    if cp.sends_at >= 0:
        return cp.sends_at
    return seq if cp.sends else -1


def sends_of(reader: Reader, seq: int, cp: Checkpoint) -> Sends:
    """The Sends checkpoint ``cp`` (at ``seq``) runs next, read through its reference.

    Raises:
        CorruptRecord: the reference leads to no planning checkpoint of the same
            run and superstep (``bide doctor`` names it).
    """
    if cp.sends_at < 0:
        return [(node, dict(arg)) for node, arg in cp.sends]
    try:
        planner: Record | None = reader.record(cp.sends_at)
    except KeyError:
        planner = None
    why = _mismatch(cp, planner)
    if why is not None:
        raise CorruptRecord(seq, why)
    assert isinstance(planner, Checkpoint)
    return [(node, dict(arg)) for node, arg in planner.sends]


def next_of(reader: Reader, seq: int, cp: Checkpoint) -> list[str]:
    """What ``cp`` runs next, for people (``search[0..11]``); a broken reference says so."""
    try:
        return next_labels(cp.next, sends_of(reader, seq, cp))
    except CorruptRecord:  # shown, not raised: a listing still lists the rest
        return [*cp.next, f"the Sends of #{cp.sends_at} (unreadable: see bide doctor)"]


def _mismatch(cp: Checkpoint, planner: Record | None) -> str | None:
    """Why ``planner`` cannot be what ``cp.sends_at`` refers to, or None if it can."""
    where = f"its Sends are those of seq {cp.sends_at}"
    if planner is None:
        return f"{where}, which is gone (`bide doctor` reports it)"
    if not isinstance(planner, Checkpoint) or planner.run_id != cp.run_id:
        return f"{where}, which is not a checkpoint of run {cp.run_id!r}"
    if planner.superstep != cp.superstep or planner.sends_at >= 0 or not planner.sends:
        return (f"{where}, which does not plan the Sends of superstep {cp.superstep} "
                f"(it is step {planner.superstep} with {len(planner.sends)} Sends)")
    return None


def referenced(kept: Iterable[Checkpoint]) -> set[int]:
    """The seqs of the planning checkpoints these checkpoints refer to (prune keeps them)."""
    return {cp.sends_at for cp in kept if cp.sends_at >= 0}


def dangling(records: Iterable[tuple[int, Record]]) -> list[tuple[int, str]]:
    """``(seq, why)`` of every checkpoint whose Sends reference leads nowhere.

    ``records`` are the whole log, every record readable (a reference to one
    that cannot be read would look gone: the doctor reports that record instead).
    """
    by_seq = dict(records)
    found = []
    for seq, record in by_seq.items():
        if isinstance(record, Checkpoint) and record.sends_at >= 0:
            why = _mismatch(record, by_seq.get(record.sends_at))
            if why is not None:
                found.append((seq, f"checkpoint of run {record.run_id!r}: {why}"))
    return found
