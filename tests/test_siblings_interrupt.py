"""A Ctrl-C that lands in the waiting thread's own task, at any line, still lets the
superstep's other tasks end, then reaches the caller (engine/siblings.py ``run``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from bide.engine import siblings
from bide.engine.task_threads import TaskThreads

DEADLINE = 10.0
SOURCE = Path(siblings.__file__)


def _line(text: str) -> int:
    """The line number of ``text`` (stripped) inside ``Siblings.run``'s ``call``."""
    lines = SOURCE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "def call(index: int)" in line)
    return next(i for i, line in enumerate(lines[start:], start) if line.strip() == text) + 1


@pytest.mark.parametrize("at", ["self._outcomes[index] = outcome", "self._ended += 1",
                                "if self._ended == len(items):"])
def test_a_ctrl_c_at_any_line_of_the_waiting_thread_s_own_call_ends_once_all_ended(at):
    line, ended, outcome = _line(at), [], {}

    def task(i: int) -> int:
        if i == 0:
            time.sleep(0.2)  # a sibling still runs when the Ctrl-C lands
        ended.append(i)
        return i

    def ctrl_c_once(frame, event, arg):  # a Ctrl-C as the waiting thread reaches ``line``
        if (event == "line" and frame.f_lineno == line and frame.f_code.co_name == "call"
                and frame.f_code.co_filename == str(SOURCE)):
            sys.settrace(None)
            raise KeyboardInterrupt
        return ctrl_c_once

    threads = TaskThreads("t")

    def wait() -> None:
        left = siblings.Siblings(2, 0.01, lambda result: None)
        sys.settrace(ctrl_c_once)
        try:
            outcome["value"] = left.run(threads, task, [0, 1], 1)
        except BaseException as exc:  # noqa: BLE001 - what the test checks
            outcome["error"] = exc
        finally:
            sys.settrace(None)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(DEADLINE)
    try:
        assert not waiter.is_alive(), "the waiting thread still waits for a call that ended"
        assert isinstance(outcome.get("error"), KeyboardInterrupt)
        assert sorted(ended) == [0, 1]  # the sibling ended before the Ctrl-C went on
    finally:
        if not waiter.is_alive():
            threads.close()
