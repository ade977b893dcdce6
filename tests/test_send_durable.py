"""A map's Sends are durable with the checkpoint that plans them, under every policy.

A resume runs exactly the planned tasks with exactly the planned args, even when
the route would now return other items; finished items are not redone when
pending writes are on; a Send task's approval resumes that item.
"""

from __future__ import annotations

import itertools
import threading

import bide
import pytest

POLICIES = [
    bide.Policy(),
    bide.Policy(checkpoint_every=3),
    bide.Policy(checkpoint_every="exit"),
    bide.Policy(pending_writes=False),
    bide.Policy(snapshot="full"),
    bide.Policy(full_every=1),
    bide.Policy(checkpoint_every="exit", pending_writes=False, snapshot="full"),
]


def drifting_flow(calls: list, broken: dict) -> bide.Flow:
    """The route sends other items each time it runs (an LLM planner would)."""
    counter = itertools.count()
    lock = threading.Lock()
    flow = bide.Flow("drift")

    @flow.node(start=True)
    def warm(state, ctx):
        return {"log": ["warm"]}

    @flow.node(after=["warm"])
    def plan(state, ctx):
        return {"log": ["plan"]}

    @flow.node(concurrency=2)
    def search(state, ctx):
        with lock:
            calls.append((ctx.task_id, state["query"]))
        if state["query"].endswith("-2") and broken["yes"]:
            raise RuntimeError("search engine down")
        return {"results": [state["query"]]}

    @flow.node(after=["search"])
    def summarize(state, ctx):
        return {"log": [f"{len(state['results'])} results"]}

    def route(state):
        batch = next(counter)
        return [bide.Send("search", {"query": f"b{batch}-{i}"}) for i in range(5)]

    flow.route("plan", route)
    flow.reducer("results", bide.append)
    flow.reducer("log", bide.append)
    return flow


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: str(p.to_dict()))
def test_a_resume_runs_the_planned_sends_not_a_new_plan(engine, policy):
    calls: list = []
    broken = {"yes": True}
    engine.register(drifting_flow(calls, broken))
    run = engine.start("drift", run_id="r-drift", policy=policy)
    assert run.status == bide.Status.FAILED and "search engine down" in run.error
    assert sorted(q for _, q in calls) == [f"b0-{i}" for i in range(5)]
    broken["yes"] = False
    calls.clear()
    run = engine.resume("r-drift")
    assert run.status == bide.Status.DONE
    planned = [f"b0-{i}" for i in range(5)]
    assert run.state["results"] == planned  # the first plan, in the order sent
    assert run.state["log"] == ["warm", "plan", "5 results"]
    if policy.pending_writes:
        assert calls == [("2:search:2", "b0-2")]  # only the failed item runs again
    else:
        assert sorted(calls) == [(f"2:search:{i}", q) for i, q in enumerate(planned)]
    assert engine.state("r-drift") == run.state


def test_the_planning_checkpoint_holds_the_sends_under_exit_policy(engine):
    calls: list = []
    engine.register(drifting_flow(calls, {"yes": False}))
    run = engine.start("drift", run_id="r-x", policy=bide.Policy(checkpoint_every="exit"))
    assert run.status == bide.Status.DONE
    cps = engine.checkpoints("r-x")
    # created, the map's planning checkpoint (forced), and the end
    assert [c.committed for c in cps] == [[], ["warm", "plan"], ["search", "summarize"]]


def test_an_approval_in_a_send_task_resumes_that_item(engine):
    calls: list = []
    flow = bide.Flow("ask")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    def charge(state, ctx):
        calls.append(state["who"])
        if state["who"] == "bob" and not ctx.approve("charge bob", {"amount": 5}):
            return {"charged": [f"{state['who']} refused"]}
        return {"charged": [state["who"]]}

    flow.route("plan", lambda s: [bide.Send("charge", {"who": w}) for w in ("ann", "bob", "cy")])
    flow.reducer("charged", bide.append)
    engine.register(flow)
    run = engine.start("ask", run_id="r-ask")
    assert run.status == bide.Status.WAITING_APPROVAL
    assert run.waiting["node_id"] == "charge" and run.waiting["item"] == "charge[1]"
    assert sorted(calls) == ["ann", "bob", "cy"]
    calls.clear()
    engine.decide(run.waiting["approval_id"], bide.Decision.APPROVE, by="ops")
    run = engine.resume("r-ask")
    assert run.status == bide.Status.DONE
    assert run.state["charged"] == ["ann", "bob", "cy"] and calls == ["bob"]


def test_astart_runs_a_map_of_async_and_sync_items_on_the_callers_loop(engine):
    import asyncio

    flow = bide.Flow("amix")
    running = {"now": 0, "max": 0}

    @flow.node(start=True)
    async def plan(state, ctx):
        return {}

    @flow.node(concurrency=2)
    async def fetch(state, ctx):
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        await asyncio.sleep(0.01)
        running["now"] -= 1
        return {"got": [state["i"]]}

    @flow.node()
    def parse(state, ctx):
        return {"parsed": [state["i"]]}

    flow.route("plan", lambda s: [*(bide.Send("fetch", {"i": i}) for i in range(6)),
                                  *(bide.Send("parse", {"i": i}) for i in range(3))])
    flow.reducer("got", bide.append)
    flow.reducer("parsed", bide.append)
    engine.register(flow)
    run = asyncio.run(engine.astart("amix", run_id="r-amix"))
    assert run.state == {"got": list(range(6)), "parsed": [0, 1, 2]} and running["max"] == 2


def test_a_fork_at_the_planning_checkpoint_runs_the_same_items(engine):
    calls: list = []
    engine.register(drifting_flow(calls, {"yes": False}))
    engine.start("drift", run_id="r-a")
    planned = [c for c in engine.checkpoints("r-a") if c.next == ["search[0..4]"]]
    assert len(planned) == 1
    engine.fork("r-a", planned[0].version, new_id="r-b")
    calls.clear()
    run = engine.resume("r-b")
    assert run.status == bide.Status.DONE
    assert sorted(q for _, q in calls) == [f"b0-{i}" for i in range(5)]  # not a new plan
    assert run.state["results"] == [f"b0-{i}" for i in range(5)]
