"""``compact``: rewrite ``store/data.mdb`` without its free pages, swapping it in safely.

What it does, in order (the user's data is never deleted before the new copy
is verified, and a crash at any point leaves a working store):

1. Refuse if any process has the store open, this one included. LMDB holds a
   shared ``fcntl`` lock on byte 0 of ``lock.mdb`` for as long as a process has
   the environment open; ``F_GETLK`` names such a process without taking anything.
2. ``env.copy(compact=True)`` into ``<home>/.compact-<pid>/`` (same filesystem,
   so the final rename is atomic), fsync it, and check the copy like
   ``bide doctor``: every record decodes, the indexes equal a rebuild, and it
   holds as many records as the store did when it was copied.
3. Take an exclusive ``fcntl`` lock on ``lock.mdb`` (an opener arriving now
   blocks in LMDB), check the store did not change since the copy, hard-link
   the old ``data.mdb`` to ``<home>/.compact-<stamp>.old.mdb``, then
   ``rename`` the copy over ``store/data.mdb`` (atomic: either file, never
   half of one) and fsync the directory.
4. Truncate ``lock.mdb`` before releasing the lock: LMDB re-initialises an
   empty lock file on the next open, and an opener that was blocked during
   the swap fails to open (and can retry) instead of pairing the new data
   with stale reader slots.
5. Open the new store, check it again, and only then unlink the old copy
   (``keep_old`` keeps it). If that check fails the old copy stays, and the
   error names it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from ..base import faults
from ..base.errors import CompactFailed, NotAHome, ReadOnlyHome, StoreBusy
from ..base.permissions import PRIVATE_DIR, PRIVATE_FILE
from ..run.run_view import pid_alive
from ..storage import lmdb_store
from .maintenance import DoctorReport, check

_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux (x86_64 and aarch64)
_MIN_MAP = 64 << 20


@dataclass
class CompactReport:
    before: int
    after: int
    records: int
    kept_old: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"bytes_before": self.before, "bytes_after": self.after,
                "bytes_saved": self.before - self.after, "records": self.records,
                "kept_old": self.kept_old}


def compact(home: str | os.PathLike[str], *, keep_old: bool = False) -> CompactReport:
    """Compact ``<home>/store`` in place (see the module docstring for how).

    Raises:
        NotAHome: no store there. StoreBusy: a process has it open.
        ReadOnlyHome: the home cannot be written (nothing was changed).
        CompactFailed: the copy did not verify (nothing was changed).
    """
    home = Path(home)
    store = home / "store"
    data, lock = store / "data.mdb", store / "lock.mdb"
    if not data.is_file():
        raise NotAHome(home, "no store/data.mdb in it")
    why = lmdb_store.why_readonly(store) or (
        None if os.access(home, os.W_OK) else f"no permission to write {home}")
    if why:
        raise ReadOnlyHome(home, why)
    _refuse_if_open(store, lock)
    _clean_leftovers(home, data)
    before = data.stat().st_size
    tmp = home / f".compact-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    tmp.mkdir(mode=PRIVATE_DIR)
    try:
        txnid, records = _copy(store, tmp)
        _verify(tmp, records, "the compacted copy")
        (tmp / "lock.mdb").unlink(missing_ok=True)
        old = _swap(store, tmp, home, txnid)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _verify(store, records, f"the compacted store (the old copy is kept at {old})")
    if keep_old:
        return CompactReport(before, data.stat().st_size, records, str(old))
    old.unlink()
    return CompactReport(before, data.stat().st_size, records)


def holder(lock: Path) -> int | None:
    """The pid of a process that has the LMDB environment open, or None.

    Uses ``F_GETLK``, which takes no lock. This process's own locks are not
    reported (POSIX), so the caller checks its own handles separately.
    """
    if not lock.exists():
        return None
    fd = os.open(lock, os.O_RDWR)
    try:
        res = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
        ltype, _, _, _, pid = _FLOCK.unpack(res)
        return None if ltype == fcntl.F_UNLCK else pid
    finally:
        os.close(fd)  # we hold no lock on it (checked by the caller), so closing drops nothing


def _refuse_if_open(store: Path, lock: Path) -> None:
    # py-lmdb forbids two handles per process, so the store keeps one per path and pid.
    found = lmdb_store._handles.get(str(store.resolve()))
    if found is not None and found[3] == os.getpid():
        raise StoreBusy(store, "this process")
    pid = holder(lock)
    if pid is not None:
        raise StoreBusy(store, f"process {pid}")


def _clean_leftovers(home: Path, data: Path) -> None:
    """Remove what an interrupted compact left: hard links that are still the live file,
    and copies being made by a process that no longer exists (never the user's data)."""
    for link in home.glob(".compact-*.old.mdb"):
        if link.samefile(data):
            link.unlink()
    for tmp in home.glob(".compact-*"):
        pid = tmp.name.split("-")[1]
        if tmp.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _copy(store: Path, tmp: Path) -> tuple[int, int]:
    """Copy compacted; return the source's last txn id and record count at copy time."""
    size = max((store / "data.mdb").stat().st_size, _MIN_MAP)
    env = lmdb.open(str(store), map_size=size, max_dbs=lmdb_store.MAX_DBS, readonly=True)
    try:
        with env.begin() as txn:
            txnid = env.info()["last_txnid"]
            records = lmdb_store.log_records(env, txn)
        env.copy(str(tmp), compact=True)
        os.chmod(tmp / "data.mdb", PRIVATE_FILE)  # LMDB creates the copy 0666 less the umask
        if env.info()["last_txnid"] != txnid:
            raise CompactFailed(f"the store at {store} changed while it was copied; retry",
                                path=store)
    finally:
        env.close()
    with open(tmp / "data.mdb", "rb") as fh:
        os.fsync(fh.fileno())
    return txnid, records


def _verify(path: Path, records: int, what: str) -> DoctorReport:
    with lmdb_store.read_copy(path) as reader:
        report = check(reader)
    if not report.ok or report.records != records:
        found = "; ".join(str(p) for p in report.problems[:3]) or \
            f"{report.records} records instead of {records}"
        raise CompactFailed(f"{what} did not verify: {found}", path=path)
    return report


def _swap(store: Path, tmp: Path, home: Path, txnid: int) -> Path:
    """Replace ``store/data.mdb`` by the copy under an exclusive lock; return the old file."""
    data, lock = store / "data.mdb", store / "lock.mdb"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0, os.SEEK_SET)
        except OSError:  # EAGAIN/EACCES: a process opened the store after our first check
            raise StoreBusy(store, f"process {holder(lock) or '(unknown)'}") from None
        if _last_txnid(store) != txnid:
            raise CompactFailed(f"the store at {store} changed during compaction; retry",
                                path=store)
        old = home / f".compact-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}.old.mdb"
        os.link(data, old)
        faults.point("during_compact_swap")
        os.replace(tmp / "data.mdb", data)
        _fsync_dir(store)
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock
    return old


def _last_txnid(store: Path) -> int:
    """Read the meta pages without touching ``lock.mdb`` (we hold a lock on it)."""
    size = max((store / "data.mdb").stat().st_size, _MIN_MAP)
    env = lmdb.open(str(store), map_size=size, readonly=True, lock=False)
    try:
        return env.info()["last_txnid"]
    finally:
        env.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
