"""Map with ``bide.Send``: one task per item, its own state, reduced like any node's."""

from __future__ import annotations

import threading
import time

import bide
import pytest


def map_flow(items_key: str = "queries", *, concurrency: int = 8, hold: bool = False,
             seen: list | None = None) -> bide.Flow:
    """``hold``: each task waits (2 s at most) until as many run as may, or all have started,
    then a little more: the high-water mark shows the bound however slowly threads start
    under load, and a task beyond it would be seen."""
    flow = bide.Flow("research")
    lock = threading.Condition()
    running = {"now": 0, "max": 0, "started": 0}

    @flow.node(start=True)
    def plan(state, ctx):
        return {"queries": [f"q{i}" for i in range(state["n"])]}

    @flow.node(concurrency=concurrency)
    def search(state, ctx):
        with lock:
            running["now"] += 1
            running["started"] += 1
            running["max"] = max(running["max"], running["now"])
            lock.notify_all()
            deadline = time.monotonic() + 2
            while hold and running["now"] < concurrency and running["started"] < total[0]:
                if not lock.wait(deadline - time.monotonic()):
                    break
        if hold:
            time.sleep(0.02)  # time for a task beyond the bound to show up, were there one
        try:
            if seen is not None:
                seen.append((ctx.task_id, dict(state)))
            return {"results": [f"found {state['query']}"]}
        finally:
            with lock:
                running["now"] -= 1

    @flow.node(after=["search"])
    def summarize(state, ctx):
        return {"summary": len(state["results"]), "summarized": state.get("summarized", 0) + 1}

    total = [0]

    def route(s):
        total[0] = len(s[items_key])
        return [bide.Send("search", {"query": q}) for q in s[items_key]]

    flow.route("plan", route)
    flow.reducer("results", bide.append)
    flow.running = running  # type: ignore[attr-defined]
    return flow


def test_each_send_is_one_task_with_its_arg_as_state(engine):
    seen: list = []
    engine.register(map_flow(seen=seen))
    run = engine.start("research", input={"n": 5}, run_id="r-map")
    assert run.status == bide.Status.DONE
    assert run.state["results"] == [f"found q{i}" for i in range(5)]  # in the order sent
    assert run.state["summary"] == 5 and run.state["summarized"] == 1  # the join runs once
    assert sorted(seen) == [(f"1:search:{i}", {"query": f"q{i}"}) for i in range(5)]
    cps = engine.checkpoints("r-map")
    assert [c.committed for c in cps][1:] == [["plan"], ["search"], ["summarize"]]


def test_sends_mix_with_names_and_end(engine):
    flow = bide.Flow("mix")

    @flow.node(start=True)
    def start(state, ctx):
        return {"log": ["start"]}

    @flow.node()
    def work(state, ctx):
        return {"log": [f"work {state.get('i', 'static')}"]}

    @flow.node()
    def other(state, ctx):
        return {"log": ["other"]}

    flow.route("start", lambda s: ["work", bide.Send("work", {"i": 1}), "other", bide.END,
                                   bide.Send("work", {"i": 2})])
    flow.reducer("log", bide.append)
    engine.register(flow)
    run = engine.start("mix", run_id="r-mix")
    assert run.state["log"] == ["start", "work static", "other", "work 1", "work 2"]
    flow2 = bide.Flow("single")

    @flow2.node(start=True)
    def one(state, ctx):
        return {}

    @flow2.node()
    def two(state, ctx):
        return {"got": state["x"]}

    flow2.route("one", lambda s: bide.Send("two", {"x": 7}))
    engine.register(flow2)
    assert engine.start("single").state == {"got": 7}


def test_the_arg_is_read_only_and_not_the_run_state(engine):
    flow = bide.Flow("ro")

    @flow.node(start=True)
    def a(state, ctx):
        return {"secret": 1}

    @flow.node()
    def b(state, ctx):
        assert "secret" not in state
        state["x"] = 2  # refused: a mapping proxy
        return {}

    flow.route("a", lambda s: bide.Send("b", {"x": 1}))
    engine.register(flow)
    run = engine.start("ro")
    assert run.status == bide.Status.FAILED and "does not support item assignment" in run.error


@pytest.mark.parametrize(("target", "words"), [
    (bide.Send("nowhere", {}), ["'plan'", "a Send to 'nowhere'", "not a node"]),
    (bide.Send("search", ["q"]), ["'plan'", "'search'", "arg of type list", "mapping"]),
    (bide.Send("search", {1: "q"}), ["'plan'", "'search'", "non-string key 1"]),
    (bide.Send("search", {"q": object()}), ["'plan'", "'search'", "cannot keep", "object"]),
])
def test_a_bad_send_fails_the_run_naming_route_and_node_and_commits_no_task(engine, target,
                                                                            words):
    seen: list = []
    flow = map_flow(seen=seen)
    flow.routes["plan"] = lambda s: [bide.Send("search", {"query": "fine"}), target]
    engine.register(flow)
    run = engine.start("research", input={"n": 1}, run_id="r-bad")
    assert run.status == bide.Status.FAILED
    assert "FlowError" in run.error
    assert all(w in run.error for w in words), run.error
    assert seen == [] and run.state == {"n": 1}  # no task ran, the superstep did not fold
    assert run.state_version == 0


def test_two_send_tasks_setting_a_key_without_reducer_name_both(engine):
    flow = bide.Flow("clash")

    @flow.node(start=True)
    def a(state, ctx):
        return {}

    @flow.node()
    def b(state, ctx):
        return {"k": state["i"]}

    flow.route("a", lambda s: [bide.Send("b", {"i": i}) for i in range(2)])
    engine.register(flow)
    run = engine.start("clash")
    assert run.status == bide.Status.FAILED
    assert "'b[0]' and 'b[1]'" in run.error and "'k'" in run.error


@pytest.mark.parametrize("limit", [1, 3, 8])
def test_send_tasks_run_at_most_concurrency_at_once(engine, limit):
    flow = map_flow(concurrency=limit, hold=True)
    engine.register(flow)
    run = engine.start("research", input={"n": 12})
    assert run.status == bide.Status.DONE and len(run.state["results"]) == 12
    assert flow.running["max"] == limit  # type: ignore[attr-defined]


def test_default_concurrency_is_eight(engine):
    flow = map_flow(hold=True)
    engine.register(flow)
    engine.start("research", input={"n": 20})
    assert flow.running["max"] == 8  # type: ignore[attr-defined]


def test_async_send_tasks_are_bounded_too(engine):
    import asyncio

    flow = bide.Flow("amap")
    running = {"now": 0, "max": 0}

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node(concurrency=3)
    async def fetch(state, ctx):
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        await asyncio.sleep(0.02)
        running["now"] -= 1
        return {"got": [state["i"]]}

    flow.route("plan", lambda s: [bide.Send("fetch", {"i": i}) for i in range(10)])
    flow.reducer("got", bide.append)
    engine.register(flow)
    run = engine.start("amap")
    assert run.state["got"] == list(range(10)) and running["max"] == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_concurrency_must_be_a_positive_int(bad):
    flow = bide.Flow("f")
    with pytest.raises(bide.FlowError, match="concurrency must be an int >= 1"):
        flow.node(lambda s, c: None, name="x", concurrency=bad)


def test_a_node_reached_only_through_sends_needs_no_start_or_after():
    flow = map_flow()
    flow.validate()
    assert not flow.nodes["search"].start and not flow.nodes["search"].after
