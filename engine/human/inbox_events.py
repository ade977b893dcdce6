"""Waiting for files to land in the inbox, at no cost while nothing lands.

watchfiles wakes every ``step`` (10 ms for a ~15 ms reaction): 100 wake-ups a
second, ~0.4% of a core for a watcher with nothing to do. On Linux the watcher
instead blocks in the kernel on an inotify descriptor (through libc, no extra
dependency) and wakes only when a name is created or renamed into the inbox,
for its rescan, or to stop. Elsewhere, when inotify cannot be had (no watch
left), or when polling is asked for (file systems without events), watchfiles
does the waiting, as before.

Events are only wake-ups: the inbox is listed after each one, so a lost or
merged event (a full kernel queue) costs nothing but the wait for the next rescan.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import select
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import watchfiles

_IN_CLOEXEC, _IN_NONBLOCK = 0o2000000, 0o4000
_IN_CREATE, _IN_MOVED_TO, _IN_CLOSE_WRITE = 0x100, 0x80, 0x8
SETTLE = 0.003  # after an event, wait this long for more (a burst lands in one pass)
DEBOUNCE = 0.02  # but never longer than this after the first (a long burst: several passes)
STOP_SLICE = 0.5  # the longest a stop set without wake() goes unseen


class _Inotify:
    """One inotify descriptor watching one directory, and a pipe to wake its waiter."""

    def __init__(self, directory: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(_IN_CLOEXEC | _IN_NONBLOCK)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        mask = _IN_CREATE | _IN_MOVED_TO | _IN_CLOSE_WRITE
        if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch {directory}")
        self.fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wait(self, timeout: float) -> bool:
        """Block until a name lands (True) or ``timeout`` seconds pass or ``wake`` (False)."""
        ready, _, _ = select.select([self.fd, self._wake_r], [], [], timeout)
        if self._wake_r in ready:
            self._drain(self._wake_r)
        if self.fd not in ready:
            return False
        self._drain(self.fd)
        first = time.monotonic()
        while time.monotonic() - first < DEBOUNCE:  # let a burst finish landing
            if not select.select([self.fd], [], [], SETTLE)[0]:
                break
            self._drain(self.fd)
        return True

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:  # the pipe is full: a wake-up is pending anyway
            pass

    @staticmethod
    def _drain(fd: int) -> None:
        while True:
            try:
                if not os.read(fd, 65536):
                    return
            except BlockingIOError:
                return

    def close(self) -> None:
        for fd in (self.fd, self._wake_r, self._wake_w):
            os.close(fd)


class InboxEvents:
    """Yield once per pass the watcher should make: a file landed, or ``rescan`` passed.

    Ends when ``stop`` is set (at once after ``wake()``, else within ``rescan``).
    """

    def __init__(self, directory: Path, stop: threading.Event, *, rescan: float,
                 poll: bool = False) -> None:
        self.directory, self.stop, self.rescan, self.poll = directory, stop, rescan, poll
        self._due = math.inf  # monotonic time of the next quiet pass
        self._due_lock = threading.Lock()
        self._inotify: _Inotify | None = None
        if not poll and sys.platform.startswith("linux"):
            try:
                self._inotify = _Inotify(directory)
            except (OSError, AttributeError) as exc:  # no watches left, no inotify in libc
                if not isinstance(exc, AttributeError) and exc.errno not in (
                        errno.ENOSPC, errno.EMFILE, errno.ENOSYS, errno.EINVAL):
                    raise
        self.kind = "inotify" if self._inotify is not None else (
            "polling" if poll else "watchfiles")

    def __iter__(self) -> Iterator[bool]:
        """True after a file landed, False after a quiet ``rescan``."""
        if self._inotify is None:
            yield from self._watchfiles()
            return
        try:
            with self._due_lock:  # a due time asked for before the first pass stands
                self._due = min(self._due, time.monotonic() + self.rescan)
            while not self.stop.is_set():
                # in slices: a stop set by another thread (no wake()) is seen soon too
                wait = min(self._due - time.monotonic(), STOP_SLICE)
                landed = self._inotify.wait(max(0.0, wait))
                if self.stop.is_set():
                    return
                if landed or time.monotonic() >= self._due:
                    with self._due_lock:
                        self._due = time.monotonic() + self.rescan
                    yield landed
        finally:
            inotify, self._inotify = self._inotify, None  # a late wake() then does nothing
            inotify.close()

    def _watchfiles(self) -> Iterator[bool]:
        for changes in watchfiles.watch(
            self.directory, stop_event=self.stop, force_polling=self.poll, step=10,
            debounce=100, rust_timeout=int(self.rescan * 1000), yield_on_timeout=True,
            watch_filter=None, recursive=False, raise_interrupt=False,
        ):
            if self.stop.is_set():
                return
            yield bool(changes)

    def pass_by(self, when: float) -> None:
        """Make the next quiet pass no later than ``when`` (monotonic): a run falls due
        then. Any thread may call it (with inotify; elsewhere passes stay ``rescan``
        apart)."""
        with self._due_lock:
            self._due = min(self._due, when)
        self.wake()  # a wait under way shortens to the new due time

    def wake(self) -> None:
        """Make a waiting pass return now (a stop from a signal handler or another thread)."""
        inotify = self._inotify
        if inotify is not None:
            inotify.wake()
