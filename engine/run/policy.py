"""Checkpoint policy: the knobs that trade write amplification against redo."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

TOOL_OUTCOMES = ("at_return", "with_next_commit")


@dataclass(frozen=True)
class Policy:
    """How a run is made durable.

    Args:
        checkpoint_every: commit a checkpoint every superstep (1), every N
            supersteps, or only when the run stops (``"exit"``: done, paused, failed).
        pending_writes: commit each task's output as it finishes, so a crash
            or a failing sibling never redoes a finished task.
        snapshot: ``"delta"`` stores only what changed (and references the
            pending writes it absorbed); ``"full"`` stores the whole state each time.
        full_every: with deltas, a full snapshot after exactly this many deltas:
            a hard bound on the work to read a state, at the price of re-storing
            the whole state every ``full_every`` checkpoints (O(n^2/K) bytes on a
            state that grows). ``None`` (the default) spaces full snapshots
            geometrically instead (after 64 deltas, then at versions 256, 1024, ...),
            so the bytes a run writes stay O(run); the newest state is read from the
            latest-state index, and reading an older version replays up to about
            three quarters of the run's deltas.
        tool_outcomes: when a tool call's outcome is committed. ``"at_return"`` (the
            default): before ``ctx.tool`` returns, so a crash at any moment after the
            call returned replays the recorded result (under ``durable``, a power cut
            too); a tool step costs two commits (the prepare, the outcome; the step's
            checkpoint rides in the next step's prepare). ``"with_next_commit"``
            trades that for one commit per tool step: the outcome is held in memory
            (at most 2 ms, ``held.HOLD_BOUND``) to ride in the task's next commit, and
            a crash in that window leaves the call *outcome unknown* (reconciled, or
            decided by a person) even though it completed.
    """

    checkpoint_every: int | str = 1
    pending_writes: bool = True
    snapshot: str = "delta"
    full_every: int | None = None
    tool_outcomes: str = "at_return"

    def __post_init__(self) -> None:
        every = self.checkpoint_every
        if not (every == "exit" or (isinstance(every, int) and not isinstance(every, bool)
                                    and every >= 1)):
            raise ValueError(f"checkpoint_every must be an int >= 1 or 'exit', not {every!r}")
        if self.snapshot not in ("delta", "full"):
            raise ValueError(f"snapshot must be 'delta' or 'full', not {self.snapshot!r}")
        if self.full_every is not None and (not isinstance(self.full_every, int)
                                            or isinstance(self.full_every, bool)
                                            or self.full_every < 1):
            raise ValueError(f"full_every must be an int >= 1 or None, not {self.full_every!r}")
        if self.tool_outcomes not in TOOL_OUTCOMES:
            raise ValueError(f"tool_outcomes must be one of {', '.join(map(repr, TOOL_OUTCOMES))}"
                             f", not {self.tool_outcomes!r}")
        if not isinstance(self.pending_writes, bool):
            raise ValueError(f"pending_writes must be True or False, not {self.pending_writes!r}")

    def to_dict(self) -> dict[str, Any]:
        """What a run's ``RunCreated`` stores: the default ``tool_outcomes`` is left out, so
        runs record the bytes they always did (and an older bide reads them)."""
        out = asdict(self)
        if out["tool_outcomes"] == "at_return":
            del out["tool_outcomes"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Policy:
        known = {k: data[k] for k in ("checkpoint_every", "pending_writes", "snapshot",
                                      "full_every", "tool_outcomes") if k in data}
        return cls(**known)

    def due(self, steps_since_checkpoint: int) -> bool:
        """Is a checkpoint due after this many folded supersteps?"""
        every = self.checkpoint_every
        return every != "exit" and steps_since_checkpoint >= every  # type: ignore[operator]
