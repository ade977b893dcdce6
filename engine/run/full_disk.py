"""What a run does when the disk under its home fills up mid-run.

The commit that met the full disk stored nothing (LMDB aborts before its meta
page), so the run's latest checkpoint and pending writes are intact. Leaving it
RUNNING under this worker's lease would block every other worker until the
lease expires; instead the store's reserve file is spent to make room for one
small commit that marks the run INTERRUPTED and releases the lease, so any
worker resumes it as soon as there is space again.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..base.errors import StoreError, StoreFull
from ..storage.store import Store


def release_on_full_store(store: Store, exc: StoreFull, interrupt: Callable[[str], None], *,
                          lease_ttl: float) -> bool:
    """Mark the run INTERRUPTED and release its lease (``interrupt``); True if that fit.

    If even that commit does not fit, the run stays RUNNING until its lease
    expires (``lease_ttl`` seconds), then any worker can take it over; a note on
    ``exc`` says so.
    """
    if exc.free is not None:  # the disk, not the store's size limit: the reserve helps
        store.spend_reserve()
    try:
        interrupt("the store is full" if exc.free is None else
                  "the filesystem holding the home is full")
    except StoreError as again:
        _add_note(exc, f"the run could not be marked INTERRUPTED ({again}); it stays RUNNING "
                  f"until its lease expires in at most {lease_ttl:g}s, then any worker "
                  "can resume it")
        return False
    _add_note(exc, "the run is INTERRUPTED with its lease released: resume it once there is space")
    return True


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on Python 3.10, which has no ``add_note``."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:  # where 3.11 keeps notes, so readers of ``__notes__`` find them
        exc.__dict__.setdefault("__notes__", []).append(note)
