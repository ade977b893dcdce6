"""Overheads that came out below zero: timing noise, printed as ``~0``, never negative.

An overhead is a time over a baseline (the same flow with no persistence, a bare
LMDB loop). When the durable run was no slower than the baseline, within the
noise of a loaded machine, the difference is below zero; a negative cost means
nothing, so the tables print ``~0`` (the JSON keeps the measured value).
"""

from __future__ import annotations

NOTE = "~0: measured below zero, i.e. within timing noise of the baseline"


class Overhead(float):
    """A table cell holding an overhead (``report.table`` prints it through ``text``)."""


def text(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if value < 0:
        return "~0"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def overhead(value: float | None) -> Overhead | None:
    return None if value is None else Overhead(value)
