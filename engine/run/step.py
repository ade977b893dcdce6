"""What one superstep's tasks may use of their run: a small, frozen scope.

The executor builds a ``StepScope`` for each superstep and hands it to
``tasks`` and to every node's ``ctx``. They read the run's identity, state
and policy and commit under its fencing token through it; they cannot change
where the run stands (that is the executor's job, after the superstep folds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ...formats import Record
from ..storage.store import Reader, Store
from .flow import Flow
from .held import HeldOutcomes
from .lease_clock import LeaseClock
from .policy import Policy
from .task_threads import TaskThreads


@dataclass(frozen=True)
class StepScope:
    """The run's identity, state and policy during one superstep; commits are fenced."""

    store: Store
    flow: Flow
    policy: Policy
    run_id: str
    token: int
    superstep: int
    version: int
    state: Mapping[str, Any]
    clock: Callable[[], float]
    held: HeldOutcomes | None = None  # the run's tool outcomes waiting to ride a commit
    flows: Mapping[str, Flow] = field(default_factory=dict)  # what ctx.child may start
    trace: Any = None  # engine/run/tracing.py's StepSpan when the engine traces; else None
    threads: TaskThreads | None = None  # the run's task threads (None: a pool per superstep)
    lease: LeaseClock | None = None  # how long this worker's lease is known to be live

    def at(self, superstep: int, version: int, state: Mapping[str, Any], trace: Any
           ) -> StepScope:
        """This run's scope for another superstep.

        A copy of the fields, not ``__init__``: a scope is made every superstep,
        and a frozen dataclass's ``__init__`` sets each of its thirteen fields
        through ``object.__setattr__``.
        """
        scope = object.__new__(StepScope)
        fields = scope.__dict__
        fields.update(self.__dict__)
        fields["superstep"], fields["version"], fields["state"] = superstep, version, state
        fields["trace"] = trace
        return scope

    def commit(self, records: Sequence[Record], *, task: str | None = None) -> list[int]:
        """Commit ``records`` unless another worker has taken the run's lease since.

        ``task``'s held tool outcomes (every task's if None) ride in the same transaction.
        """
        if self.held is not None:
            return self.held.carry(records, task)
        return self.store.commit(records, fence=(self.run_id, self.token))

    def hold(self, task: str, record: Record) -> None:
        """Make a tool's outcome durable with ``task``'s next commit (or alone, soon)."""
        if self.held is not None:
            self.held.hold(task, record)
        else:
            self.commit([record])

    def reader(self) -> AbstractContextManager[Reader]:
        return self.store.reader()
