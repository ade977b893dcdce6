"""What a run does when the disk under its home fills up mid-run.

The commit that met the full disk stored nothing (LMDB aborts before its meta
page), so the run's latest checkpoint and pending writes are intact. Leaving it
RUNNING under this worker's lease would block every other worker until the
lease expires; instead the store's reserve file is spent to make room for one
small commit that marks the run INTERRUPTED and releases the lease, so any
worker resumes it as soon as there is space again.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import StoreError, StoreFull
from .store import Store


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
        exc.add_note(f"the run could not be marked INTERRUPTED ({again}); it stays RUNNING "
                     f"until its lease expires in at most {lease_ttl:g}s, then any worker "
                     "can resume it")
        return False
    exc.add_note("the run is INTERRUPTED with its lease released: resume it once there is space")
    return True
