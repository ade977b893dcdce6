"""What callers see of a run: ``Run`` and ``CheckpointInfo``, built from the store; run ids."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...formats import Checkpoint, Record, RunCreated
from ..base.vocabulary import Status
from ..storage.index import RunHead
from .flow import Flow

MAX_RUN_ID = 128


def check_run_id(run_id: Any) -> str:
    """``run_id`` if it can name a run (a key and a file name part); else ValueError."""
    if not isinstance(run_id, str) or not run_id or len(run_id) > MAX_RUN_ID:
        raise ValueError(f"run_id must be a non-empty string of at most {MAX_RUN_ID} "
                         f"characters, not {run_id!r}")
    if any(c in run_id for c in "\x00/\\") or not run_id.isprintable():
        raise ValueError(f"run_id {run_id!r} may not contain '/', '\\', NUL or control chars")
    return run_id


def run_records(flow: Flow, run_id: str, state: dict[str, Any], policy: dict[str, Any],
                status: str, now: float) -> list[Record]:
    """What a new run's first commit holds: its creation and its first checkpoint (a
    lease is added by whoever runs it at once)."""
    fingerprint = flow.fingerprint()  # one digest for both (it walks every node)
    return [
        RunCreated(run_id=run_id, flow=flow.name, fingerprint=fingerprint, input=state,
                   policy=policy, status=status, at=now),
        Checkpoint(run_id=run_id, version=0, superstep=0, status=status, full=True,
                   state=state, next=flow.start_nodes(), flow=flow.name,
                   fingerprint=fingerprint, at=now),
    ]


class Run:
    """A snapshot of a run. ``state`` is read from the store on first access."""

    def __init__(self, head: RunHead, load_state: Callable[[], dict[str, Any]]) -> None:
        self._head = head
        self._load_state = load_state
        self._state: dict[str, Any] | None = None

    run_id = property(lambda self: self._head.run_id)
    flow = property(lambda self: self._head.flow)
    status = property(lambda self: Status(self._head.status))
    state_version = property(lambda self: self._head.state_version)
    superstep = property(lambda self: self._head.superstep)
    waiting = property(lambda self: self._head.waiting)
    error = property(lambda self: self._head.error)
    reason = property(lambda self: self._head.reason)
    committed = property(lambda self: list(self._head.committed))
    policy = property(lambda self: dict(self._head.policy))
    created_at = property(lambda self: self._head.created_at)
    updated_at = property(lambda self: self._head.updated_at)
    parent = property(lambda self: self._head.parent)

    @property
    def state(self) -> dict[str, Any]:
        if self._state is None:
            self._state = self._load_state()
        return self._state

    @property
    def head(self) -> RunHead:
        return self._head

    def __repr__(self) -> str:
        return (f"Run(run_id={self.run_id!r}, status={self.status.value}, "
                f"state_version={self.state_version})")


@dataclass(frozen=True)
class CheckpointInfo:
    """One committed checkpoint, as ``engine.checkpoints(run_id)`` lists it."""

    seq: int
    version: int
    superstep: int
    status: str
    committed: list[str]
    next: list[str]
    full: bool
    bytes: int
    at: float
