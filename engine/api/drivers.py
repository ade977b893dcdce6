"""What advances runs that are not bide flows: the seam a LangGraph thread's graph plugs into.

The engine leases, fences and recovers every run alike; for a run of ``flow`` (a
LangGraph thread) it hands the lease to a driver instead of running a flow. The
driver lives in a layer above (``engine/langgraph/runner.py``) and is passed down
(``Engine.drive``), so nothing here imports LangGraph.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..run.lease_clock import Grant


class ThreadDriver(Protocol):
    """Starts and advances the runs of one foreign flow."""

    flow: str  # the flow name its runs carry ("langgraph")

    def names(self) -> list[str]:
        """The names ``Engine.submit``/``start`` (and ``POST /runs``) take for new runs."""
        ...

    def created(self, name: str, run_id: str, input: dict[str, Any],  # noqa: A002
                status: str, now: float) -> list[Any]:
        """The records that create a run of graph ``name`` (committed by the engine)."""
        ...

    def advance(self, run_id: str, grant: Grant) -> None:
        """Advance the run this worker holds by ``grant`` until it stops; release the lease."""
        ...

    def state(self, run_id: str, version: int | None = None) -> dict[str, Any]:
        """The thread's state (its channel values) at its latest checkpoint or ``version``."""
        ...
