"""What a superstep costs in Python, counted (not timed): issue 13.2's two targets.

Many runs share one flush (group commit), so the Python each superstep runs
bounds how far concurrent runs scale; and a fan-out superstep's cost is its
chain superstep's plus what its siblings add. Each test pins one cut so that a
change bringing it back fails here, whatever the machine's load.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import bide
from bide.bench.memory import run_in_memory
from bide.bench.workloads import Workload
from bide.engine import latest, maintenance, task_threads


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
    pools: list[task_threads.TaskThreads] = []
    made = task_threads.TaskThreads.__init__

    def counted(self: task_threads.TaskThreads, name: str) -> None:
        made(self, name)
        pools.append(self)

    monkeypatch.setattr(task_threads.TaskThreads, "__init__", counted)
    watch(flow, lambda: seen.append(threading.current_thread()))
    engine.register(flow)
    run = engine.start(flow.name, w.initial(), run_id="fan")
    assert run.status == bide.Status.DONE and run.state == w.expected()
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
    calls: list[str] = []
    keys_in = latest._keys_in

    def counted(run_id, found):
        calls.append(run_id)
        return keys_in(run_id, found)

    monkeypatch.setattr(latest, "_keys_in", counted)
    w = Workload("long", 150, 100)
    flow = w.flow()
    engine.register(flow)
    run = engine.start(flow.name, w.initial(), run_id="long")
    assert run.status == bide.Status.DONE and run.state == w.expected()
    with engine.store.reader() as r:
        fulls = [seq for seq, rtype in r.run_entries("long")
                 if rtype == "checkpoint" and r.record(seq).full]
    assert len(fulls) >= 2  # the first snapshot, then at version 64 at least
    assert len(calls) == len(fulls) - 1  # each later full snapshot drops the old keys
    assert engine.state("long") == w.expected()
    assert maintenance.doctor(engine.store).ok
