"""Upgrades of old record versions, applied on read.

``MIGRATIONS[(type, v)]`` turns the decoded mapping of version ``v`` into the
mapping of version ``v + 1``. Reading a version-``v`` record walks the chain up
to the current ``VERSION``; nothing stored is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Migration = Callable[[dict[str, Any]], dict[str, Any]]


def _status_changed_v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    """v1 kept one free-text ``message``; v2 has ``reason`` (and ``error`` for failures)."""
    new = dict(old)
    message = new.pop("message", None)
    if new.get("status") == "FAILED":
        new.setdefault("error", message)
    else:
        new.setdefault("reason", message)
    return new


MIGRATIONS: dict[tuple[str, int], Migration] = {
    ("status_changed", 1): _status_changed_v1_to_v2,
}


def upgrade(rtype: str, version: int, target: int, data: dict[str, Any]) -> dict[str, Any]:
    """Apply each migration from ``version`` up to ``target``.

    Raises:
        KeyError: a step of the chain is missing (a bug in bide, not in the data).
    """
    while version < target:
        data = MIGRATIONS[(rtype, version)](data)
        version += 1
    return data
