"""Decision (and signal) files: dropping them into an inbox and taking them out safely.

A file is claimed by an atomic rename into ``inbox/.work/`` before it is read
(two watchers never both take it), checked, recorded in one transaction, then
moved unchanged to ``processed/`` or ``rejected/`` (with ``NAME.error.json``
saying why). Nothing is ever deleted; a bad file never stops the watcher.
A file with a ``signal`` field is a signal for a run (``signal_files.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..base import faults
from ..base.errors import AlreadyDecided, BideError, StoreError, StoreFull
from ..base.permissions import private_dir, trusted_uid
from ..base.vocabulary import Decision
from ..run.approvals import atomic_write_json, check_decision, decided
from ..storage.index import ApprovalState
from ..storage.store import Reader
from . import signal_files, signing

MAX_BYTES = 64 * 1024
FIELDS = {"approval_id", "decision", "by", "reason", "run_id", "digest", "sig", "result",
          "value"}
SIGNED = ("approval_id", "decision", "by", "reason", "run_id", "digest")
NO_VALUE: Any = object()  # drop_decision's "no answer value" (None is a value: JSON null)


@dataclass(frozen=True)
class FileResult:
    """What happened to one inbox file."""

    name: str
    accepted: bool
    reason: str
    approval_id: str | None = None
    run_id: str | None = None
    duplicate: bool = False


@dataclass(frozen=True)
class _Read:
    """A claimed file, read and checked as far as it can be without the store."""

    name: str
    body: dict[str, Any]
    content: str  # "sha256:..." of its bytes, recorded with the decision


class Refused(Exception):
    """A decision file that must go to rejected/; the message says why."""


def canonical(fields: dict[str, Any]) -> bytes:
    """The bytes a signature covers: the signed fields, sorted, compact JSON; an
    answer's ``value`` too (only an answer's, so every other signature stays valid);
    a signal file's own fields (``signal_files.canonical``)."""
    if signal_files.is_signal(fields):
        return signal_files.canonical(fields)
    body = {k: fields.get(k) for k in SIGNED}
    if fields.get("decision") == Decision.ANSWER:
        body["value"] = fields.get("value")
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign(fields: dict[str, Any], key: bytes) -> str:
    return signing.hmac_hex(key, canonical(fields))


def drop_decision(home: str | os.PathLike[str], approval_id: str, decision: Decision | str, *,
                  by: str | None = None, reason: str | None = None, run_id: str | None = None,
                  digest: str | None = None, result: Any = None, key: bytes | None = None,
                  inbox: str | os.PathLike[str] | None = None, value: Any = NO_VALUE) -> Path:
    """Write a decision file into the inbox atomically (dot-file, then rename).

    ``inbox``: where the watcher serving the home takes files (default ``<home>/inbox``).
    ``value``: an answer's value (decision ``answer``; JSON null is a value too).
    """
    body: dict[str, Any] = {"approval_id": approval_id, "decision": decision, "by": by,
                            "reason": reason}
    if value is not NO_VALUE:
        body["value"] = value
    if run_id is not None:
        body["run_id"] = run_id
    if digest is not None:
        body["digest"] = digest
    if result is not None:
        body["result"] = result
    if key is not None:
        body["sig"] = sign(body, key)
    name = f"{approval_id}-{decision}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:6]}.json"
    folder = Path(inbox) if inbox is not None else Path(home) / "inbox"
    return atomic_write_json(folder / name, body)


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise Refused(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constants(name: str) -> Any:
    raise Refused(f"{name} is not allowed in a decision file")


def _bounded_int(text: str) -> int:
    if len(text) > 20 or not -(2 ** 63) <= int(text) < 2 ** 64:
        raise Refused(f"integer {text[:24]}{'…' if len(text) > 24 else ''} is out of range")
    return int(text)


def parse(data: bytes) -> dict[str, Any]:
    """Strict JSON: UTF-8, one object, no duplicate keys, no NaN/Infinity, known fields."""
    body = strict_json(data)
    if not isinstance(body, dict):
        raise Refused(f"a decision file holds one JSON object, not {type(body).__name__}")
    return check_fields(body)


def strict_json(data: bytes) -> Any:
    """UTF-8 JSON with no duplicate keys, no NaN/Infinity, integers in range (any value:
    ``bide serve`` reads request bodies with it too)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        return json.loads(text, object_pairs_hook=_strict_object, parse_constant=_no_constants,
                          parse_int=_bounded_int)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused(f"not valid JSON: {exc}") from None


def check_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A decision's (or signal's) fields, checked: known, of the right types, consistent."""
    if signal_files.is_signal(body):
        if (why := signal_files.problem(body)) is not None:
            raise Refused(why)
        return body
    unknown = set(body) - FIELDS
    if unknown:
        raise Refused(f"unknown field(s): {', '.join(sorted(unknown))}")
    for field in ("approval_id", "decision"):
        if not isinstance(body.get(field), str) or not body[field]:
            raise Refused(f"field {field!r} is required and must be a non-empty string")
    for field in ("by", "reason", "run_id", "digest", "sig"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise Refused(f"field {field!r} must be a string")
    if "result" in body and body["decision"] != Decision.MARK_DONE:
        raise Refused("only a 'mark_done' decision carries a 'result'")
    if ("value" in body) != (body["decision"] == Decision.ANSWER):
        raise Refused("an 'answer' decision carries a 'value' (JSON null is one), and only "
                      "an answer does")
    return body


def _reason_path(moved: Path) -> Path:
    """``NAME.error.json`` beside a rejected file: short enough for the filesystem, and
    never replacing a file (a hostile file may itself be named ``X.error.json``)."""
    stem = moved.name.encode()[:200].decode(errors="ignore")
    path, n = moved.with_name(stem + ".error.json"), 1
    while path.exists() or path.is_symlink():
        path, n = moved.with_name(f"{stem}.{n}.error.json"), n + 1
    return path


class Inbox:
    """One home's inbox, processed on behalf of one engine."""

    def __init__(self, engine: Any,
                 on_recorded: Callable[[list[str]], None] | None = None, *,
                 max_bytes: int = MAX_BYTES) -> None:
        """``on_recorded(run_ids)``: told right after a commit records decisions for those
        runs, before their files are moved (a watcher starts resuming them at once).
        Files larger than ``max_bytes`` are rejected unread."""
        self.engine, self.on_recorded, self.max_bytes = engine, on_recorded, max_bytes
        self.dir = engine.doors.inbox
        self.work = self.dir / ".work"
        for sub in (self.work, self.dir / "processed", self.dir / "rejected"):
            private_dir(sub)

    def names(self) -> list[str]:
        """Final names waiting (dot-files and ``*.tmp`` are still being written)."""
        return sorted(n for n in os.listdir(self.dir)
                      if not n.startswith(".") and not n.endswith(".tmp")
                      and n not in ("processed", "rejected"))

    def process(self) -> list[FileResult]:
        """Take every waiting file (and any a crashed watcher left claimed).

        The decisions of all the files taken are recorded in ONE store commit (a
        burst costs one transaction, not one per file), each file checked as if it
        were recorded alone after the ones before it: a bad file is rejected with
        its reason and never takes the others down.
        """
        names = sorted(os.listdir(self.work))
        return self._finish(names + [n for n in self.names() if self._claim(n)])

    def _finish(self, names: list[str]) -> list[FileResult]:
        """Check, record (in one commit) and move claimed files; a file another watcher
        finished meanwhile is skipped (see ``_check``)."""
        results: dict[str, FileResult | None] = {}
        read: list[_Read] = []
        for name in names:
            try:
                read.append(self._check(name))
            except Refused as exc:
                results[name] = self._settle(name, str(exc))
            except FileNotFoundError:  # another watcher moved it out of .work/ first
                results[name] = None
        if read:
            results.update(self._record_all(read))
        return [r for n in names if (r := results.get(n)) is not None]

    def _claim(self, name: str) -> bool:
        try:
            os.rename(self.dir / name, self.work / name)
        except FileNotFoundError:  # another watcher claimed it first
            return False
        faults.point("after_file_claimed")
        return True

    def _check(self, name: str) -> _Read:
        """Read a claimed file and check what needs no store: form, signature, owner.

        Raises:
            Refused: why the file goes to rejected/. FileNotFoundError: another
                watcher finished it (a claimed file may be finished by two watchers
                at once, each taking what a crashed one left in ``.work/``).
        """
        body, raw, uid = self._read(self.work / name)
        self._check_owner(uid, self._check_signature(body))
        return _Read(name, body, "sha256:" + hashlib.sha256(raw).hexdigest())

    def _settle(self, name: str, refused: str | None,
                result: FileResult | None = None) -> FileResult | None:
        """Move a file out of ``.work/``: rejected with ``refused``, else processed.

        None if another watcher moved it first (recording is idempotent, the move a
        rename: the one that finds the file gone leaves it to the other).
        """
        try:
            if refused is not None:
                return self._reject(name, refused)
            self._move(self.work / name, self.dir / "processed", name)
        except FileNotFoundError:
            return None
        return result

    def _read(self, path: Path) -> tuple[dict[str, Any], bytes, int]:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise Refused("a symlink, not a regular file")
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not a regular file")
        if st.st_nlink > 1:
            raise Refused("a hard link to another file")
        if st.st_mode & stat.S_IWOTH:
            raise Refused("world-writable: anyone could have changed it")
        if st.st_size > self.max_bytes:
            raise Refused(f"{st.st_size} bytes is larger than the {self.max_bytes} byte limit")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                raw = fh.read(self.max_bytes + 1)
        except OSError as exc:  # unreadable, or swapped for something else since the lstat
            raise Refused(f"cannot read it: {exc.strerror}") from None
        if len(raw) > self.max_bytes:
            raise Refused(f"larger than the {self.max_bytes} byte limit")
        return parse(raw), raw, st.st_uid

    def _check_signature(self, body: dict[str, Any]) -> bool:
        """Signed decisions are required by the home (its ``signing`` marker), not by this
        process.

        Returns:
            True if the file carries a valid signature; False if none is required.
        """
        required = signing.requirement(signing.marker(self.engine.home, self.engine.store))
        key = self.engine.approval_key
        if required is None and key is None:
            return False
        sig = body.get("sig")
        if not sig:
            raise Refused("this home requires signed decisions and the file has no 'sig'")
        if key is None:
            raise Refused("this home requires signed decisions and this process has no key to "
                          "check the signature: start it with --approval-key-file")
        if not hmac.compare_digest(sig, sign(body, key)):
            raise Refused("bad signature")
        return True

    def _check_owner(self, uid: int, signed: bool) -> None:
        """Another local user must not decide for the home's owner by dropping a file
        (on a PostgreSQL home: for the owner of the inbox this host serves)."""
        trusted = self.engine.doors.trusted
        if not signed and not trusted_uid(uid, trusted):
            whose = "the home's owner" if trusted == self.engine.home else \
                f"the owner of {trusted}"
            raise Refused(f"owned by uid {uid}, not by {whose} (uid {os.stat(trusted).st_uid});"
                          " a decision file from another user must be signed")

    def _record_all(self, files: list[_Read]) -> dict[str, FileResult | None]:
        """Record every checked file's decision in one commit, then move each file.

        If the commit itself fails (a full disk...), each file is recorded alone, so
        each gets the outcome it would have had on its own. A store that cannot be
        reached (a PostgreSQL outage longer than its reconnect time) is not the files'
        fault: they stay claimed in ``.work/`` and the error propagates, so the caller
        tries them again when the store is back (recording them is idempotent).

        Raises:
            StoreError: the store is away; nothing was recorded or moved.
        """
        try:
            verdicts = self._commit(files)
        except StoreError as exc:
            if not isinstance(exc, StoreFull):
                raise
            return self._record_alone(files, exc)
        except BideError as exc:
            return self._record_alone(files, exc)
        out: dict[str, FileResult | None] = {}
        for f in files:
            verdict = verdicts[f.name]
            if isinstance(verdict, BideError):
                out[f.name] = self._settle(f.name, str(verdict))
                continue
            req, again = verdict
            if isinstance(req, _SignalFile):
                out[f.name] = self._settle(f.name, None, FileResult(
                    f.name, True, "duplicate of a recorded signal" if again else
                    f"recorded signal {f.body['signal']!r}", None, req.run_id, again))
                continue
            decision = f.body["decision"]
            out[f.name] = self._settle(f.name, None, FileResult(
                f.name, True, "duplicate of a recorded decision" if again else
                f"recorded {decision}", req.approval_id, req.run_id, again))
        return out

    def _record_alone(self, files: list[_Read], exc: BideError) -> dict[str, FileResult | None]:
        if len(files) == 1:  # as a file alone always was: rejected with the reason
            return {files[0].name: self._settle(files[0].name, str(exc))}
        return {k: v for f in files for k, v in self._record_all([f]).items()}

    def _commit(self, files: list[_Read]) -> dict[str, Verdict]:
        """Record the decisions of ``files`` in one commit: each one's verdict, by name.

        Raises:
            BideError: the commit itself failed (nothing of it was recorded).
        """
        now = self.engine.clock()
        verdicts: dict[str, Verdict] = {}
        here: dict[str, ApprovalState] = {}  # approvals decided by a file of this commit

        def build(r: Reader) -> list[Any]:
            verdicts.clear()  # a commit may build again (the map grew)
            here.clear()
            return [rec for f in files
                    if (rec := self._decide(r, f, now, verdicts, here)) is not None]

        self.engine.store.commit(build)
        faults.point("after_decision_recorded")
        if self.on_recorded is not None:
            self.on_recorded(sorted({v[0].run_id for v in verdicts.values()
                                     if not isinstance(v, BideError)}))
        return verdicts

    def take(self, body: dict[str, Any], raw: bytes, *, via: str) -> tuple[ApprovalState, bool]:
        """A decision that came without a file (``bide serve``'s ``POST /decisions``): the
        checks and the commit a decision file gets, its ``body`` as a file's parsed one.

        No owner check: no file has an owner, the caller proved who it is another way
        (the server's token). ``via`` is recorded where a file's name would be.

        Returns:
            The request, and True if this very decision was recorded already (a no-op).

        Raises:
            Refused: the fields or the signature. BideError: the request refuses it
            (UnknownApproval, AlreadyDecided, DecisionRefused...), or the commit failed.
            Nothing is recorded then.
        """
        check_fields(body)
        if signal_files.is_signal(body):
            raise Refused("a signal is not a decision")
        self._check_signature(body)
        read = _Read(via, body, "sha256:" + hashlib.sha256(raw).hexdigest())
        verdict = self._commit([read])[via]
        if isinstance(verdict, BideError):
            raise verdict
        req, again = verdict
        assert isinstance(req, ApprovalState)  # a decision's verdict is its request
        return req, again

    @staticmethod
    def _decide(r: Reader, f: _Read, now: float,
                verdicts: dict[str, Verdict],
                here: dict[str, ApprovalState]) -> Any:
        """One file's decision record (None if none), checked against the store and the
        files before it in the same commit: its verdict, or why not, in ``verdicts``."""
        if signal_files.is_signal(f.body):
            return _signal(r, f, now, verdicts)
        body, aid, decision = f.body, f.body["approval_id"], f.body["decision"]
        try:
            req, again = check_decision(r, aid, decision, now=now, run_id=body.get("run_id"),
                                        digest=body.get("digest"), value=body.get("value"))
            if aid in here:  # decided by an earlier file of this commit, as if recorded
                req = here[aid]
                if req.decision != decision or (decision == Decision.ANSWER
                                                and req.result != body.get("value")):
                    raise AlreadyDecided(aid, req.decision, req.by)
                again = True
        except BideError as exc:
            verdicts[f.name] = exc
            return None
        verdicts[f.name] = (req, again)
        if again:
            return None
        result = body.get("value", body.get("result"))  # an answer's value is its result
        here[aid] = msgspec.structs.replace(req, decision=decision, by=body.get("by"),
                                            result=result)
        return decided(req, decision, by=body.get("by"), reason=body.get("reason"),
                       result=result, file=f.name, content_digest=f.content, at=now)

    def _reject(self, name: str, why: str) -> FileResult:
        moved = self._move(self.work / name, self.dir / "rejected", name)
        atomic_write_json(_reason_path(moved),
                          {"file": name, "error": why, "at": self.engine.clock()})
        return FileResult(name, False, why)

    @staticmethod
    def _move(src: Path, folder: Path, name: str) -> Path:
        """Rename into ``folder`` without ever replacing an existing file."""
        dest = folder / name
        n = 1
        while dest.exists() or dest.is_symlink():
            dest = folder / f"{name}.{n}"
            n += 1
        os.rename(src, dest)
        return dest


@dataclass(frozen=True)
class _SignalFile:
    """A signal file's verdict: the run it goes to (a decision's is its request)."""

    run_id: str


# what came of one file in a commit: its request (or signal) and whether it was a repeat,
# or why it was refused
Verdict = tuple[ApprovalState | _SignalFile, bool] | BideError


def _signal(r: Reader, f: _Read, now: float, verdicts: dict[str, Verdict]) -> Any:
    """A signal file's record (None if none): its verdict, or why not, in ``verdicts``."""
    try:
        record, run_id = signal_files.record_of(r, f.body, f.name, f.content, now)
    except BideError as exc:
        verdicts[f.name] = exc
        return None
    verdicts[f.name] = (_SignalFile(run_id), record is None)
    return record
