"""What a fan-out superstep costs over a chain's, counted (not timed): issue 13.2.

Each test pins one cut of FANOUT2, so that bringing the cost back fails here
whatever the machine's load.
"""

from __future__ import annotations

import concurrent.futures

import bide
from bide.bench.kit.workloads import Workload
from bide.engine.run import task_threads, tasks
from bide.engine.storage import latest
from bide.engine.upkeep import maintenance
from cost_helpers import run_workload, spy


class _CountedNodes(dict):
    """A flow's nodes that count how often something walks all of them."""

    walks = 0

    def values(self):  # type: ignore[override]
        type(self).walks += 1
        return super().values()

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def test_finding_the_next_nodes_does_not_walk_the_whole_flow():
    """``successors`` looked at every node of the flow each superstep: a fan-out flow's
    200 nodes were 200 checks a superstep, for the 4 nodes after the ones just done."""
    flow = Workload("fanout4", 50, 10).flow()
    flow.nodes = _CountedNodes(flow.nodes)
    seen: dict[str, dict[str, int]] = {}
    layer = flow.start_nodes()
    flow.successors(layer, {}, seen)  # the first call may index the flow once
    _CountedNodes.walks = 0
    steps = 0
    while layer:
        layer, _ = flow.successors(layer, {}, seen)
        steps += 1
    assert steps == 50 and seen == {}
    assert _CountedNodes.walks == 0, f"{_CountedNodes.walks} walks of the flow in 50 supersteps"


def test_the_next_nodes_come_in_definition_order_and_joins_wait():
    flow = bide.Flow("order")

    @flow.node(start=True)
    def a(state, ctx):
        return None

    @flow.node(start=True)
    def b(state, ctx):
        return None

    @flow.node(after=["b", "a"])
    def both(state, ctx):
        return None

    @flow.node(after=["b"])
    def after_b(state, ctx):
        return None

    @flow.node(after=["a"])
    def after_a(state, ctx):
        return None

    seen: dict[str, dict[str, int]] = {}
    assert flow.successors(["b"], {}, seen) == (["after_b"], [])
    assert seen == {"both": {"b": 1}}
    assert flow.successors(["a"], {}, seen) == (["both", "after_a"], [])
    assert seen == {}
    assert flow.successors(["b", "a"], {}, seen) == (["both", "after_b", "after_a"], [])

    @flow.node(after=["a"])
    def added_later(state, ctx):
        return None

    assert flow.successors(["a"], {}, {}) == (["after_a", "added_later"], [])


def test_siblings_appends_to_one_list_are_folded_into_the_index_at_once(engine, monkeypatch):
    """Four siblings appending to one list each decoded, re-encoded and rewrote its
    tail in the write transaction; joined, a superstep's checkpoint appends once."""
    appends = spy(monkeypatch, latest, "_append",
                  lambda tables, run_id, found, name, items: len(items))
    w = Workload("fanout4", 12, 100)
    run_workload(engine, w, "fan")
    # one append of the 4 siblings' items a superstep (0: the first, full snapshot's list)
    assert appends.count(4) == 12 and set(appends) <= {0, 4}, appends
    with engine.store.reader() as r:
        assert latest.read(r, "fan", r.head("fan").checkpoint) == w.expected()
    assert maintenance.doctor(engine.store).ok


def test_coalesced_joins_only_adjacent_appends_to_one_key():
    ops = [("log", "append", [1]), ("log", "append", (2, 3)), ("n", "set", 1),
           ("log", "append", [4]), ("m", "merge", {"a": 1}), ("m", "append", [5]),
           ("log", "append", [6])]
    assert list(latest.coalesced(ops)) == [
        ("log", "append", [1, 2, 3]), ("n", "set", 1), ("log", "append", [4]),
        ("m", "merge", {"a": 1}), ("m", "append", [5]), ("log", "append", [6])]
    assert list(latest.coalesced([])) == []


def test_a_fan_out_superstep_waits_once_for_its_tasks(monkeypatch):
    """Every result in hand, a second wait on the four futures (taking each one's lock
    again) bought nothing: it runs only when a call raised, to let the others end."""
    waits = spy(monkeypatch, concurrent.futures, "wait", lambda fs, *args, **kwargs: len(fs))
    threads = task_threads.TaskThreads("t")
    try:
        for _ in range(5):
            assert threads.map(lambda i: i * 2, [0, 1, 2, 3], 4) == [0, 2, 4, 6]
        assert waits == []

        def failing(i: int) -> int:
            if i == 1:
                raise ValueError("one of four")
            return i

        try:
            threads.map(failing, [0, 1, 2, 3], 4)
        except ValueError:
            pass
        else:
            raise AssertionError("the task's error did not come out of map")
        assert waits == [4]
    finally:
        threads.close()


def test_a_fan_out_superstep_counts_its_tasks_once(engine, monkeypatch):
    """The tasks per node were counted twice a superstep (for the backlog, then for
    the threads): once is enough when every task has a slot."""
    counted = spy(monkeypatch, tasks, "_counts", lambda todo: len(todo))
    run_workload(engine, Workload("fanout4", 12, 100), "fan")
    assert counted == [4] * 12


def test_a_fan_out_superstep_makes_no_future(engine, monkeypatch):
    """Each sibling handed to a pool's submit got a Future (a lock and a condition) that
    nobody waited on: the waiting thread waits its own way (engine/run/siblings.py)."""
    made = spy(monkeypatch, concurrent.futures.Future, "__init__", lambda self: 1)
    run_workload(engine, Workload("fanout4", 12, 100), "fan")
    assert made == []


def test_a_run_digests_its_flow_once(engine, monkeypatch):
    """The flow's digest walks every node (200 in a fan-out flow): made three times a
    run (its creation, its first checkpoint, its worker), now once; a worker makes it
    only for a full checkpoint."""
    digests = spy(monkeypatch, bide.Flow, "fingerprint", lambda self: 1)
    run_workload(engine, Workload("fanout4", 12, 100), "fan")
    assert digests == [1]
