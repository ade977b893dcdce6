"""A tool's outcome is durable when ``ctx.tool`` returns; held outcomes, an opt-in, ride.

engine/run/held.py. By default (``tool_outcomes="at_return"``) the outcome is
committed before the call returns. With ``Policy(tool_outcomes="with_next_commit")``
a call costs one durable commit before it and none of its own after it: the outcome
rides in the task's next commit, never in memory for longer than ``HOLD_BOUND``.
"""

from __future__ import annotations

import threading
import time

import bide
import pytest
from bide.engine.base.errors import StaleLease
from bide.engine.run import held
from bide.formats import IntentCompleted, IntentPrepared, Record

DEADLINE = 10.0
HELD = bide.Policy(tool_outcomes="with_next_commit")  # the opt-in whose outcomes ride


@bide.tool
def echo(x: str) -> str:
    return x


def done(key: str) -> IntentCompleted:
    task, _, index = key.partition("#")
    return IntentCompleted(run_id="r", task=task, index=int(index or 0))


def prepared(task: str, index: int) -> IntentPrepared:
    return IntentPrepared(run_id="r", task=task, index=index, tool="echo", digest=bytes(16))


def commits_of(engine, fn):
    """The types of the records in each commit ``fn`` makes, in order."""
    seen: list[list[str]] = []

    def observe(event):
        if event.kind == "commit" and event.seqs:
            with engine.store.reader() as r:
                seen.append([r.record(s).TYPE for s in event.seqs])

    remove = engine.store.on_commit(observe)
    try:
        fn()
    finally:
        remove()
    return seen


def k_calls_flow(k: int) -> bide.Flow:
    flow = bide.Flow(f"calls{k}")
    flow.node(lambda s, ctx: {"out": [ctx.tool(echo, f"a{i}") for i in range(k)]},
              name="act", start=True)
    return flow


@pytest.mark.parametrize("k", [1, 3])
def test_k_calls_cost_k_commits_and_the_outcomes_ride(engine, k, monkeypatch):
    monkeypatch.setattr(held, "HOLD_BOUND", 60.0)  # however loaded the machine: they ride
    engine.register(k_calls_flow(k))
    run = None

    def go():
        nonlocal run
        run = engine.start(f"calls{k}", run_id="r", policy=HELD)

    commits = commits_of(engine, go)[1:]  # after the run's creation
    assert run.status == bide.Status.DONE and run.state["out"] == [f"a{i}" for i in range(k)]
    # k prepares, each after the first carrying the outcome before it; the last outcome
    # rides in the checkpoint: no commit holds an outcome alone
    assert commits[:k] == [["intent_prepared"]] + [["intent_completed", "intent_prepared"]] * (
        k - 1)
    assert commits[k][:2] == ["intent_completed", "checkpoint"]
    assert not any(c == ["intent_completed"] for c in commits)
    assert sum(c.count("intent_completed") for c in commits) == k
    assert [i["status"] for i in engine.intents("r")] == ["completed"] * k


@pytest.mark.parametrize("k", [1, 3])
def test_by_default_each_outcome_is_durable_when_the_call_returns(engine, k, monkeypatch):
    monkeypatch.setattr(held, "HOLD_BOUND", 60.0)  # nothing may wait for the flusher
    seen: list[str] = []

    def act(state, ctx):
        out = []
        for i in range(k):
            out.append(ctx.tool(echo, f"a{i}"))
            with engine.store.reader() as r:  # what another process would read right now
                seen.append(r.intent(ctx.run_id, ctx.intent_key(i)).status)
        return {"out": out}

    flow = bide.Flow("durable")
    flow.node(act, name="act", start=True)
    engine.register(flow)
    commits = commits_of(engine, lambda: engine.start("durable", run_id="r"))[1:]
    assert seen == ["completed"] * k
    # each call: its prepare, then its outcome, each a commit of its own
    assert commits[:2 * k] == [["intent_prepared"], ["intent_completed"]] * k
    assert engine.get("r").status == bide.Status.DONE


def test_an_outcome_is_flushed_alone_when_the_node_keeps_working(engine):
    """The node sleeps after its call: the outcome is durable long before the node returns."""
    durable_while_running = threading.Event()

    def slow(state, ctx):
        result = ctx.tool(echo, "x")
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            with engine.store.reader() as r:
                if r.intent(ctx.run_id, ctx.intent_key(0)).status == "completed":
                    durable_while_running.set()
                    break
            time.sleep(0.001)
        return {"out": result}

    flow = bide.Flow("slow")
    flow.node(slow, name="act", start=True)
    engine.register(flow)
    commits = commits_of(engine, lambda: engine.start("slow", run_id="r", policy=HELD))
    assert durable_while_running.is_set()
    assert ["intent_completed"] in commits  # committed on its own, by the flusher


def test_a_failed_carrying_commit_keeps_the_outcome_for_the_next():
    """One refused commit does not lose the outcome it was carrying."""
    written: list[list[Record]] = []
    refuse = {"next": True}

    def commit(records):
        if refuse["next"]:
            refuse["next"] = False
            raise StaleLease("r", 1, 2)
        written.append(list(records))
        return list(range(len(records)))

    outcomes = held.HeldOutcomes(commit, bound=3600, at_return=False)
    first = done("t#0")
    outcomes.hold("t", first)
    prep = prepared("t", 1)
    with pytest.raises(StaleLease):
        outcomes.carry([prep], "t")
    assert outcomes.carry([prep], "t") == [1]  # its own seq, not the rider's
    assert written == [[first, prep]]
    outcomes.close()
    assert written == [[first, prep]]


def test_another_task_does_not_carry_my_outcome_but_a_run_commit_does():
    written: list[list[Record]] = []

    def commit(records):
        written.append(list(records))
        return list(range(len(records)))

    outcomes = held.HeldOutcomes(commit, bound=3600, at_return=False)
    mine = done("a#0")
    outcomes.hold("a", mine)
    outcomes.carry([done("b#0")], "b")
    assert written[-1] == [done("b#0")]
    outcomes.carry([done("c")])  # task None: the checkpoint
    assert written[-1][0] == mine
    outcomes.close()
    assert len(written) == 2


def test_close_flushes_what_is_still_held():
    written: list[list[Record]] = []
    outcomes = held.HeldOutcomes(lambda rs: written.append(list(rs)) or [0] * len(rs),
                                 bound=3600, at_return=False)
    outcomes.hold("a", done("a#0"))
    assert written == []
    outcomes.close()
    assert written == [[done("a#0")]]


@pytest.mark.parametrize("round_", range(50))
def test_the_flusher_and_the_next_commit_never_write_an_outcome_twice_or_out_of_order(round_):
    """Race the flusher against the task's own next commit, 50 times."""
    written: list[list[Record]] = []
    lock = threading.Lock()

    def commit(records):
        with lock:
            written.append(list(records))
        time.sleep(0.0005)
        return list(range(len(records)))

    outcomes = held.HeldOutcomes(commit, bound=0.0005 * (round_ % 4), at_return=False)
    outs = [done(f"t#{i}") for i in range(5)]
    for i, out in enumerate(outs):
        outcomes.hold("t", out)
        time.sleep(0.0003 * (round_ % 3))
        outcomes.carry([prepared("t", i + 1)], "t")
    outcomes.close()
    flat = [r for c in written for r in c if isinstance(r, IntentCompleted)]
    assert flat == outs  # each once, in order
    for i, out in enumerate(outs):  # and before the prepare that followed it
        where = next(n for n, c in enumerate(written) if out in c)
        nxt = next(n for n, c in enumerate(written)
                   if any(getattr(r, "key", "") == f"t#{i + 1}" and isinstance(r, IntentPrepared)
                          for r in c))
        assert where <= nxt


def test_a_stale_worker_cannot_flush_its_held_outcome(engine):
    """Another worker took the lease while the node kept working: the flush is refused."""
    from bide.formats import LeaseAcquired

    refused = []
    engine.store.on_commit(lambda e: refused.append(e) if e.refused else None)

    @bide.tool
    def steal(run_id: str) -> str:  # the lease moves on while the call is under way
        with engine.store.reader() as r:
            token = r.head(run_id).lease_token
        engine.store.commit([LeaseAcquired(run_id=run_id, owner="thief", token=token + 1,
                                           expires_at=time.time() + 3600)])
        return "x"

    def robbed(state, ctx):
        result = ctx.tool(steal, ctx.run_id)
        deadline = time.monotonic() + DEADLINE
        while not refused and time.monotonic() < deadline:  # the flusher tried, under its token
            time.sleep(0.001)
        return {"out": result}

    flow = bide.Flow("robbed")
    flow.node(robbed, name="act", start=True)
    engine.register(flow)
    with pytest.raises(bide.StaleLease):
        engine.start("robbed", run_id="r", policy=HELD)
    assert refused  # the flush was refused
    types = [t for _, t, _ in engine.records("r")]
    assert "intent_completed" not in types and "pending_write" not in types
    assert [i["status"] for i in engine.intents("r")] == ["prepared"]  # the thief reconciles


def test_an_outcome_is_marked_busy_before_it_leaves_the_held_ones():
    """``carry`` reads ``_held`` and ``_busy`` without the lock to go straight to the store
    when nothing is held or being flushed: between a flush taking an outcome out of
    ``_held`` and marking it busy, both looked empty, and a task's output could commit
    ahead of the outcome it was computed from (found in review)."""
    outcomes = held.HeldOutcomes(lambda rs: [0] * len(rs), bound=3600, at_return=False)
    outcomes.hold("a", done("a#0"))
    outcomes.hold("b", done("b#0"))
    seen: list[bool] = []

    class Held(dict):
        def pop(self, key, *default):
            seen.append(key in outcomes._busy)  # a reader between the two steps sees it busy
            return super().pop(key, *default)

    outcomes._held = Held(outcomes._held)
    riders, taken = outcomes._take(None)
    assert len(riders) == 2 and seen == [True, True]
    outcomes._release(taken)
    outcomes.close()
