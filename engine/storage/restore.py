"""Records put back at their own seqs: the one rule every backend's ``Store.restore`` follows.

``bide copy`` moves a home from one store to another record by record. Seqs are
kept, not renumbered: records name other records by seq (a delta checkpoint's
``base``, its absorbed ``writes`` and its ``scan_from``, a LangGraph blob's ``base``;
the derived tables hold seqs everywhere), so a renumbered
copy would have to rewrite those records, and the copy would no longer hold the
same bytes. The derived tables are then what ``index.apply`` makes of the same
records at the same seqs: the destination's indexes equal the source's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...formats import decode
from .index import Tables, apply

Row = tuple[int, bytes]  # (seq, framed record bytes), as ``Reader.log`` yields them
COPY_MARKER = "copy_in_progress"  # the store's meta entry while a copy writes into it


def restore_rows(tables: Tables, last: int, rows: Sequence[Row],
                 put_log: Callable[[Sequence[Row]], None]) -> None:
    """Append ``rows`` to the log (``put_log``) and fold them, inside the caller's transaction.

    Args:
        last: the store's last seq; every row's seq must be above it, in ascending order
            (a restore only appends, so nothing stored is ever overwritten).

    Raises:
        ValueError: a seq out of order (checked before anything is written).
        CorruptRecord / UnknownRecordType / NewerSchema: a row does not decode.
    """
    for seq, _ in rows:
        if seq <= last:
            raise ValueError(f"cannot restore seq {seq}: the store already reaches seq {last} "
                             "(a restore appends above the last seq, in order)")
        last = seq
    records = [decode(raw, key=seq) for seq, raw in rows]  # all decode before any write
    put_log(rows)  # first: a checkpoint's fold reads the pending writes it absorbed
    for (seq, raw), record in zip(rows, records, strict=True):
        apply(tables, seq, len(raw), record)
