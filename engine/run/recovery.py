"""What one ``Engine.recover`` call did, run by run: the ``RecoverReport``.

``recover`` used to return only the runs it advanced and leave the rest on
``Engine.skipped``, and the CLI diffed the runs before and after to find the
ones given up on. The report says all of it in one typed value, and it is
still the list of advanced runs, so callers of the old return value go on working.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .runs import Run

RecoverOutcome = Literal["advanced", "given_up", "blocked", "skipped"]


@dataclass(frozen=True)
class RecoveredRun:
    """One run ``recover`` looked at, and what became of it.

    ``outcome`` is ``advanced`` (resumed: ``status`` is where it stopped, ``reason`` its
    error if any), ``given_up`` (FAILED: orphaned too long, or its workers kept dying),
    ``blocked`` (its own problem, recorded on the run; ``recorded_now`` is False when an
    earlier call recorded it and nothing changed since) or ``skipped`` (another worker
    has it). ``was`` is its status when ``recover`` found it.
    """

    run_id: str
    outcome: RecoverOutcome
    was: str
    status: str
    reason: str | None = None
    recorded_now: bool = False


class RecoverReport(list[Run]):
    """The runs one ``recover`` call advanced (the list itself), and every other run it
    looked at in ``entries``: newest first, like ``Engine.runs``."""

    def __init__(self, advanced: Iterable[Run] = (), entries: Iterable[RecoveredRun] = ()
                 ) -> None:
        super().__init__(advanced)
        self.entries: tuple[RecoveredRun, ...] = tuple(entries)

    def _of(self, outcome: RecoverOutcome) -> tuple[RecoveredRun, ...]:
        return tuple(e for e in self.entries if e.outcome == outcome)

    @property
    def advanced(self) -> list[Run]:
        return list(self)

    @property
    def given_up(self) -> tuple[RecoveredRun, ...]:
        """Runs this call FAILED instead of resuming (expired, or too many dead workers)."""
        return self._of("given_up")

    @property
    def blocked(self) -> tuple[RecoveredRun, ...]:
        """Runs whose own problem (a renamed node, a corrupt record...) stops them."""
        return self._of("blocked")

    @property
    def skipped(self) -> tuple[RecoveredRun, ...]:
        """Runs another worker holds or took meanwhile: theirs, not a problem."""
        return self._of("skipped")

    def __repr__(self) -> str:
        return f"RecoverReport({list(self)!r}, entries={self.entries!r})"
