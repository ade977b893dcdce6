"""``POST /runs`` made idempotent on ``run_id``: the same flow and input again is the run
already there; other ones under the same id are a conflict (``RunExists``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...formats import RunCreated
from ..base.errors import RunExists, UnknownRun
from ..base.vocabulary import LANGGRAPH, Status

if TYPE_CHECKING:
    from ..api.runtime import Engine


def submit_once(engine: Engine, flow: str, data: dict[str, Any],
                run_id: str | None) -> tuple[dict[str, Any], bool]:
    """Submit a PENDING run, unless ``run_id`` names one of the same flow and input.

    Returns:
        ``{run_id, flow, status}``, and True if the run was created now.

    Raises:
        RunExists: ``run_id`` names a run of another flow or input. UnknownFlow,
        NotSerializable: as ``Engine.submit``.
    """
    if run_id is not None and (found := _created(engine, run_id)) is not None:
        return _same(engine, found, flow, data), False
    try:
        new = engine.submit(flow, input=data, run_id=run_id)
    except RunExists:  # submitted by another request meanwhile
        assert run_id is not None  # a generated id is new
        found = _created(engine, run_id)
        if found is None:
            raise
        return _same(engine, found, flow, data), False
    return {"run_id": new, "flow": flow, "status": Status.PENDING}, True


def _created(engine: Engine, run_id: str) -> RunCreated | None:
    """The record that created the run, or None when there is no such run."""
    with engine.store.reader() as r:
        if r.head(run_id) is None:
            return None
        for seq, _kind in r.run_entries(run_id):
            record = r.record(seq)
            if isinstance(record, RunCreated):
                return record
    return None


def _same(engine: Engine, created: RunCreated, flow: str, data: dict[str, Any]
          ) -> dict[str, Any]:
    """The existing run's row if it was created with ``flow`` and ``data``; else RunExists."""
    same = (created.flow, created.input) in ((flow, data),  # a LangGraph thread's, or a flow's
                                             (LANGGRAPH, {"graph": flow, "input": data}))
    if not same:
        raise RunExists(created.run_id)
    try:
        status = engine.get(created.run_id).status
    except UnknownRun:  # pruned this instant: it was there, with this input
        status = Status.DONE
    return {"run_id": created.run_id, "flow": flow, "status": status}
