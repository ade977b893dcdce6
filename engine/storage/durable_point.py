"""How far the store is durable: the flush that ends a commit, run outside the writer lock.

A durable LMDB commit flushes twice: its new pages, then its meta page (the one
that makes the commit the newest). The store opens LMDB with ``metasync=False``,
so LMDB's own commit, under the writer lock, flushes only the pages and writes
the meta page without a flush; LMDB keeps the file whole across a power cut in
that mode (the pages a meta page names are on disk before it), but the newest
commit may be undone. So a commit is *acknowledged* only once a flush that began
after its meta page was written has returned: ``wait`` does that flush, after the
writer lock is released, while the next batch already runs under it. One flush
answers every commit written before it began, so threads waiting together share
it (``_flushing``) and a thread whose commit an earlier flush covered does not
flush at all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class DurablePoint:
    """The newest transaction id known to be on disk, and the flush that moves it.

    Args:
        newest: the id of the newest commit written (its meta page is in the file).
        flush: make every write so far durable (``fdatasync``); raises on failure.
    """

    def __init__(self, newest: Callable[[], int], flush: Callable[[], None]) -> None:
        self._newest, self._flush = newest, flush
        self._flushing = threading.Lock()  # one flush at a time: the others wait and reuse it
        self._durable = -1
        self.flushes = 0  # flushes done (for tests and the bench: shared flushes are fewer)

    def wait(self, txn_id: int) -> None:
        """Return once commit ``txn_id`` (and so every earlier one) is durable."""
        if self._durable >= txn_id:
            return
        with self._flushing:
            if self._durable >= txn_id:
                return  # the flush this thread waited behind covered it
            written = self._newest()  # read before the flush: what it surely covers
            self._flush()
            self.flushes += 1
            self._durable = max(self._durable, written)
