"""The lease a bide worker holds on the LangGraph thread it is advancing, for the code under it.

A watcher (``runner.py``) takes a thread's lease before it invokes the graph; the
saver's commits and the bide tools' intents of that thread are then fenced by its
token, and a tool is called only while the lease is provably live (the rule of
``ctx.tool``, engine/run/lease_clock.py). A context variable carries it: LangGraph
runs a step's tasks in threads and tasks of their own, each with a copy of the
context of the ``invoke`` that started them.

A thread its caller invokes directly holds no lease: nothing is fenced, as with any
checkpointer (one process per thread at a time is the caller's to keep).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..run.lease_clock import LeaseClock


@dataclass(frozen=True)
class Held:
    """A worker's lease on one thread: its token and its trusted deadline."""

    run_id: str
    token: int
    lease: LeaseClock


_HELD: contextvars.ContextVar[Held | None] = contextvars.ContextVar("bide_lg_held", default=None)


def held_for(thread: str) -> Held | None:
    """The lease this context holds on ``thread``, if any."""
    held = _HELD.get()
    return held if held is not None and held.run_id == thread else None


def fence_for(thread: str) -> tuple[str, int] | None:
    """The ``fence=`` a commit about ``thread`` must carry (None without a lease)."""
    held = held_for(thread)
    return None if held is None else (held.run_id, held.token)


@contextmanager
def holding(held: Held) -> Iterator[None]:
    """Run the block (the graph's invoke) under ``held``."""
    reset = _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(reset)
