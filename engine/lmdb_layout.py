"""Where each table lives in the LMDB file: fewer named databases written per commit.

Every named database a commit writes costs its own copy-on-write pages (its
leaf, its root, its record in the main database); measured with
``bench/physical.py``, one more named database written per durable commit
costs about 7-10 KB of device writes. So a table that is written at every
step goes where another such table's pages are already being written.

The latest-state index shares the run log's database (keys ``run ␀ seq(8)``).
Its hot entries (``latest.STATE``: keys ``run ␀ rest``, rewritten at every
step) are marked with a byte a seq never starts with, so they sort right
after the run's newest run log entry and share its leaf page; its list
segments (``latest.SEGMENTS``, written only when a chunk closes) go to the end
of the database, where they never split that leaf::

    run ␀ seq(8)        run log entry (a seq below 2**56 starts with 0x00)
    run ␀ ff rest       the latest-state entry ``run ␀ rest``
    ff run ␀ rest       the list segment ``run ␀ rest`` (a run id never holds 0xff)

A reader of any of the three sees only its own keys.
"""

from __future__ import annotations

from .index import DERIVED, RUNLOG
from .latest import SEGMENTS, STATE
from .store import LEASES, LOG

META = "meta"
SHARES = {STATE: RUNLOG, SEGMENTS: RUNLOG}  # table -> the named database it lives in
SHARED_BY = frozenset(SHARES.values())  # databases that hold another table's keys too
_MARK = b"\xff"
NAMED = tuple(dict.fromkeys(SHARES.get(t, t) for t in (LOG, META, LEASES, *DERIVED)))
MAX_DBS = len(NAMED) + 4  # room for an older layout's names while it is upgraded


def home_db(table: str) -> str:
    """The named database that holds ``table``."""
    return SHARES.get(table, table)


def physical(table: str, key: bytes) -> bytes:
    """The stored key of ``table``'s logical ``key``."""
    if table == SEGMENTS:
        return _MARK + key
    if table != STATE:
        return key
    cut = key.index(b"\x00") + 1
    return key[:cut] + _MARK + key[cut:]


def logical(table: str, key: bytes) -> bytes | None:
    """``table``'s logical key for a stored key of its database; None: another table's."""
    if table not in SHARES and table not in SHARED_BY:
        return key
    if key[:1] == _MARK:
        return key[1:] if table == SEGMENTS else None
    cut = key.find(b"\x00") + 1
    marked = cut > 0 and key[cut:cut + 1] == _MARK
    if table == RUNLOG:
        return None if marked else key
    if table == STATE and marked:
        return key[:cut] + key[cut + 1:]
    return None


def scan_prefix(table: str, prefix: bytes) -> bytes:
    """The stored prefix to walk for ``table``'s logical ``prefix`` (then filter by ``logical``)."""
    if table == SEGMENTS or (table == STATE and b"\x00" in prefix):
        return physical(table, prefix)
    return prefix


def is_marked(key: bytes, run_prefix_len: int) -> bool:
    """Whether a key of the run log's database past ``run ␀`` is a latest-state entry."""
    return key[run_prefix_len:run_prefix_len + 1] == _MARK
