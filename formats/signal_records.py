"""Records of signals (``engine.signal`` / ``ctx.wait_for``): a durable per-run queue.

A signal is kept as ``SignalSent`` in the run's log whether or not a node waits for
it yet; a wait takes the oldest unconsumed signal of its name and says so with
``SignalConsumed``, keyed by the waiting call (task and index), so a node that runs
again finds the signal it already took. ``SignalAwaited`` rides in the pause's
checkpoint commit and fixes a wait's deadline across re-runs.

Evolution rules are those of ``formats/records.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .records import Record, register


class SignalSent(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A signal ``name`` with ``data`` arrived for a run (from the API, the CLI or a file:
    ``file`` and ``content_digest`` name the inbox file, so a file taken twice is kept once)."""

    TYPE: ClassVar[str] = "signal_sent"
    VALUE_FIELDS: ClassVar[tuple[str, ...]] = ("data",)
    run_id: str
    name: str
    data: Any = None
    by: str | None = None
    file: str | None = None
    content_digest: str | None = None
    at: float = 0.0


class SignalAwaited(Record, frozen=True, kw_only=True, omit_defaults=True):
    """A node's ``wait_for`` (call ``index`` of ``task``) paused; ``until`` is its deadline."""

    TYPE: ClassVar[str] = "signal_awaited"
    run_id: str
    task: str
    index: int
    name: str
    until: float | None = None
    at: float = 0.0


class SignalConsumed(Record, frozen=True, kw_only=True, omit_defaults=True):
    """The wait (``task``, ``index``) took the signal at log seq ``signal``, or timed out
    (``signal`` -1: the call returned its default)."""

    TYPE: ClassVar[str] = "signal_consumed"
    run_id: str
    task: str
    index: int
    name: str
    signal: int = -1
    at: float = 0.0


SIGNAL_RECORDS = (SignalSent, SignalAwaited, SignalConsumed)
for _cls in SIGNAL_RECORDS:
    register(_cls)
