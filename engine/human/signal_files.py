"""Signal files: ``{"signal": NAME, "run_id": RUN, "data": ...}`` dropped into the inbox.

They follow every rule decision files follow (``inbox.py``: claimed by rename,
size, regular file, strict JSON, owner or signature, moved to ``processed/`` or
``rejected/`` with the reason, never deleted); this module holds what differs:
their fields, what a signature covers (name, run id, data, and ``by``), and the
record they become. A file taken twice (a watcher died after recording it, before
moving it) is recorded once: its name and content digest are in its ``SignalSent``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from ...formats import SignalSent, check_serializable
from ...formats.errors import NotSerializable
from ..base.errors import SignalRefused
from ..run import signals
from ..run.approvals import atomic_write_json
from ..run.host import Host
from ..run.signals import Queue
from ..storage.store import Reader
from . import signing

FIELDS = {"signal", "run_id", "data", "by", "sig"}
SIGNED = ("signal", "run_id", "data", "by")


def is_signal(body: dict[str, Any]) -> bool:
    """Is this inbox file a signal (not a decision)?"""
    return "signal" in body


def problem(body: dict[str, Any]) -> str | None:
    """Why a parsed signal file is malformed, or None."""
    unknown = set(body) - FIELDS
    if unknown:
        return f"unknown field(s) in a signal file: {', '.join(sorted(unknown))}"
    for field in ("signal", "run_id"):
        if not isinstance(body.get(field), str) or not body[field]:
            return f"field {field!r} is required and must be a non-empty string"
    for field in ("by", "sig"):
        if body.get(field) is not None and not isinstance(body[field], str):
            return f"field {field!r} must be a string"
    return None


def canonical(body: dict[str, Any]) -> bytes:
    """The bytes a signal file's signature covers."""
    return json.dumps({k: body.get(k) for k in SIGNED}, sort_keys=True,
                      separators=(",", ":")).encode()


def record_of(r: Reader, body: dict[str, Any], name: str, content: str,
              now: float) -> tuple[SignalSent | None, str]:
    """The record a checked signal file becomes (None: this very file is already
    recorded), and its run id.

    Raises:
        UnknownRun, SignalRefused, NotSerializable: why the file goes to rejected/.
    """
    run_id, signal = body["run_id"], body["signal"]
    signals.accepting(r, run_id, signal)
    try:
        check_serializable(body.get("data"), f"the data of signal {signal!r}")
    except NotSerializable as exc:  # JSON is always kept; defensive against odd values
        raise SignalRefused(run_id, signal, str(exc)) from None
    if any(s.file == name and s.content_digest == content
           for s in Queue.read(r, run_id).sent.values()):
        return None, run_id
    return SignalSent(run_id=run_id, name=signal, data=body.get("data"), by=body.get("by"),
                      file=name, content_digest=content, at=now), run_id


def drop_signal(inbox: str | os.PathLike[str], run_id: str, name: str, data: Any = None, *,
                by: str | None = None, key: bytes | None = None) -> Path:
    """Write a signal file into ``inbox`` atomically (dot-file, then rename), signed with
    ``key`` when given."""
    body: dict[str, Any] = {"signal": name, "run_id": run_id, "data": data}
    if by is not None:
        body["by"] = by
    if key is not None:
        body["sig"] = signing.hmac_hex(key, canonical(body))
    stamp = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:6]}"
    return atomic_write_json(Path(inbox) / f"signal-{run_id[:40]}-{stamp}.json", body)


def deliver(engine: Host, run_id: str, name: str, data: Any = None, *,
            by: str | None = None, key: bytes | None = None) -> dict[str, Any]:
    """See ``Surface.deliver_signal``: into the store on a shared home, else a file."""
    signing.check(signing.marker(engine.home, engine.store), key)
    if (why := problem({"signal": name, "run_id": run_id, "by": by})) is not None:
        raise SignalRefused(run_id, str(name), why)
    check_serializable(data, f"the data of signal {name!r}")
    path = None
    if signing.marker(engine.home, engine.store).shared is not None:
        signals.send(engine.store, run_id, name, data, now=engine.clock(), by=by)
    else:
        with engine.store.reader() as r:  # refuse now what the watcher would reject
            record_of(r, {"signal": name, "run_id": run_id, "data": data}, "", "",
                      engine.clock())
        path = drop_signal(engine.doors.inbox, run_id, name, data, by=by, key=key)
    return {"run_id": run_id, "signal": name, "home": engine.doors.home,
            "file": None if path is None else str(path)}
