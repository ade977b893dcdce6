"""A Ctrl-C that lands in the waiting thread's own task, at any line, still lets the
superstep's other tasks end, then reaches the caller (engine/run/siblings.py ``run``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import bide
import pytest
from bide.engine.run import siblings
from bide.engine.run.task_threads import TaskThreads

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


def test_a_node_raising_keyboard_interrupt_in_a_task_thread_stops_the_run_once_all_ended(
        engine):
    """A fan-out sibling in a task thread (not the waiting one) raises KeyboardInterrupt:
    ``start`` raises it once the other siblings ended, the run is INTERRUPTED with its
    lease let go, and a resume finishes it."""
    ended: list[str] = []
    interrupts, raised_in = {"a": 1}, []

    def sibling(name: str):
        def node(state, ctx):
            if interrupts.pop(name, 0):
                raised_in.append(threading.current_thread().name)
                raise KeyboardInterrupt
            time.sleep(0.2)
            ended.append(name)
            return {name: True}
        return node

    flow = bide.Flow("fan")
    flow.node(lambda state, ctx: {"s": 1}, name="first", start=True)
    for name in "abc":  # "c", the last, runs in the waiting thread; "a" in a task thread
        flow.node(sibling(name), name=name, after="first")
    engine.register(flow)
    with pytest.raises(KeyboardInterrupt):
        engine.start("fan", run_id="r")
    assert raised_in and raised_in[0].startswith("bide-r_")  # a run's task thread
    assert sorted(ended) == ["b", "c"]  # the siblings ended before the interrupt went on
    run = engine.get("r")
    assert run.status == bide.Status.INTERRUPTED and run.head.lease_owner is None
    assert engine.resume("r").state == {"s": 1, "a": True, "b": True, "c": True}
