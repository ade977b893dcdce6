"""What a decider sees of a tool call in doubt: its arguments, not only their digest.

A reconciliation request carries ``args_preview`` (the text ``bide log`` shows of
the call) in its payload and in the run's ``waiting``. A request made before it
did has only the digest: the preview is read back from the call's
``IntentPrepared`` record, so ``bide pending`` and ``bide show`` show it either way.
"""

from __future__ import annotations

from typing import Any

from ...formats import IntentPrepared, RecordError
from ..base.vocabulary import Waiting
from ..storage.index import ApprovalState
from ..storage.store import Reader


def request_preview(reader: Reader, req: ApprovalState) -> str | None:
    """The arguments of the call a reconciliation request asks about (None: not one)."""
    if req.kind != Waiting.RECONCILIATION or req.intent is None:
        return None
    payload = req.payload if isinstance(req.payload, dict) else {}
    return payload.get("args_preview") or call_preview(reader, req.run_id, req.intent)


def waiting_with_preview(reader: Reader, run_id: str,
                         waiting: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run's ``waiting``, with ``args_preview`` when it waits on a call in doubt."""
    if not waiting or waiting.get("type") != Waiting.RECONCILIATION \
            or waiting.get("args_preview") or not waiting.get("intent"):
        return waiting
    return {**waiting, "args_preview": call_preview(reader, run_id, waiting["intent"])}


def call_preview(reader: Reader, run_id: str, intent: str) -> str | None:
    """The ``args_preview`` of the call's latest attempt (None: none recorded or readable)."""
    found = None
    for seq, rtype in reader.run_entries(run_id):
        if rtype != IntentPrepared.TYPE:
            continue
        try:
            record = reader.record(seq)
        except (RecordError, KeyError):  # a damaged record: doctor names it; show the rest
            continue
        if isinstance(record, IntentPrepared) and record.key == intent:
            found = record.args_preview or found
    return found
