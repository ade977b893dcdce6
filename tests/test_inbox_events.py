"""Waiting for the inbox (engine/human/inbox_events.py): woken by a file, a rescan or a stop."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
from bide.engine.human.inbox_events import InboxEvents

DEADLINE = 10.0


def _first(events: InboxEvents) -> tuple[bool, float]:
    t = time.monotonic()
    landed = next(iter(events))
    return landed, time.monotonic() - t


@pytest.mark.parametrize("poll", [False, True])
def test_a_renamed_file_wakes_the_wait_and_quiet_yields_at_the_rescan(tmp_path: Path, poll):
    stop = threading.Event()
    events = InboxEvents(tmp_path, stop, rescan=DEADLINE if not poll else 5.0, poll=poll)
    if not poll and sys.platform.startswith("linux"):
        assert events.kind == "inotify"
    (tmp_path / ".x.tmp").write_text("{}")
    timer = threading.Timer(0.2, os.rename, (tmp_path / ".x.tmp", tmp_path / "x.json"))
    timer.start()
    it = iter(events)
    t = time.monotonic()
    assert next(it) is True
    assert time.monotonic() - t < DEADLINE / 2  # woken by the file, not the rescan
    timer.join(DEADLINE)
    stop.set()
    assert list(it) == []  # a stopped wait ends


def test_a_quiet_inbox_yields_false_once_per_rescan(tmp_path: Path):
    stop = threading.Event()
    events = InboxEvents(tmp_path, stop, rescan=0.2)
    it = iter(events)
    t = time.monotonic()
    assert [next(it), next(it)] == [False, False]
    assert 0.35 < time.monotonic() - t < DEADLINE
    stop.set()


def test_wake_ends_a_stopped_wait_at_once(tmp_path: Path):
    stop = threading.Event()
    events = InboxEvents(tmp_path, stop, rescan=60.0)
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.extend(events), name="test-events")
    t.start()
    time.sleep(0.1)
    started = time.monotonic()
    stop.set()
    events.wake()
    t.join(DEADLINE)
    assert not t.is_alive() and out == []
    assert time.monotonic() - started < DEADLINE


def test_a_stop_without_wake_is_seen_within_a_slice(tmp_path: Path):
    stop = threading.Event()
    events = InboxEvents(tmp_path, stop, rescan=60.0)
    t = threading.Thread(target=lambda: list(events), name="test-events")
    t.start()
    time.sleep(0.1)
    stop.set()
    t.join(DEADLINE)
    assert not t.is_alive()


def test_a_file_landing_before_the_first_wait_is_still_reported(tmp_path: Path):
    """Watching starts in the constructor: a file after it and before the wait counts."""
    stop = threading.Event()
    events = InboxEvents(tmp_path, stop, rescan=DEADLINE)
    (tmp_path / "early.json").write_text("{}")
    landed, took = _first(events)
    assert landed is True and took < DEADLINE / 2
    stop.set()
