"""Issue 11 items 6 and 21: async tools, and the engine's async API.

``await ctx.atool(t, ...)`` runs a tool through the same intent log as
``ctx.tool``: an async tool on the node's loop, a plain one in a thread, so
async nodes overlap. ``engine.astart``/``aresume``/``adecide``/``asubmit`` run a
flow on the caller's loop; the sync API works when a loop already runs.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import bide
import pytest
from conftest import count_lines, run_app

DEADLINE = 30  # seconds: no test here may hang


def timed(coro):
    return asyncio.run(asyncio.wait_for(coro, DEADLINE))


# -- async tools (item 6) ------------------------------------------------------------
@bide.tool
async def fetch(url: str, *, idempotency_key: str) -> dict:
    await asyncio.sleep(0.01)
    return {"url": url, "key": idempotency_key, "loop": id(asyncio.get_running_loop())}


def test_an_async_tool_is_awaited_through_the_intent_log(engine):
    flow = bide.Flow("afetch")

    @flow.node(start=True)
    async def get(state, ctx):
        first = await ctx.atool(fetch, "https://a")
        again = await ctx.atool(fetch, "https://b")
        return {"urls": [first["url"], again["url"]], "same_loop": first["loop"] == again["loop"]
                and first["loop"] == id(asyncio.get_running_loop())}

    engine.register(flow)
    run = engine.start("afetch", run_id="r1")
    assert run.status == "DONE", run.error
    assert run.state == {"urls": ["https://a", "https://b"], "same_loop": True}
    rows = engine.intents("r1")
    assert [(i["tool"], i["status"]) for i in rows] == [("fetch", "completed")] * 2
    assert rows[0]["result"]["key"] == rows[0]["idempotency_key"]


def test_an_async_tool_through_ctx_tool_is_refused_before_any_intent(engine):
    flow = bide.Flow("wrong")

    @flow.node(start=True)
    def get(state, ctx):
        return {"page": ctx.tool(fetch, "https://a")}

    engine.register(flow)
    run = engine.start("wrong", run_id="r1")
    assert run.status == "FAILED"
    assert "ToolNeedsAwait" in run.error and "await ctx.atool(fetch" in run.error
    assert "'get'" in run.error
    assert engine.intents("r1") == []  # nothing was recorded for a call that cannot happen


def test_an_async_reconciler_needs_atool_too(engine):
    async def check(idempotency_key, x):
        return bide.Outcome.not_done()

    @bide.tool(reconcile=check)
    def plain(x):
        return x

    flow = bide.Flow("rec")

    @flow.node(start=True)
    def go(state, ctx):
        return {"x": ctx.tool(plain, 1)}

    engine.register(flow)
    run = engine.start("rec", run_id="r1")
    assert run.status == "FAILED" and "ToolNeedsAwait" in run.error
    assert engine.intents("r1") == []


@bide.tool
def slow_plain(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@bide.tool
async def slow_async(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


def calls_flow(name: str, tool: bide.Tool, nodes: int, calls: int) -> bide.Flow:
    """``nodes`` async nodes in one superstep, each awaiting ``calls`` calls of ``tool``."""
    flow = bide.Flow(name)
    for n in range(nodes):
        async def node(state, ctx, n=n):
            return {f"n{n}": [await ctx.atool(tool, 0.4) for _ in range(calls)]}
        flow.node(name=f"n{n}", start=True)(node)
    return flow


@pytest.mark.parametrize("tool", [slow_plain, slow_async], ids=["plain", "async"])
def test_tools_awaited_in_async_nodes_overlap(engine, tool):
    engine.register(calls_flow("serial", tool, nodes=1, calls=2),
                    calls_flow("parallel", tool, nodes=2, calls=1))
    t0 = time.monotonic()
    assert engine.start("serial").status == "DONE"
    serial = time.monotonic() - t0
    t0 = time.monotonic()
    assert engine.start("parallel").status == "DONE"
    parallel = time.monotonic() - t0
    assert parallel < 0.75 * serial, (parallel, serial)


def test_atool_of_a_tool_that_needs_approval_pauses_then_calls(engine):
    @bide.tool(needs_approval=True)
    async def wire(amount: int) -> str:
        return f"wired {amount}"

    flow = bide.Flow("wire")

    @flow.node(start=True)
    async def pay(state, ctx):
        return {"paid": await ctx.atool(wire, 5)}

    engine.register(flow)
    run = engine.start("wire", run_id="r1")
    assert run.status == "WAITING_APPROVAL"
    engine.decide(run.waiting["approval_id"], "approve", by="alice")
    run = engine.resume("r1")
    assert run.status == "DONE" and run.state == {"paid": "wired 5"}


# -- the async API (item 21) -----------------------------------------------------------
def mixed_flow() -> bide.Flow:
    flow = bide.Flow("mixed")

    @flow.node(start=True)
    async def think(state, ctx):
        await asyncio.sleep(0.01)
        return {"loop": id(asyncio.get_running_loop()), "q": state["q"]}

    @flow.node(after=["think"])
    def block(state, ctx):
        time.sleep(0.3)  # a sync node: must not block the caller's loop
        return {"blocked": True}

    @flow.node(after=["block"])
    async def answer(state, ctx):
        return {"a": await ctx.atool(fetch, state["q"])}

    return flow


def test_astart_runs_async_nodes_on_the_callers_loop_without_blocking_it(engine):
    engine.register(mixed_flow())

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        run = await engine.astart("mixed", input={"q": "disk"}, run_id="r1")
        ticking.cancel()
        return run, id(asyncio.get_running_loop()), ticks

    run, loop_id, ticks = timed(main())
    assert run.status == "DONE", run.error
    assert run.state["loop"] == loop_id and run.state["a"]["loop"] == loop_id
    assert ticks >= 10  # the loop kept turning while the sync node slept 0.3 s


def test_the_sync_api_works_inside_a_running_loop(engine):
    engine.register(mixed_flow())

    async def main():
        return engine.start("mixed", input={"q": "disk"}, run_id="r1")

    run = timed(main())
    assert run.status == "DONE", run.error
    assert run.state["blocked"] is True and run.state["a"]["url"] == "disk"


def test_asubmit_adecide_aresume(engine):
    flow = bide.Flow("ask")

    @flow.node(start=True)
    async def ask(state, ctx):
        return {"ok": ctx.approve("deploy", {"to": "prod"})}

    engine.register(flow)

    async def main():
        run_id = await engine.asubmit("ask", run_id="r1")
        assert engine.get(run_id).status == "PENDING"
        run = await engine.aresume(run_id)
        assert run.status == "WAITING_APPROVAL"
        assert (await engine.aresume(run_id)).status == "WAITING_APPROVAL"  # undecided yet
        assert await engine.adecide(run.waiting["approval_id"], "approve", by="alice") is True
        return await engine.aresume(run_id)

    run = timed(main())
    assert run.status == "DONE" and run.state == {"ok": True}


def test_a_cancelled_astart_leaves_the_run_interrupted_and_resumable(engine):
    started = threading.Event()
    flow = bide.Flow("long")

    @flow.node(start=True)
    async def wait(state, ctx):
        if not state.get("again"):
            started.set()
            await asyncio.sleep(DEADLINE)
        return {"done": True}

    engine.register(flow)

    async def main():
        task = asyncio.create_task(engine.astart("long", run_id="r1"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    timed(main())
    run = engine.get("r1")
    assert run.status == "INTERRUPTED" and run.head.lease_owner is None
    assert "cancelled" in run.reason


# -- crash tests: kill a worker at each step of an async tool's call ---------------------
POINTS = ["before_intent_prepared", "after_intent_prepared", "after_tool_effect",
          "after_intent_completed", "during_call"]


def atool_app(tmp_path, kind, api, *args, fault=None, env=None):
    return run_app("async_tool_app.py", str(tmp_path / "home"), str(tmp_path / "effects"),
                   kind, api, *args, fault=fault, env=env, timeout=DEADLINE)


def crash_then_resume(tmp_path, kind, api, point):
    if point == "during_call":
        out = atool_app(tmp_path, kind, api, "start", "r1", env={"DIE_IN_TOOL": "1"})
    else:
        out = atool_app(tmp_path, kind, api, "start", "r1", fault=f"{point}:1:kill")
    assert out.returncode == -9, out.stderr
    out = atool_app(tmp_path, kind, api, "resume", "r1")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def effects_of(tmp_path):
    return sum(count_lines(tmp_path / "effects").values())


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("point", POINTS)
def test_an_async_tool_with_a_reconciler_takes_effect_once_across_a_crash(tmp_path, point,
                                                                          api):
    run = crash_then_resume(tmp_path, "reconciled", api, point)
    assert run["status"] == "DONE", run["error"]
    assert run["state"] == {"result": {"sha": "abc"}, "after": True}
    assert effects_of(tmp_path) == 1
    if point in ("after_tool_effect", "during_call"):
        assert run["intents"][0]["via"] == "reconcile"  # the async reconciler said "done"


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("point", POINTS)
def test_an_async_tool_in_doubt_waits_for_a_human_not_a_second_call(tmp_path, point, api):
    run = crash_then_resume(tmp_path, "plain", api, point)
    if point in ("after_intent_prepared", "after_tool_effect", "during_call"):
        assert run["status"] == "NEEDS_RECONCILIATION"
        assert run["waiting"]["tool"] == "send_email"
        assert effects_of(tmp_path) == (0 if point == "after_intent_prepared" else 1)
        out = atool_app(tmp_path, "plain", api, "decide", "r1", "retry")
        assert out.returncode == 0, out.stderr
        assert effects_of(tmp_path) == (1 if point == "after_intent_prepared" else 2)
    else:
        assert run["status"] == "DONE" and run["state"]["result"] == "sent to ops@example.com"
        assert effects_of(tmp_path) == 1
