"""Upgrades of old record versions, applied on read.

``MIGRATIONS[(type, v)]`` turns the decoded mapping of version ``v`` into the
mapping of version ``v + 1``. Reading a version-``v`` record walks the chain up
to the current ``VERSION``; nothing stored is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .records import compact_digest, idempotency_key, intent_key, node_of, split_intent_key

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


def _intent_prepared_v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    """v2 derives key, node and idempotency key; keeps a v1 value derivation would change."""
    new = {k: v for k, v in old.items()
           if k not in ("key", "node", "idempotency_key", "args_digest")}
    digest = compact_digest(old.get("args_digest", ""))
    new["digest"] = b"" if digest is None else digest
    task, index = old.get("task", ""), old.get("index", 0)
    key = intent_key(task, index)
    derived = {"key": key, "node": node_of(task),
               "idempotency_key": idempotency_key(old.get("run_id", ""), old.get("key", key))}
    fixups = {name: old[name] for name in derived if name in old and old[name] != derived[name]}
    if digest is None and "args_digest" in old:
        fixups["args_digest"] = old["args_digest"]
    if fixups:
        new["fixups"] = fixups
    return new


def _intent_completed_v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    """v2 names the intent by task and index; a key not of that form is kept as it was."""
    new = {k: v for k, v in old.items() if k != "key"}
    key = old.get("key", "")
    parts = split_intent_key(key)
    new["task"], new["index"] = parts if parts is not None else (key, -1)
    if parts is None:
        new["fixups"] = {"key": key}
    return new


def _same_fields(old: dict[str, Any]) -> dict[str, Any]:
    """v2 only changed the encoding (a map became an array): the fields are the same."""
    return old


# A version-2 checkpoint's fields, in its array's order (trailing defaults omitted).
_CHECKPOINT_V2 = ("run_id", "version", "superstep", "status", "full", "state", "base", "writes",
                  "deferred", "ops", "committed", "next", "counts", "seen", "waiting",
                  "scan_from", "flow", "fingerprint", "at")


def _no_sends(old: dict[str, Any] | list[Any]) -> dict[str, Any]:
    """v3 added ``sends`` (a map's tasks); a v2 checkpoint planned none.

    A v2 body is an array (one upgraded from v1 is already a mapping).
    """
    if isinstance(old, dict):
        return old
    return dict(zip(_CHECKPOINT_V2, old, strict=False))


_CHECKPOINT_V3 = (*_CHECKPOINT_V2, "sends")


def _sends_in_place(old: dict[str, Any] | list[Any]) -> dict[str, Any]:
    """v4 added ``sends_at`` (a reference to the planning checkpoint's Sends); a v3
    checkpoint stores its own. A v3 body is an array (an upgraded one a mapping)."""
    if isinstance(old, dict):
        return old
    return dict(zip(_CHECKPOINT_V3, old, strict=False))


_CHECKPOINT_V4 = (*_CHECKPOINT_V3, "sends_at")
_INTENT_PREPARED_V2 = ("run_id", "task", "index", "tool", "digest", "attempt", "args_preview",
                       "at", "fixups")
_INTENT_COMPLETED_V2 = ("run_id", "task", "index", "attempt", "ok", "result", "error",
                        "error_type", "via", "at", "fixups")


def _named(fields: tuple[str, ...]) -> Migration:
    """The next version only reordered the array (and writes it in a short frame):
    an array body of the old order becomes a mapping (an upgraded one already is)."""
    def migrate(old: dict[str, Any] | list[Any]) -> dict[str, Any]:
        if isinstance(old, dict):
            return old
        return dict(zip(fields, old, strict=False))
    return migrate


MIGRATIONS: dict[tuple[str, int], Migration] = {
    ("status_changed", 1): _status_changed_v1_to_v2,
    ("intent_prepared", 1): _intent_prepared_v1_to_v2,
    ("intent_completed", 1): _intent_completed_v1_to_v2,
    ("checkpoint", 1): _same_fields,
    ("checkpoint", 2): _no_sends,
    ("checkpoint", 3): _sends_in_place,
    ("checkpoint", 4): _named(_CHECKPOINT_V4),
    ("intent_prepared", 2): _named(_INTENT_PREPARED_V2),
    ("intent_completed", 2): _named(_INTENT_COMPLETED_V2),
    ("pending_write", 1): _same_fields,
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
