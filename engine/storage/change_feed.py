"""Hearing that a store may have changed, without reading it in a loop: what ``follow`` waits on.

A ``ChangeFeed`` is a wake-up, never the truth: after ``wait`` returns the reader
reads the store again, and whatever it waited for may or may not be there. So a
feed may wake too often (a lease renewal, another run's commit) and may, rarely,
miss a change (an OS queue overflowed): the follower's slow fallback re-read
covers that. Each backend gives the fastest wake-up it has:

- LMDB: ``inotify`` on ``data.mdb``. LMDB writes committed pages and the meta page
  with ``pwrite`` (bide never uses ``writemap``), which the kernel reports as
  ``IN_MODIFY`` to every process watching the file, at once, with no thread and no
  CPU while nothing happens. A write is not yet a commit others can read: LMDB
  writes data pages, then the meta page, and only then publishes the new
  transaction id in ``lock.mdb`` where readers look. So a wake-up waits (a few
  milliseconds at most) until that id moved (``version``): a reader woken by the
  last write of a commit would otherwise read the transaction before it and wait
  for a next write that may never come. Where inotify is missing (not Linux), this process's
  commits only (the fallback re-read is then the way to see another process's).
- Any store, in this process: its ``on_commit`` observers (``ObservedFeed``); the
  memory store has nothing else (and LMDB falls back to it without inotify).
- PostgreSQL: ``LISTEN`` (``pg_follow``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .store import ChangeFeed as ChangeFeed  # re-exported: what a feed is, beside its kinds
from .store import Observer, WriteEvent

IN_MODIFY = 0x00000002
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC




class ObservedFeed:
    """Woken by a store object's ``on_commit`` observers: commits made in this process."""

    def __init__(self, on_commit: Callable[[Observer], Callable[[], None]]) -> None:
        self._changed = threading.Event()
        self._remove = on_commit(self._seen)

    def _seen(self, event: WriteEvent) -> None:
        if not event.refused:
            self._changed.set()

    def wait(self, timeout: float) -> bool:
        woken = self._changed.wait(timeout)
        self._changed.clear()
        return woken

    def close(self) -> None:
        self._remove()


# seconds between looks at the version after a write: fine at first (a commit is
# published within a few milliseconds of its first write), then backing off; ~0.13 s
SETTLE = (0.0, *(0.00025,) * 20, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064)


class InotifyFeed:
    """``IN_MODIFY`` of one file, as a file descriptor ``poll`` can wait on (Linux).

    Args:
        version: what readers of the file go by (LMDB's last transaction id); a
            write wakes ``wait`` once it moved (see the module docstring).

    Raises:
        OSError: inotify is not available (not Linux) or the file cannot be watched.
    """

    def __init__(self, path: Path, version: Callable[[], int] | None = None) -> None:
        libc = _libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY) < 0:
            code = ctypes.get_errno()
            os.close(fd)
            raise OSError(code, f"cannot watch {path}", str(path))
        self.fd: int | None = fd
        self._version = version
        self._seen = None if version is None else version()

    def wait(self, timeout: float) -> bool:
        fd = self.fd
        if fd is None:
            raise ValueError("the feed is closed")
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + max(timeout, 0.0)
        while poller.poll(max(deadline - time.monotonic(), 0.0) * 1000):
            self._drain(fd)
            if self._published():
                return True
        return False

    def _published(self) -> bool:
        """Has the version moved since the last wake-up (waiting for it briefly)? A write
        whose commit stays unpublished longer is seen at the follower's fallback re-read."""
        if self._version is None:
            return True
        for pause in SETTLE:
            time.sleep(pause)
            now = self._version()
            if now != self._seen:
                self._seen = now
                return True
        return False

    @staticmethod
    def _drain(fd: int) -> bool:
        """Read every queued event (their content does not matter); True if there was one."""
        got = False
        while True:
            try:
                got = bool(os.read(fd, 4096)) or got
            except BlockingIOError:
                return got
            except OSError as exc:  # EINTR: a signal; anything else: nothing more to read
                if exc.errno != errno.EINTR:
                    return got

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


def file_feed(path: Path, on_commit: Callable[[Observer], Callable[[], None]],
              version: Callable[[], int] | None = None) -> ChangeFeed:
    """The feed of a store kept in the file ``path`` (LMDB's ``data.mdb``): inotify when
    the OS has it (every process's commits, this one's too), else this process's commits
    only (another process's are then seen by the follower's fallback re-read)."""
    try:
        return InotifyFeed(path, version)
    except (OSError, AttributeError):  # not Linux (no inotify in libc), or an odd filesystem
        return ObservedFeed(on_commit)


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name, use_errno=True)
    libc.inotify_init1  # noqa: B018 - AttributeError here when there is no inotify
    return libc
