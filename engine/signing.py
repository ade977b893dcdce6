"""Signed decisions, required per home: ``<home>/signing.json`` says so to every process.

A home opened for writing with an approval key is marked: from then on every
process that opens it, with or without a key, refuses decision files that are
unsigned or signed with another key, and ``bide approve`` signs with the key.
The marker holds a key id (an HMAC of a fixed label), never the key. To stop
requiring signatures, remove the file (the home's owner decides that, not bide).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from .approvals import atomic_write_json
from .errors import ApprovalKeyError

MARKER = "signing.json"


def key_id(key: bytes) -> str:
    """Names a key without revealing it: two processes can tell they hold the same one."""
    return "hmac-sha256:" + hmac.new(key, b"bide approval key id", hashlib.sha256).hexdigest()[:16]


def requirement(home: Path) -> dict[str, Any] | None:
    """The home's signing marker, or None if decisions need no signature."""
    try:
        text = (home / MARKER).read_text()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("key_id"), str):
        # a damaged marker must not turn signing off: require a key no one holds
        return {"required": True, "key_id": "(unreadable marker)"}
    return body


def require(home: Path, key: bytes, *, now: float) -> None:
    """Mark the home as requiring decisions signed with ``key`` (the same key again: no-op).

    Raises:
        ApprovalKeyError: the home already requires another key.
    """
    found = requirement(home)
    if found is not None:
        check_key(home, key, found)
        return
    atomic_write_json(home / MARKER, {
        "required": True, "key_id": key_id(key), "since": now,
        "note": "every process that opens this home refuses unsigned decision files; "
                "pass the same key with --approval-key-file (bide watch, bide approve)",
    })


def check_key(home: Path, key: bytes | None, found: dict[str, Any]) -> None:
    """Raise ApprovalKeyError if ``key`` cannot sign for a home that requires ``found``."""
    if key is None:
        raise ApprovalKeyError(home, "this process has no key (pass --approval-key-file, or "
                               "approval_key= to bide.open)")
    if key_id(key) != found["key_id"]:
        raise ApprovalKeyError(home, f"the key given ({key_id(key)}) is not the home's "
                               f"({found['key_id']})")


def read_key(path: str | os.PathLike[str]) -> bytes:
    return Path(path).read_bytes().strip()
