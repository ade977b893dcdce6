"""A worker calls a tool only on a lease it can prove live (engine/run/lease_clock.py).

The lease's deadline is kept on the worker's monotonic clock from when its grant or
last acknowledged renewal was *sent*. A prepare whose commit came back after that
deadline does not lead to the call; an outcome committed after it stops the worker.
These tests make the deadline pass at a chosen moment (a ``LeaseClock`` that the
test turns off) and look at what was called; tests/test_pg_partitions.py makes it
pass the real way, with a partition between a worker and PostgreSQL.
"""

from __future__ import annotations

import time

import bide
import pytest
from bide import Status
from bide.engine.run.lease_clock import MARGIN, LeaseClock
from bide.formats import IntentCompleted, IntentPrepared


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_deadline_runs_from_when_the_grant_and_renewals_were_sent():
    clock = Clock()
    lease = LeaseClock(10.0, granted_at=100.0, clock=clock)
    trusted = 10.0 * (1 - MARGIN)
    assert lease.alive() and lease.until == 100.0 + trusted
    clock.t = 100.0 + trusted
    assert not lease.alive() and lease.late_by() == 0.0
    lease.renewed(started_at=105.0)  # a renewal sent at 105, acknowledged now
    assert lease.alive() and lease.until == 105.0 + trusted
    lease.renewed(started_at=101.0)  # a late acknowledgment of an older renewal: no effect
    assert lease.until == 105.0 + trusted
    lease.lost()
    assert not lease.alive()


@pytest.fixture
def world(tmp_path, monkeypatch):
    """An engine, a tool that counts its calls, and a switch that ends the worker's
    trusted lease the moment a chosen record's commit returns."""
    calls: list[str] = []
    state = {"dead": False, "after": None}
    real_alive = LeaseClock.alive

    def alive(self: LeaseClock) -> bool:
        return not state["dead"] and real_alive(self)

    monkeypatch.setattr(LeaseClock, "alive", alive)
    eng = bide.open(tmp_path / "home", durability="fast")
    real_commit = eng.store.commit

    def commit(records, **kw):
        seqs = real_commit(records, **kw)
        if state["after"] is not None and not callable(records) and \
                any(isinstance(r, state["after"]) for r in records):
            state["dead"], state["after"] = True, None  # the reply came back too late
        return seqs

    monkeypatch.setattr(eng.store, "commit", commit)

    @bide.tool
    def charge(amount: int, *, idempotency_key: str) -> dict:
        calls.append(idempotency_key)
        return {"charged": amount}

    flow = bide.Flow("pay")

    @flow.node(start=True)
    def pay(state_, ctx):
        return {"paid": ctx.tool(charge, 10)}

    eng.register(flow)
    yield eng, calls, state
    eng.close()


def test_a_prepare_that_returns_past_the_deadline_does_not_lead_to_the_call(world):
    eng, calls, state = world
    state["after"] = IntentPrepared
    with pytest.raises(bide.LeaseUnproven, match="the prepare of charge"):
        eng.start("pay", run_id="r1")
    assert calls == []  # not called
    head = eng.get("r1").head
    # the lease was still this worker's: the call is recorded as never made, and the run
    # let go at once (INTERRUPTED, no lease), so it costs no attempt
    assert head.status == Status.INTERRUPTED and head.lease_owner is None
    (intent,) = eng.intents("r1")
    assert intent["status"] == "resolved" and intent["decision"] == "retry"
    state["dead"] = False
    run = eng.resume("r1")  # whoever resumes makes the call, asking nobody
    assert run.status == Status.DONE and run.state["paid"] == {"charged": 10}
    assert len(calls) == 1 and eng.get("r1").head.attempts == 0


def test_an_outcome_committed_past_the_deadline_stops_the_worker_and_replays(world):
    eng, calls, state = world
    state["after"] = IntentCompleted
    with pytest.raises(bide.LeaseUnproven, match="after the outcome of charge"):
        eng.start("pay", run_id="r1")
    assert len(calls) == 1
    assert eng.get("r1").status == Status.INTERRUPTED
    state["dead"] = False
    run = eng.resume("r1")  # the outcome is durable: replayed, not called again
    assert run.status == Status.DONE and len(calls) == 1


def test_without_the_check_the_late_prepare_leads_to_the_call(world, monkeypatch):
    """The negative control: the switch that turns the check off lets the call happen
    on a lease the worker cannot prove (what the partition test duplicates with)."""
    from bide.engine.base import faults

    eng, calls, state = world
    monkeypatch.setattr(faults, "_switches", frozenset({"no_lease_deadline"}))
    state["after"] = IntentPrepared
    assert eng.start("pay", run_id="r1").status == Status.DONE
    assert len(calls) == 1  # called although the lease could not be proven


def test_a_tool_gets_the_fencing_token_and_ctx_says_it_and_the_next_key(tmp_path):
    seen: dict = {}

    @bide.tool
    def act(x: int, *, idempotency_key: str, fencing_token: int) -> int:
        seen["tool"] = (idempotency_key, fencing_token)
        return x

    @bide.tool
    def loose(x: int, **kwargs) -> int:  # **kwargs gets the key, never the token
        seen["loose"] = sorted(kwargs)
        return x

    flow = bide.Flow("fenced")

    @flow.node(start=True)
    def node(state, ctx):
        seen["ctx"] = (ctx.fencing_token, ctx.idempotency_key(), ctx.idempotency_key(1))
        ctx.tool(act, 1)
        ctx.tool(loose, 2)
        return {}

    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(flow)
        eng.start("fenced", run_id="r1")
        keys = [i["idempotency_key"] for i in eng.intents("r1")]
    assert seen["ctx"] == (1, keys[0], keys[1])
    assert seen["tool"] == (keys[0], 1) and seen["loose"] == ["idempotency_key"]


def test_a_tool_longer_than_the_lease_keeps_it_by_renewals(tmp_path):
    """A call of three leases' length: renewals move the deadline while it runs, so its
    outcome is committed and the run goes on (the check is not a timeout on tools)."""
    @bide.tool
    def slow() -> str:
        time.sleep(0.9)
        return "done"

    flow = bide.Flow("slow")

    @flow.node(start=True)
    def node(state, ctx):
        return {"r": ctx.tool(slow)}

    with bide.open(tmp_path / "home", durability="fast", lease_ttl=0.3) as eng:
        eng.register(flow)
        assert eng.start("slow", run_id="r1").state == {"r": "done"}
