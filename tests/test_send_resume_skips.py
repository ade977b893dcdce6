"""A resume runs only the paused items that can make progress.

In a map whose N items each pause for a person, every decision resumes the run.
Before, each resume ran again every item still paused (each reached its
``ctx.approve`` again and paused again): O(N) node bodies per decision, O(N^2)
over the map. Now a task whose latest request in the superstep is still open
(undecided, unexpired, an approval or a question) and none of whose tool calls
is in doubt is not run: it would pause at the same request (engine/run/waits.py).
A counter outside the store counts how often each item's node body started.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import bide
import pytest
from bide.engine.base.vocabulary import WAITING
from bide.engine.run.context import args_digest
from bide.formats import IntentPrepared
from bide.formats.records import compact_digest
from test_send_durable import POLICIES

N = 6


def counting_flow(started: Counter, *, asks: int = 1, kind: str = "approve",
                  expires_in: float | None = None, tool: bide.Tool | None = None) -> bide.Flow:
    flow = bide.Flow("skips")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    def item(state, ctx):
        i = state["i"]
        started[i] += 1
        if tool is not None and i == 2:
            ctx.tool(tool, i)
        got = []
        for k in range(asks):
            if kind == "approve":
                got.append(ctx.approve("ship", {"item": i, "k": k}, expires_in=expires_in))
            else:
                got.append(ctx.ask(f"how many of item {i} ({k})?", schema=int,
                                   expires_in=expires_in))
        return {"done": [[i, *got]]}

    @flow.node(after=["item"])
    def total(state, ctx):
        return {"total": len(state["done"])}

    flow.route("plan", lambda s: [bide.Send("item", {"i": i}) for i in range(s["n"])])
    flow.reducer("done", bide.append)
    return flow


def waiting_ids(engine, run_id: str) -> dict[int, str]:
    """Item -> the id of the request it waits on."""
    with engine.store.reader() as r:
        reqs = [r.approval(p["approval_id"]) for p in engine.pending() if p["run_id"] == run_id]
    return {int(q.task.rpartition(":")[2]): q.approval_id for q in reqs}


def decide(engine, aid: str, kind: str, value=None) -> None:
    if kind == "approve":
        engine.decide(aid, bide.Decision.APPROVE, by="ops")
    else:
        engine.answer(aid, value, by="ops")


def item_of(engine, aid: str) -> int:
    with engine.store.reader() as r:
        return int(r.approval(aid).task.rpartition(":")[2])


@pytest.mark.parametrize("kind", ["approve", "ask"])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: str(p.to_dict()))
def test_deciding_one_of_n_paused_items_runs_exactly_that_item(engine, policy, kind):
    started: Counter = Counter()
    engine.register(counting_flow(started, kind=kind))
    run = engine.start("skips", input={"n": N}, run_id="r", policy=policy)
    assert run.status in WAITING and started == Counter(range(N))
    # a decision of an item the run does not report waiting on resumes that item alone
    # (tests/test_send_wake_any.py); the run still waits on the others
    ids = waiting_ids(engine, "r")
    assert run.waiting["approval_id"] != ids[3]
    decide(engine, ids[3], kind, 13)
    run = engine.resume("r")
    assert run.status in WAITING and started == Counter([*range(N), 3])
    finished: set[int] = {3}  # items whose output no pending write keeps run again
    while run.status != bide.Status.DONE:
        assert run.status in WAITING, (run.status, run.error)
        i = item_of(engine, run.waiting["approval_id"])
        before = Counter(started)
        decide(engine, run.waiting["approval_id"], kind, 10 + i)
        run = engine.resume("r")
        ran = {i}
        again = set() if policy.pending_writes else finished
        assert started - before == Counter(ran | again), (i, started - before)
        finished |= ran
    value = (lambda i: True) if kind == "approve" else (lambda i: 10 + i)
    assert sorted(run.state["done"]) == [[i, value(i)] for i in range(N)]
    assert run.state["total"] == N
    if policy.pending_writes:
        assert started == Counter({i: 2 for i in range(N)})


def test_two_asks_in_a_row_run_the_item_at_each_answer_and_no_other(engine):
    started: Counter = Counter()
    engine.register(counting_flow(started, asks=2, kind="ask"))
    run = engine.start("skips", input={"n": N}, run_id="r")
    answers = 0
    while run.status != bide.Status.DONE:
        assert run.status == bide.Status.WAITING_INPUT, (run.status, run.error)
        i = item_of(engine, run.waiting["approval_id"])
        before = Counter(started)
        engine.answer(run.waiting["approval_id"], 100 * i + answers % 2, by="ops")
        answers += 1
        run = engine.resume("r")  # at its first answer it pauses at its second ask
        assert started - before == Counter([i]), (i, started - before)
    assert answers == 2 * N and started == Counter({i: 3 for i in range(N)})
    assert sorted(run.state["done"]) == [[i, 100 * i, 100 * i + 1] for i in range(N)]


@pytest.mark.parametrize("kind", ["approve", "ask"])
def test_an_expired_request_runs_its_item(engine, kind):
    started: Counter = Counter()
    engine.register(counting_flow(started, kind=kind, expires_in=0.3))
    run = engine.start("skips", input={"n": 3}, run_id="r")
    assert run.status in WAITING
    time.sleep(0.4)  # every request expires undecided: each item must run to learn it
    if kind == "approve":
        run = engine.resume("r")
        assert run.status == bide.Status.DONE and sorted(run.state["done"]) == [
            [0, False], [1, False], [2, False]]
    else:
        run = engine.resume("r")  # ctx.ask raises QuestionExpired: the node fails
        assert run.status == bide.Status.FAILED and "QuestionExpired" in run.error
    assert started == Counter({0: 2, 1: 2, 2: 2})


def test_an_item_with_a_tool_call_in_doubt_runs(engine):
    started: Counter = Counter()
    engine.register(counting_flow(started))
    run = engine.start("skips", input={"n": 3}, run_id="r")
    ids = waiting_ids(engine, "r")
    # a tool call of item 1 with no outcome, as a crash between prepare and complete leaves it
    engine.store.commit([IntentPrepared(run_id="r", task="1:item:1", index=7, tool="charge",
                                        digest=compact_digest(args_digest("charge", (1,), {})))])
    engine.decide(ids[0], bide.Decision.APPROVE, by="ops")
    run = engine.resume("r")
    assert run.status == bide.Status.WAITING_APPROVAL
    assert started == Counter({0: 2, 1: 2, 2: 1})


def test_an_item_waiting_on_a_reconciliation_runs_its_reconciler_again(engine):
    known = {"done": False}

    def reconcile(key, amount):
        return bide.Outcome.done("charged") if known["done"] else bide.Outcome.unknown()

    @bide.tool(reconcile=reconcile)
    def charge(amount: int) -> str:
        return "charged"

    started: Counter = Counter()
    engine.register(counting_flow(started, tool=charge))
    engine.submit("skips", input={"n": 3}, run_id="r")
    # item 2's charge with no outcome, as a crash between prepare and complete leaves it
    engine.store.commit([IntentPrepared(run_id="r", task="1:item:2", index=0, tool="charge",
                                        digest=compact_digest(args_digest("charge", (2,), {})))])
    run = engine.resume("r")
    assert run.status == bide.Status.NEEDS_RECONCILIATION
    assert started == Counter({0: 1, 1: 1, 2: 1})
    known["done"] = True  # the reconciler can tell now; nobody decided the reconciliation
    engine.decide(waiting_ids(engine, "r")[0], bide.Decision.APPROVE, by="ops")
    run = engine.resume("r")
    assert started == Counter({0: 2, 1: 1, 2: 2})
    assert run.status == bide.Status.WAITING_APPROVAL  # item 2 now waits on its approval
    with engine.store.reader() as r:
        assert r.intent("r", "1:item:2#0").status == bide.IntentStatus.COMPLETED


def test_aresume_of_async_items_runs_exactly_the_decided_one(engine):
    started: Counter = Counter()
    flow = bide.Flow("askips")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    async def item(state, ctx):
        started[state["i"]] += 1
        return {"done": [[state["i"], ctx.approve("ship", {"item": state["i"]})]]}

    flow.route("plan", lambda s: [bide.Send("item", {"i": i}) for i in range(s["n"])])
    flow.reducer("done", bide.append)
    engine.register(flow)

    async def main():
        run = await engine.astart("askips", input={"n": 4}, run_id="r")
        while run.status == bide.Status.WAITING_APPROVAL:
            i = item_of(engine, run.waiting["approval_id"])
            before = Counter(started)
            engine.decide(run.waiting["approval_id"], bide.Decision.APPROVE, by="ops")
            run = await engine.aresume("r")
            assert started - before == Counter([i])
        return run

    run = asyncio.run(main())
    assert run.status == bide.Status.DONE and started == Counter({i: 2 for i in range(4)})
