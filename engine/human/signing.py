"""Signed decisions, required per home: a marker says so to every process that opens it.

A home opened for writing with an approval key is marked: from then on every
process that opens it, with or without a key, refuses decision files that are
unsigned or signed with another key, and ``bide approve`` signs with the key
(or, on a PostgreSQL home, must hold it to record a decision). The marker holds
a key id (an HMAC of a fixed label), never the key.

Where the marker lives is where every process of the home sees it: the file
``<home>/signing.json`` for a home that is a directory; the row ``signing`` of
``bide.meta`` for a store many hosts share (PostgreSQL), whose local directory
is one host's only, so a marker there would bind that host alone. The marker is
written once (the first key wins; a second key is refused). To stop requiring
signatures, remove the file or the row (the home's owner decides that, not bide).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..base.errors import ApprovalKeyError
from ..run.approvals import atomic_write_json

MARKER = "signing.json"
SETTING = "signing"  # the marker's key among a shared store's settings
NOTE = ("every process that opens this home refuses unsigned decision files; pass the same "
        "key with --approval-key-file (bide watch, bide approve)")


@runtime_checkable
class SharedSettings(Protocol):
    """A store that hosts share keeps the home's settings itself (``PostgresStore``)."""

    home: str

    def setting(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        ...

    def set_once(self, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is there; return the one stored."""
        ...


@dataclass(frozen=True)
class Marker:
    """Where one home says whether decisions must be signed (see the module docstring)."""

    home: Path
    store: object = None

    @property
    def shared(self) -> SharedSettings | None:
        return self.store if isinstance(self.store, SharedSettings) else None

    def read(self) -> str | None:
        if self.shared is not None:
            return self.shared.setting(SETTING)
        try:
            return (self.home / MARKER).read_text()
        except FileNotFoundError:
            return None

    def write_once(self, body: dict[str, Any]) -> str:
        """Write the marker unless one exists; the text of the one that is there now."""
        text = json.dumps(body, sort_keys=True)
        if self.shared is not None:
            return self.shared.set_once(SETTING, text)
        found = self.read()
        if found is not None:
            return found
        atomic_write_json(self.home / MARKER, body)
        return text

    def refuse(self, why: str) -> ApprovalKeyError:
        if self.shared is not None:
            return ApprovalKeyError(self.shared.home, why,
                                    marker=f"the row {SETTING!r} of its bide.meta table")
        return ApprovalKeyError(self.home, why)


def marker(home: Path, store: object = None) -> Marker:
    """The marker of the home at ``home`` whose records ``store`` keeps."""
    return Marker(home, store)


def hmac_hex(key: bytes, data: bytes) -> str:
    """The signature of a decision or signal file: hex HMAC-SHA256 of its canonical bytes."""
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def key_id(key: bytes) -> str:
    """Names a key without revealing it: two processes can tell they hold the same one."""
    return "hmac-sha256:" + hmac.new(key, b"bide approval key id", hashlib.sha256).hexdigest()[:16]


def requirement(where: Marker) -> dict[str, Any] | None:
    """The home's signing marker, or None if decisions need no signature."""
    text = where.read()
    return None if text is None else _parse(text)


def _parse(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("key_id"), str):
        # a damaged marker must not turn signing off: require a key no one holds
        return {"required": True, "key_id": "(unreadable marker)"}
    return body


def require(where: Marker, key: bytes, *, now: float) -> None:
    """Mark the home as requiring decisions signed with ``key`` (the same key again: no-op).

    Raises:
        ApprovalKeyError: the home already requires another key.
    """
    found = requirement(where)
    if found is None:
        found = _parse(where.write_once({"required": True, "key_id": key_id(key),
                                         "since": now, "note": NOTE}))
    check_key(where, key, found)


def check_key(where: Marker, key: bytes | None, found: dict[str, Any]) -> None:
    """Raise ApprovalKeyError if ``key`` cannot sign for a home that requires ``found``."""
    if key is None:
        raise where.refuse("this process has no key (pass --approval-key-file, or "
                           "approval_key= to bide.open)")
    if key_id(key) != found["key_id"]:
        raise where.refuse(f"the key given ({key_id(key)}) is not the home's "
                           f"({found['key_id']})")


def check(where: Marker, key: bytes | None) -> None:
    """Raise ApprovalKeyError unless ``key`` can sign for the home (any key when none is
    required)."""
    found = requirement(where)
    if found is not None:
        check_key(where, key, found)


def read_key(path: str | os.PathLike[str]) -> bytes:
    return Path(path).read_bytes().strip()
