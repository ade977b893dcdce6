"""What the counted-cost tests share (test_fanout_cost.py, test_superstep_cost.py,
test_kept_decodes.py): a workload run to its expected end, a spy that notes each call of
what it wraps, and the latest-state tables over a dict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import bide
import pytest
from bide.bench.kit.workloads import Workload

T = TypeVar("T")


def run_workload(engine: bide.Engine, w: Workload, run_id: str,
                 flow: bide.Flow | None = None) -> bide.Run:
    """Run ``w`` (its flow, or ``flow`` made from it) on ``engine``; it must end DONE
    with the workload's expected state."""
    flow = w.flow() if flow is None else flow
    engine.register(flow)
    run = engine.start(flow.name, w.initial(), run_id=run_id)
    assert run.status == bide.Status.DONE and run.state == w.expected()
    return run


def spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str,
        note: Callable[..., T]) -> list[T]:
    """Wrap ``owner.<name>`` for this test: each call appends ``note(*args, **kwargs)``
    to the list returned, then runs the real one (a method's ``self`` comes first)."""
    noted: list[T] = []
    real = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        noted.append(note(*args, **kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapped)
    return noted


class DictTables:
    """``latest.Tables`` over a dict, recording every read."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, bytes], bytes] = {}
        self.reads: list[tuple[str, bytes]] = []

    def get(self, table: str, key: bytes) -> bytes | None:
        self.reads.append((table, key))
        return self.data.get((table, key))

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.data[table, key] = value

    def delete(self, table: str, key: bytes) -> None:
        self.data.pop((table, key), None)

    def record(self, seq: int) -> Any:
        raise KeyError(seq)
