"""What ``follow`` yields: a run's records as typed events, in the shape ``bide log`` shows.

An event is read by ``inspect.log_entry``, the one function that turns a stored
record into a log line (the summary, the JSON-ready record), so ``bide log --json``
and ``bide log --follow --json`` print the same objects for the same records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...formats import Record
from ..storage.store import Reader
from .inspect import log_entry


@dataclass(frozen=True)
class Event:
    """One record of a run, as it was committed.

    ``seq`` orders a run's events and is the cursor ``follow(since=...)`` resumes
    after; ``kind`` is the record's type (``"checkpoint"``, ``"pending_write"``,
    ``"intent_prepared"``, ``"status_changed"``...); ``record`` the typed record
    itself (``bide.formats``), None when it cannot be read (``error`` says why).
    """

    run_id: str
    seq: int
    kind: str
    at: float | None
    summary: str
    node: str | None = None  # the node a pending write, intent, approval or status names
    task: str | None = None  # the task identity of a pending write or intent
    status: str | None = None  # the run's status a checkpoint or status change records
    record: Record | None = None
    error: str | None = None
    entry: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data: the same object ``bide log --json`` prints."""
        return dict(self.entry)


def read_event(reader: Reader, run_id: str, seq: int, kind: str) -> Event:
    """The event of the record at ``seq`` (one of ``run_id``'s) in ``reader``'s snapshot."""
    entry, record = log_entry(reader, seq, kind)
    return Event(run_id=run_id, seq=seq, kind=kind, at=entry["at"], summary=entry["summary"],
                 node=getattr(record, "node", None), task=getattr(record, "task", None),
                 status=getattr(record, "status", None), record=record,
                 error=entry.get("error"), entry=entry)
