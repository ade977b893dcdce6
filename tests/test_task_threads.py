"""A run's kept task threads (engine/run/task_threads.py): ``close`` stops every thread."""

from __future__ import annotations

import threading
import time

import pytest
from bide.engine.run.task_threads import TaskThreads
from polling import wait_for


def _alive(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def _gone(prefix: str) -> bool:
    return wait_for(lambda: not _alive(prefix), 10)


def test_close_stops_a_thread_started_but_never_listed(monkeypatch):
    """A Ctrl-C inside ``Thread.start`` (after the thread runs, before it is listed)
    left that thread waiting on the queue for ever: one stop per listed thread."""
    threads = TaskThreads("tt-orphan")
    real = threading.Thread.start
    calls = {"n": 0}

    def start(self: threading.Thread) -> None:
        real(self)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt):
        threads.start(lambda _item: None, range(3), 3)
    monkeypatch.setattr(threading.Thread, "start", real)
    assert len(_alive("bide-tt-orphan")) == 2  # one listed, one not
    threads.close()
    assert _gone("bide-tt-orphan"), _alive("bide-tt-orphan")


def test_every_started_call_runs_before_close_returns_and_threads_come_back():
    threads = TaskThreads("tt-calls")
    seen: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        time.sleep(0.01)
        with lock:
            seen.append(i)

    threads.start(call, range(6), 2)  # more calls than threads: they queue
    threads.close()
    assert sorted(seen) == list(range(6))
    assert _gone("bide-tt-calls")
    threads.start(call, range(6, 8), 2)  # a run's threads come back after a close
    threads.close()
    assert sorted(seen) == list(range(8)) and _gone("bide-tt-calls")
