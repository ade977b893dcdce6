"""Where each table lives in the LMDB file: as few pages written per commit as we can.

Every named database a commit writes costs its own copy-on-write pages (its
leaf, its root) and a rewrite of its record in LMDB's main database; measured
with ``bench/physical.py``, each one costs about 7-10 KB of device writes per
durable commit. A default superstep writes a log record, a run log entry, the
run's head and its latest-state entries, so all four live in ONE tree, and it
is the main (unnamed) database itself, whose leaf holding the named databases'
records a commit writes anyway (``bench/kit/layout_model.py`` measured the
candidates in raw LMDB). Keys in the main database (``TREE``, store format 5)::

    meta, leases, ...    the records of the named databases (plain ascii, no 0x00)
    run ␀ seq(8)         run log entry (a seq below 2**56 starts with 0x00)
    run ␀ fe             the run's head (``runs``: key ``run``)
    run ␀ ff rest        the latest-state entry ``run ␀ rest``
    ff run ␀ rest        the list segment ``run ␀ rest`` (a run id never holds 0xff)
    ff ff seq(8)         the log record ``seq``: the highest keys, so appends stay appends

A run's log entries, head and latest-state entries are adjacent, so a step's
writes share a leaf; the log's tail is the tree's last leaf. The attention
table stays a named database: a rescan walks it alone, and it is written only
when a run's status changes. Homes of store format 4 and before (``LEGACY``:
``log``, ``runs`` and ``runlog`` named, the state in the run log's database)
are read in place and moved into this layout on their first writable open.

A reader of any table sees only its own keys (``Layout.logical``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .index import DERIVED, RUNLOG, RUNS
from .kept import Memo
from .latest import SEGMENTS, STATE
from .store import LEASES, LOG

META = "meta"
MAIN = ""  # LMDB's unnamed database, in ``dbs``
_MARK, _HEAD, _LOG = b"\xff", b"\xfe", b"\xff\xff"
_MOST_KEPT = 4096  # stored state keys remembered per layout


class Layout:
    """One way of placing the tables in named databases and keys."""

    def __init__(self, shares: Mapping[str, str]) -> None:
        self.shares = dict(shares)  # table -> the database it lives in, when not its own
        self.shared_by = frozenset(self.shares.values())
        self.named = tuple(dict.fromkeys(
            t for t in (LOG, META, LEASES, *DERIVED) if t not in self.shares))
        self.runs_shared = RUNS in self.shares
        # each table's key rule, chosen once: a commit asks for a dozen keys; a run's few
        # state keys and its head's are asked at every step: kept (``kept.Memo``)
        self._physical: dict[str, Callable[[bytes], bytes]] = {
            STATE: Memo(self._state, _MOST_KEPT).__getitem__, SEGMENTS: self._segment}
        if self.runs_shared:
            self._physical[RUNS] = Memo(_head_key, _MOST_KEPT).__getitem__
            self._physical[RUNLOG] = self._runlog
        if LOG in self.shares:
            self._physical[LOG] = _LOG.__add__
        # table -> (its key rule or None, its database): both, in one lookup per call
        self.routes: dict[str, tuple[Callable[[bytes], bytes] | None, str]] = {}
        for table in (LOG, META, LEASES, *DERIVED):
            self.route(table)

    def home_db(self, table: str) -> str:
        """The database (a key of ``dbs``) that holds ``table``."""
        return self.shares.get(table, table)

    def filtered(self, table: str) -> bool:
        """Whether ``table``'s database holds other tables' keys too."""
        return table in self.shares or table in self.shared_by

    def route(self, table: str) -> tuple[Callable[[bytes], bytes] | None, str]:
        """``table``'s key rule (None: keys as they are) and ``home_db``, for a caller
        that maps many keys (``routes`` holds every table this module knows)."""
        found = self.routes.get(table)
        if found is None:
            found = self.routes[table] = (self._physical.get(table), self.home_db(table))
        return found

    def physical(self, table: str, key: bytes) -> bytes:
        """The stored key of ``table``'s logical ``key``."""
        rule = self._physical.get(table)
        return key if rule is None else rule(key)

    def _state(self, key: bytes) -> bytes:
        cut = key.index(b"\x00") + 1  # only a 0x01 of the run id needs escaping
        if self.runs_shared and b"\x01" in key[:cut]:
            return _escape(key[:cut - 1]) + b"\x00" + _MARK + key[cut:]
        return key[:cut] + _MARK + key[cut:]

    def _segment(self, key: bytes) -> bytes:
        return _MARK + self._run_part(key, key.index(b"\x00"))

    def _runlog(self, key: bytes) -> bytes:
        run = key[:-9]
        if b"\x00" not in run and b"\x01" not in run:  # ``_escape`` would keep it (most)
            return key
        return self._run_part(key, len(key) - 9)

    def _run_part(self, key: bytes, end: int) -> bytes:
        """``key`` with its run id (``key[:end]``) escaped, in the layout that escapes it."""
        return _escape(key[:end]) + key[end:] if self.runs_shared else key

    def logical(self, table: str, key: bytes) -> bytes | None:
        """``table``'s logical key for a stored key of its database; None: another table's."""
        if not self.filtered(table):
            return key
        if key[:2] == _LOG and LOG in self.shares:
            return key[2:] if table == LOG else None
        if key[:1] == _MARK:
            return self._unescaped(key[1:]) if table == SEGMENTS else None
        cut = key.find(b"\x00") + 1
        if cut == 0:
            return None  # a named database's record in the main database
        mark = key[cut:cut + 1]
        if mark == _MARK:
            return self._unescaped(key[:cut] + key[cut + 1:]) if table == STATE else None
        if mark == _HEAD and self.runs_shared and len(key) == cut + 1:
            return _unescape(key[:cut - 1]) if table == RUNS else None
        return self._unescaped(key) if table == RUNLOG else None

    def _unescaped(self, key: bytes) -> bytes:
        """A stored run-prefixed key with its run id as the tables know it."""
        if not self.runs_shared:
            return key
        cut = key.index(b"\x00")
        return _unescape(key[:cut]) + key[cut:]

    def scan_prefix(self, table: str, prefix: bytes) -> bytes:
        """The stored prefix to walk for ``table``'s logical ``prefix`` (then ``logical``)."""
        if self.runs_shared and table in (RUNLOG, STATE, SEGMENTS, RUNS):
            run, sep, rest = prefix.partition(b"\x00")
            prefix = _escape(run) + sep + rest  # escaping keeps prefixes prefixes
        if table == SEGMENTS:
            return _MARK + prefix
        if table == STATE and b"\x00" in prefix:
            cut = prefix.index(b"\x00") + 1
            return prefix[:cut] + _MARK + prefix[cut:]
        return prefix


def _head_key(run: bytes) -> bytes:
    return _escape(run) + b"\x00" + _HEAD


def _escape(run: bytes) -> bytes:
    """A run id with no 0x00 in it, so the first 0x00 of a key ends it (the engine's run
    ids have none and stay as they are; the store takes any)."""
    if b"\x00" not in run and b"\x01" not in run:
        return run
    return run.replace(b"\x01", b"\x01\x02").replace(b"\x00", b"\x01\x01")


def _unescape(run: bytes) -> bytes:
    if b"\x01" not in run:
        return run
    return run.replace(b"\x01\x01", b"\x00").replace(b"\x01\x02", b"\x01")


LEGACY = Layout({STATE: RUNLOG, SEGMENTS: RUNLOG})  # store format 4
TREE = Layout({t: MAIN for t in (LOG, RUNLOG, RUNS, STATE, SEGMENTS)})  # store format 5
LEGACY_ONLY = tuple(n for n in LEGACY.named if n not in TREE.named)  # log, runs, runlog
NAMED = TREE.named
MAX_DBS = len(NAMED) + len(LEGACY_ONLY) + 4  # room for an older layout's names


def layout_of(dbs: Mapping[str, Any]) -> Layout:
    """The layout of a store whose databases are ``dbs`` (an unmoved home has ``log``)."""
    return LEGACY if LOG in dbs else TREE


def past_entries(key: bytes, run_prefix_len: int) -> bool:
    """Whether a key of the run log's database starting ``run ␀`` is past the run's log
    entries (its head or its latest-state entries)."""
    return key[run_prefix_len:run_prefix_len + 1] in (_MARK, _HEAD)


def run_end(key: bytes) -> bytes:
    """The smallest key above every key of the run whose stored key is ``key``."""
    return key[:key.index(b"\x00")] + b"\x01"


def head_at(key: bytes) -> bytes:
    """The stored key of the head of the run whose stored key is ``key`` (``TREE``)."""
    return key[:key.index(b"\x00") + 1] + _HEAD
