"""A superstep's Python outside the store, counted (not timed): STEPHOT's cuts.

Many runs share one flush (group commit), so the Python a superstep runs outside
the store's write transaction bounds how far concurrent runs scale; a fan-out
superstep's threads that slept and woke for each other were most of what it cost
over a chain's. Each test pins a cut, so bringing the cost back fails here
whatever the machine's load.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from pathlib import Path
from typing import Any

import bide
import pytest
from bide.bench.kit.memory import run_in_memory
from bide.bench.kit.workloads import Workload
from bide.engine.base import faults
from bide.engine.run import tasks
from bide.engine.storage import store as store_module
from bide.engine.storage.store import WriteEvent
from bide.engine.upkeep import maintenance
from bide.formats import Checkpoint, decode, encode
from bide.formats import codec as codec_module

# The modules whose Python a superstep runs outside the store (the store's write
# section, LMDBStore._run_batch, is not counted: it is another cut's).
STEP_MODULES = ("executor", "tasks", "send", "state", "flow", "held", "step", "siblings",
                "context", "call_refs", "faults", "store", "codec", "values", "envelope")
# Python calls a chain superstep of the ``long`` workload makes in those modules,
# measured when the cuts landed (106 before them).
CHAIN_CALLS = 66


def _calls_per_superstep(home: Path, steps: tuple[int, int]) -> collections.Counter[str]:
    """Python calls per superstep in STEP_MODULES, outside the store's write section:
    the difference of two runs of different lengths (what a run costs once cancels)."""
    counts: list[collections.Counter[str]] = []
    with bide.open(home, durability="fast") as engine:
        for k in steps:
            w = Workload("long", k, 100)
            flow = w.flow()
            engine.register(flow)
            counted: collections.Counter[str] = collections.Counter()
            depth = 0

            def profile(frame: Any, event: str, arg: Any,
                        counted: collections.Counter[str] = counted) -> None:
                nonlocal depth
                code = frame.f_code
                if event == "call":
                    if code.co_name == "_run_batch":
                        depth += 1
                    module = Path(code.co_filename).stem
                    if not depth and module in STEP_MODULES and "bide" in code.co_filename:
                        counted[f"{module}.{code.co_name}"] += 1
                elif event == "return" and code.co_name == "_run_batch":
                    depth -= 1

            sys.setprofile(profile)
            try:
                run = engine.start(flow.name, w.initial(), run_id=f"r{k}")
            finally:
                sys.setprofile(None)
            assert run.state == w.expected()
            counts.append(counted)
    return counts[1] - counts[0]


@pytest.fixture
def unobserved(monkeypatch):
    """No process-wide commit observer (one another test left would be told each commit)."""
    monkeypatch.setattr(store_module, "_everywhere", [])


def test_a_chain_superstep_stays_within_its_python_calls(tmp_path, unobserved):
    """106 Python calls a superstep in these modules before STEPHOT's cuts, 66 after."""
    short, long = 20, 60
    diff = _calls_per_superstep(tmp_path / "home", (short, long))
    per_step = sum(diff.values()) / (long - short)
    top = ", ".join(f"{name} {n / (long - short):g}" for name, n in diff.most_common(8))
    assert per_step <= CHAIN_CALLS, f"{per_step:g} calls a superstep (most: {top})"


def test_a_chain_superstep_wires_no_plain_value_twice(tmp_path, unobserved):
    """Encoding a delta of strings and ints asked ``to_wire`` of every field and op
    (None included) and copied the ops; fields of msgpack's own types skip it."""
    diff = _calls_per_superstep(tmp_path / "home", (10, 30))
    assert diff["codec._wire_ops"] <= 2 * 20  # deferred and inline ops of each checkpoint
    # to_wire: the check of each update value (items, count) and the custom reducer's
    # result, and the op lists encoded (each a list of strings): no field, no scalar op
    assert diff["values.to_wire"] <= 5 * 20, diff["values.to_wire"]
    assert diff["codec._wire_fields"] <= 1 * 20


def test_encoding_a_delta_of_plain_values_keeps_its_ops_and_bytes():
    """The ops are handed to the encoder as they are, and the bytes are those pinned."""
    ops = [("items", "append", ["a" * 10]), ("count", "set", 3)]
    cp = Checkpoint(run_id="r", version=2, superstep=2, base=1, writes=[-1], deferred=ops,
                    committed=["step"], next=["step"], at=1.5, ops=[("n", "set", None)])
    assert codec_module._wire_record(cp) is cp  # nothing to change: no copy
    assert codec_module._wire_ops(ops) is ops
    # a kept type still travels as an extension value
    kept = [("when", "set", (1, 2))]
    assert codec_module._wire_ops(kept) is not kept
    assert decode(encode(cp)) == cp


def _gated_fanout(width: int, steps: int) -> tuple[bide.Flow, dict[str, Any]]:
    """A fan-out whose last task of each layer finishes first: the others wait for it
    (the executor's thread runs the last task itself)."""
    flow = bide.Flow("gated")
    flow.reducer("trail", bide.append)
    for layer in range(steps):
        gate = threading.Lock()  # a lock, not an Event: no Condition.wait of its own
        gate.acquire()
        for j in range(width):
            name = f"l{layer}_{j}"

            def node(state, ctx, name=name, gate=gate, last=j == width - 1):
                if last:
                    gate.release()
                else:
                    assert gate.acquire(timeout=30), "the last task never ran"
                    gate.release()
                return {"trail": [name]}

            prev = tuple(f"l{layer - 1}_{i}" for i in range(width)) if layer else ()
            flow.node(node, name=name, start=layer == 0, after=prev)
    return flow, {"trail": []}


def test_finished_siblings_do_not_wait_for_each_other_in_their_threads(engine, monkeypatch):
    """Each finished task waited on a condition for its siblings and was woken by the
    last: three threads slept and woke every superstep of a fan-out-4. Now the thread
    that waits for the superstep anyway watches their outputs' bound."""
    monkeypatch.setattr(tasks, "SIBLING_BOUND", 60.0)  # no sibling misses it
    waits: list[str] = []
    real = threading.Condition.wait

    def counted(self: threading.Condition, timeout: float | None = None) -> bool:
        waits.append(threading.current_thread().name)
        return real(self, timeout)

    monkeypatch.setattr(threading.Condition, "wait", counted)
    flow, state = _gated_fanout(4, 6)
    engine.register(flow)
    run = engine.start(flow.name, state, run_id="gated")
    assert run.status == bide.Status.DONE and len(run.state["trail"]) == 24
    in_tasks = [name for name in waits if name.startswith("bide-gated")]  # the run's threads
    assert in_tasks == [], f"{len(in_tasks)} waits in task threads in 6 supersteps"
    types = [t for _, t, _ in engine.records("gated")]
    assert types.count("pending_write") == 0  # every output rode in its checkpoint
    assert maintenance.doctor(engine.store).ok


def test_a_slow_task_of_the_waiting_thread_lets_its_finished_siblings_commit(
        engine, monkeypatch):
    """The waiting thread runs the last task itself: while it is slow, the finished
    siblings keep their bound by themselves and commit their outputs alone."""
    monkeypatch.setattr(tasks, "SIBLING_BOUND", 0.005)
    flow = bide.Flow("slow-last")
    committed = threading.Event()

    def slow(state, ctx):
        if not committed.wait(30):
            raise AssertionError("the finished siblings never committed")
        return {"slow": 1}

    for name in ("x", "y"):
        flow.node(start=True, name=name)(lambda state, ctx, n=name: {n: 1})
    flow.node(start=True, name="slow")(slow)  # last: it runs in the waiting thread
    real = tasks._commit_alone

    def noted(*args: Any) -> int:
        seq = real(*args)
        with engine.store.reader() as r:
            writes = [s for s, t in r.run_entries("r-slow") if t == "pending_write"]
        if len(writes) == 2:
            committed.set()
        return seq

    monkeypatch.setattr(tasks, "_commit_alone", noted)
    engine.register(flow)
    run = engine.start("slow-last", run_id="r-slow")
    assert run.status == bide.Status.DONE and run.state == {"x": 1, "y": 1, "slow": 1}
    types = [t for _, t, _ in engine.records("r-slow")]
    assert types.count("pending_write") == 2  # the slow one's output rode in the checkpoint
    assert maintenance.doctor(engine.store).ok


def test_a_node_that_exits_in_a_sibling_thread_stops_the_superstep(engine):
    """An exception that is no node failure (SystemExit) in a task thread reaches the
    waiting thread once every task ended, as from a pool's map."""
    flow = bide.Flow("exits")
    ran: list[str] = []

    def leave(state, ctx):
        raise SystemExit(3)

    def stay(state, ctx):
        ran.append("stay")
        return {"stay": 1}

    flow.node(start=True, name="leave")(leave)
    flow.node(start=True, name="stay")(stay)
    engine.register(flow)
    with pytest.raises(SystemExit):
        engine.start("exits", run_id="r-exit")
    assert ran == ["stay"]


def test_the_memory_baseline_runs_a_fan_out_as_the_engine_does():
    """The durable cost is the engine's time over the baseline's: the last task of a
    fan-out runs in the calling thread in both, or thread hand-offs count as durability."""
    w = Workload("fanout4", 6, 10)
    flow = w.flow()
    threads: list[threading.Thread] = []
    for name, node in list(flow.nodes.items()):
        def watched(state, ctx, fn=node.fn):
            threads.append(threading.current_thread())
            return fn(state, ctx)

        flow.nodes[name] = type(node)(node.name, watched, node.after, node.start)
    state, steps = run_in_memory(flow, w.initial())
    assert state == w.expected() and steps == 6
    assert threads.count(threading.main_thread()) == 6  # one task a superstep, inline


def test_an_output_held_past_its_bound_rides_if_its_last_sibling_finished_within_it(
        engine, monkeypatch):
    """The waiting thread judged a held output against the time it woke while a
    sibling's call had not yet returned, not against when that sibling finished:
    a sibling that finished within the bound but returned after it made the held
    output commit alone (one commit more, nothing lost)."""
    bound = 0.5  # the sibling finishes well within it, however loaded the machine
    monkeypatch.setattr(tasks, "SIBLING_BOUND", bound)
    held = threading.Event()
    real = faults.point

    def point(name: str) -> None:
        if name == "sibling_output_held":
            if threading.current_thread() is threading.main_thread():
                held.set()  # "fast" finished (the waiting thread's own task): held next
            else:
                time.sleep(2 * bound)  # "slow" finished, its call returns past the bound
        real(name)

    def slow(state, ctx):
        if not held.wait(30):
            raise AssertionError("the waiting thread's task never finished")
        return {"slow": 1}

    flow = bide.Flow("late-return")
    flow.node(start=True, name="slow")(slow)
    flow.node(start=True, name="fast")(lambda state, ctx: {"fast": 1})  # the waiting thread's
    monkeypatch.setattr(faults, "point", point)
    commits: list[WriteEvent] = []
    stop = engine.store.on_commit(commits.append)
    try:
        engine.register(flow)
        run = engine.start("late-return", run_id="r-late")
    finally:
        stop()
    assert run.status == bide.Status.DONE and run.state == {"slow": 1, "fast": 1}
    types = [t for _, t, _ in engine.records("r-late")]
    assert types.count("pending_write") == 0, "the held output committed alone"
    assert len(commits) == 2, commits  # the run and its lease; the checkpoint and the release
