"""What a superstep costs in Python, counted (not timed): issue 13.2's two targets.

Many runs share one flush (group commit), so the Python each superstep runs
bounds how far concurrent runs scale; and a fan-out superstep's cost is its
chain superstep's plus what its siblings add. Each test pins one cut so that a
change bringing it back fails here, whatever the machine's load.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import bide
import pytest
from bide.bench.kit.memory import run_in_memory
from bide.bench.kit.workloads import Workload
from bide.engine.run import task_threads, tasks
from bide.engine.storage import latest
from bide.engine.upkeep import maintenance
from bide.formats import Checkpoint
from cost_helpers import DictTables, run_workload, spy


def watch(flow: bide.Flow, note: Callable[[], Any]) -> None:
    """Call ``note`` in each node's thread before the node runs."""
    for name, node in flow.nodes.items():
        def watched(state, ctx, fn=node.fn):
            note()
            return fn(state, ctx)

        flow.nodes[name] = dataclasses.replace(node, fn=watched)


def test_a_fan_out_run_keeps_its_task_threads_across_supersteps(engine, monkeypatch):
    """Starting four threads per superstep was over a third of a fan-out superstep."""
    w = Workload("fanout4", 12, 100)
    flow = w.flow()
    seen: list[threading.Thread] = []  # the Thread objects themselves: idents are reused
    pools = spy(monkeypatch, task_threads.TaskThreads, "__init__", lambda self, name: self)
    watch(flow, lambda: seen.append(threading.current_thread()))
    run_workload(engine, w, "fan", flow)
    workers = {t for t in seen if t is not threading.main_thread()}
    assert len(seen) == 4 * 12  # 12 supersteps of 4 tasks
    assert len(workers) <= 4, f"{len(workers)} task threads for 12 supersteps of 4 tasks"
    assert sum(p.pools for p in pools) == 1
    assert not [t for t in workers if t.is_alive()], "the run's threads outlive its worker"
    assert maintenance.doctor(engine.store).ok


def test_the_memory_baseline_keeps_its_threads_too():
    """The durable cost is the engine's time over this baseline's: both start threads
    alike, or the difference counts thread starts as the cost of durability."""
    w = Workload("fanout4", 8, 100)
    before = threading.enumerate()
    flow = w.flow()
    seen: set[threading.Thread] = set()
    watch(flow, lambda: seen.add(threading.current_thread()))
    state, steps = run_in_memory(flow, w.initial())
    assert state == w.expected() and steps == w.supersteps
    assert len(seen - {threading.main_thread()}) <= 4
    assert set(threading.enumerate()) <= set(before)


def test_folding_a_delta_lists_no_key_of_the_run(engine, monkeypatch):
    """A delta folds in O(1): listing every chunk key of a growing list (only a full
    snapshot replaces them) made each step O(run length)."""
    calls = spy(monkeypatch, latest, "_keys_in", lambda run_id, found: run_id)
    w = Workload("long", 150, 100)
    run_workload(engine, w, "long")
    with engine.store.reader() as r:
        fulls = [seq for seq, rtype in r.run_entries("long")
                 if rtype == "checkpoint" and r.record(seq).full]
    assert len(fulls) >= 2  # the first snapshot, then at version 64 at least
    assert len(calls) == len(fulls) - 1  # each later full snapshot drops the old keys
    assert engine.state("long") == w.expected()
    assert maintenance.doctor(engine.store).ok


def test_folding_a_delta_reads_each_entry_once():
    """The fold compared each value it writes with what is stored by reading it again."""
    tables = DictTables()
    full = Checkpoint(run_id="r", version=0, superstep=0, status=bide.Status.RUNNING,
                      full=True, state={"items": ["a" * 100] * 12, "count": 12}, at=0.0)
    latest.fold(tables, 1, full)
    tables.reads.clear()
    delta = Checkpoint(run_id="r", version=1, superstep=1, status=bide.Status.RUNNING,
                       base=1, ops=[("items", "append", ["b" * 100]), ("count", "set", 13)],
                       at=0.0)
    latest.fold(tables, 2, delta)
    assert tables.reads and len(tables.reads) == len(set(tables.reads)), tables.reads
    assert latest.read(tables, "r", 2) == {"items": ["a" * 100] * 12 + ["b" * 100],
                                           "count": 13}


def test_a_chain_superstep_makes_no_sibling_countdown(engine, monkeypatch):
    """One task has no sibling to wait for: no lock and condition made per superstep."""
    made = spy(monkeypatch, tasks._Countdown, "__init__", lambda self, *args, **kwargs: 1)
    run_workload(engine, Workload("long", 30, 100), "chain")
    assert made == []


def test_a_fan_out_whose_tasks_all_have_a_slot_makes_no_semaphore(engine, monkeypatch):
    """Slots matter only when a node has more tasks than its concurrency (a map's Sends)."""
    made: list[int] = []
    real = threading.BoundedSemaphore

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, value: int = 1) -> None:
            made.append(value)
            super().__init__(value)

    monkeypatch.setattr(threading, "BoundedSemaphore", Counted)
    run_workload(engine, Workload("fanout4", 5, 100), "fan")
    assert made == []


def test_the_run_threads_let_every_task_end_before_an_interrupt_goes_on():
    """As leaving a pool's with-block did: a Ctrl-C while waiting for the tasks reaches
    the run only once they ended (their outputs and tool outcomes committed)."""
    ended: list[int] = []
    both = threading.Barrier(2, timeout=5)

    def task(i: int) -> int:
        both.wait()  # both submitted: the caller is waiting for them
        if i == 0:
            time.sleep(0.1)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # Ctrl-C
        time.sleep(0.3)
        ended.append(i)
        return i

    threads = task_threads.TaskThreads("t")
    try:
        with pytest.raises(KeyboardInterrupt):
            threads.map(task, [0, 1], 2)
            time.sleep(5)  # not reached: the interrupt lands while map waits
        assert sorted(ended) == [0, 1]
    finally:
        threads.close()
