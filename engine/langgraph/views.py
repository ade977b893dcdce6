"""What ``bide checkpoints``, ``state`` and ``export`` show of a LangGraph thread.

A thread's checkpoints and channel values are LangGraph's, serialized by its
serializer; bide's own read side (``engine/read/inspect.py``) does not import
LangGraph, so it refuses them (``LangGraphThread``) and the CLI comes here when
the ``langgraph`` extra is installed. A checkpoint's ``version`` is its step + 1,
as the thread's ``state_version`` in ``bide runs``. Values are shown as JSON: a
message as its fields (type, content, tool calls), anything else bide cannot show
as its ``repr``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...formats import check_serializable
from ...formats.errors import NotSerializable
from ..base.errors import UnknownVersion
from ..read import inspect
from .store import Stored, Threads

try:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
except ModuleNotFoundError:  # pragma: no cover - the package imports langgraph before this
    JsonPlusSerializer = None  # type: ignore[assignment, misc]


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: messages and models as their fields."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return plain(dump(mode="json", exclude_none=True))
        except Exception:  # a model that cannot dump itself: shown by repr below
            pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    try:
        check_serializable(value, "a value")
        return value
    except NotSerializable:
        return repr(value)[:2000]


def _root(threads: Threads, thread: str) -> list[Stored]:
    return list(threads.load(threads.keys(thread, "")))


def thread_checkpoints(store: Any, thread: str) -> list[dict[str, Any]]:
    """The thread's root checkpoints, newest first: id, version, step, source, writes."""
    rows = []
    for stored in _root(Threads(store), thread):
        rec = stored.record
        channels = {ch for _task, ch, _v in stored.writes}
        rows.append({"checkpoint_id": rec.checkpoint_id, "version": rec.step + 1,
                     "step": rec.step, "source": rec.source, "parent_id": rec.parent_id,
                     "at": rec.at, "writes": len(stored.writes),
                     "updated": list(rec.updated or []),
                     "interrupted": "__interrupt__" in channels,
                     "error": "__error__" in channels})
    return rows


def thread_state(store: Any, thread: str, version: int | None = None,
          serde: Any = None) -> tuple[int, dict[str, Any]]:
    """``(version, channel values)`` at the latest root checkpoint, or at ``version``.

    Raises:
        UnknownVersion: no checkpoint of the thread has that version.
    """
    serde = serde or JsonPlusSerializer()
    found = _root(Threads(store), thread)
    pick = found[0] if version is None and found else next(
        (s for s in found if s.record.step + 1 == version), None)
    if pick is None:
        raise UnknownVersion(thread, -1 if version is None else version,
                             sorted(s.record.step + 1 for s in found))
    values = {ch: plain(serde.loads_typed(v)) for ch, v in pick.values.items()
              if not ch.startswith(("branch:", "__"))}
    return pick.record.step + 1, values


def thread_export(engine: Any, thread: str) -> dict[str, Any]:
    """Everything stored about a thread, as one JSON document (``bide export``)."""
    snapshot = engine.show(thread)
    try:
        version, values = thread_state(engine.store, thread)
    except UnknownVersion:
        version, values = 0, {}
    with engine.store.reader() as r:
        approvals = [inspect.plain(a) for a in r.approvals() if a.run_id == thread]
    doc = inspect.export_document(snapshot, {"version": version, "values": values},
                                  thread_checkpoints(engine.store, thread),
                                  engine.intent_rows(thread), approvals,
                                  inspect.log(engine, thread))
    doc["langgraph"] = True
    return doc
