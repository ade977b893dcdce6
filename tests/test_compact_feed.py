"""``bide compact`` replaces ``store/data.mdb`` by a rename, and an LMDB follower's
change feed watches that file by inotify (engine/storage/change_feed.py): could a follower's
watch be left on the old file, gone quiet?

No: compact refuses while any process has the store open (``StoreBusy``), this one
included, and a feed only exists in a process that has it open (``follow`` reads
the store). A follower that starts after a compact opens the store again and
watches the new file.
"""

from __future__ import annotations

import threading
import time

import bide
import pytest
from bide.engine.upkeep import compaction
from bide.formats import RunCreated, StatusChanged


def test_compact_refuses_while_a_follower_watches_the_store(tmp_path):
    with bide.open(tmp_path, durability="fast") as eng:
        eng.store.commit([RunCreated(run_id="r", flow="job", at=1.0)])
        events = eng.follow("r", fallback=60)
        try:
            assert next(events).kind == "run_created"  # its feed watches data.mdb now
            with pytest.raises(compaction.StoreBusy, match="this process"):
                compaction.compact(tmp_path)
        finally:
            events.close()


def test_a_follower_after_a_compact_hears_commits_to_the_new_file(tmp_path):
    with bide.open(tmp_path, durability="fast") as eng:
        eng.store.commit([RunCreated(run_id="r", flow="job", at=1.0)])
    old = (tmp_path / "store" / "data.mdb").stat().st_ino
    compaction.compact(tmp_path)
    assert (tmp_path / "store" / "data.mdb").stat().st_ino != old  # replaced by rename
    with bide.open(tmp_path, durability="fast") as eng:
        events = eng.follow("r", fallback=60)  # a lost wake-up would wait a minute
        try:
            assert next(events).kind == "run_created"
            done = [StatusChanged(run_id="r", status=bide.Status.DONE)]
            later = threading.Timer(0.2, eng.store.commit, args=(done,))
            later.start()  # while the follower waits on its feed
            started = time.monotonic()
            try:
                assert next(events).kind == "status_changed"
            finally:
                later.join(30)
            assert time.monotonic() - started < 30  # woken, not the minute's re-read
        finally:
            events.close()
