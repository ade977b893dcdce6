"""Files that pile up in a home, and taking the old ones away when asked.

A watcher never deletes a file on its own: a decision file is moved to
``inbox/processed/`` or ``inbox/rejected/`` (with ``NAME.error.json`` saying why),
and a request file stays in ``requests/`` after its run was decided or finished.
On a device that runs for months that is a leak, so ``bide prune
--files-older-than AGE`` removes, when an operator asks:

- request files older than AGE whose request was decided or whose run finished
  (never one that still waits for a decision, nor one the store does not know);
- files older than AGE in ``inbox/processed/`` and ``inbox/rejected/`` (a rejected
  file with its reason).

``rejected(...)`` lists what was refused and why (``bide inbox``).
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.vocabulary import Status
from ..run.run_view import RunView
from ..storage import attention
from ..storage.store import Reader

REASON = ".error.json"
REASON_MAX = 64 * 1024  # a reason file is ours and small; never read a big one whole


@dataclass(frozen=True)
class Rejected:
    """A refused decision file: its name in ``rejected/``, why, and when (epoch seconds)."""

    name: str
    reason: str | None
    at: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "reason": self.reason, "at": self.at}


def rejected(inbox: Path) -> list[Rejected]:
    """The files in ``inbox/rejected/``, oldest first, each with the reason beside it."""
    folder = inbox / "rejected"
    if not folder.is_dir():
        return []
    reasons = {_rejected_name(p.name): _read_reason(p) for p in folder.iterdir()
               if p.name.endswith(REASON)}
    out = []
    for p in folder.iterdir():
        if p.name.endswith(REASON):
            continue
        why, at = reasons.get(p.name, (None, None))
        out.append(Rejected(p.name, why, at if at is not None else _mtime(p)))
    return sorted(out, key=lambda r: (r.at or 0.0, r.name))


def _rejected_name(reason_file: str) -> str:
    """``x.json.error.json`` → ``x.json``; ``x.json.2.error.json`` (a name taken) too."""
    stem = reason_file[:-len(REASON)]
    return re.sub(r"\.\d+$", "", stem) if re.search(r"\.\d+$", stem) else stem


def _read_reason(path: Path) -> tuple[str | None, float | None]:
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > REASON_MAX:
            return None, None
        body = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None, None
    if not isinstance(body, dict):
        return None, None
    at = body.get("at")
    return (str(body["error"]) if "error" in body else None,
            float(at) if isinstance(at, int | float) else None)


def _mtime(path: Path) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


@dataclass
class FilesPruned:
    """What ``prune_files`` removed (or would, on a dry run), relative to the home."""

    removed: list[str] = field(default_factory=list)
    bytes: int = 0
    waiting: list[str] = field(default_factory=list)  # request files kept: still undecided
    unknown: list[str] = field(default_factory=list)  # request files the store does not know

    def to_dict(self) -> dict[str, Any]:
        return {"removed": self.removed, "bytes": self.bytes, "waiting": self.waiting,
                "unknown": self.unknown}


def prune_files(reader: Reader, *, inbox: Path, requests: Path | None, older_than: float,
                now: float, dry_run: bool = False) -> FilesPruned:
    """Remove files older than ``older_than`` seconds that nothing will read again (see
    the module docstring); never a request that still waits for a decision."""
    report = FilesPruned()
    if requests is not None and requests.is_dir():
        for path in sorted(requests.glob("*.json")):
            if _old(path, now, older_than) and _settled(reader, path.stem, report, path):
                _remove(path, report, dry_run)
    for folder in (inbox / "processed", inbox / "rejected"):
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if _old(path, now, older_than):
                    _remove(path, report, dry_run)
    return report


def _settled(reader: Reader, approval_id: str, report: FilesPruned, path: Path) -> bool:
    """True if the request was decided or its run finished (its file is history)."""
    req = reader.approval(approval_id)
    if req is None:
        report.unknown.append(path.name)  # not ours to judge: leave it
        return False
    head = reader.head(req.run_id)
    if req.decision is not None or head is None or Status.of(head.status).finished:
        return True
    report.waiting.append(path.name)
    return False


def _old(path: Path, now: float, older_than: float) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False  # a watcher moved it meanwhile
    return not stat.S_ISDIR(st.st_mode) and now - st.st_mtime >= older_than


def _remove(path: Path, report: FilesPruned, dry_run: bool) -> None:
    try:
        size = os.lstat(path).st_size
        if not dry_run:
            os.unlink(path)  # a symlink is removed itself, never what it points to
    except FileNotFoundError:
        return  # a watcher or another prune took it meanwhile
    report.removed.append(str(path))
    report.bytes += size


class HomeFiles:
    """An engine's home files: ``bide inbox`` and ``bide prune --files-older-than``."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def rejected(self) -> list[Rejected]:
        return rejected(self.engine.doors.inbox)

    def orphans(self) -> list[str]:
        """RUNNING runs whose worker is gone (no live lease): a watcher or ``bide recover``
        resumes them; ``bide doctor`` lists them beside the files."""
        with self.engine.store.reader() as r:
            heads = [h for run_id in attention.run_ids(r) if (h := r.head(run_id)) is not None]
            return [h.run_id for h in heads
                    if h.status == Status.RUNNING and not RunView(r, h).lease_live()]

    def prune(self, older_than: float, *, dry_run: bool = False) -> FilesPruned:
        if not older_than >= 0:
            raise ValueError(f"older_than must be a number of seconds >= 0, not {older_than!r}")
        doors = self.engine.doors
        with self.engine.store.reader() as r:
            return prune_files(r, inbox=doors.inbox, requests=doors.requests,
                               older_than=older_than, now=self.engine.clock(),
                               dry_run=dry_run)
