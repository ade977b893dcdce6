"""A store that fails under a node (a lost connection, a server restarting for longer
than the store waits) is not the node's failure: the run stops where it is, keeps
what is durable, lets its lease go (INTERRUPTED) and resumes later; it is never
recorded as FAILED for it.

Regression: a StoreError raised by a node's own commit (ctx.tool's intent, a pending
write) was treated like any exception from the node, so a PostgreSQL restart that cut
a connection at the wrong moment failed the run for good (seen once in ~50 runs of
test_pg_proof's restart test).
"""

from __future__ import annotations

import bide
import pytest
from bide import Status


def test_a_store_error_inside_a_node_leaves_the_run_resumable(engine, monkeypatch):
    calls: list[str] = []
    armed, attempts = [False], [0]
    real = engine.store.commit

    def commit(records, **kw):  # the store fails once, under the node's ctx.tool
        if armed[0]:
            armed[0] = False
            raise bide.StoreError("the connection was lost", path=str(engine.home))
        return real(records, **kw)

    monkeypatch.setattr(engine.store, "commit", commit)

    @bide.tool(idempotent=True)
    def ping(who: str, *, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return f"pong {who}"

    flow = bide.Flow("storeerr")

    @flow.node(start=True)
    def act(state, ctx):
        attempts[0] += 1
        armed[0] = attempts[0] == 1
        return {"result": ctx.tool(ping, "x")}

    engine.register(flow)
    with pytest.raises(bide.StoreError, match="connection was lost"):
        engine.start("storeerr", run_id="r1")
    # the worker gave the run up and let its lease go at once: any worker resumes it now,
    # and the retake costs the run no attempt (a lease left to expire would count one)
    head = engine.get("r1").head
    assert head.status == Status.INTERRUPTED and head.lease_owner is None
    assert "the store failed" in (head.reason or "")
    run = engine.resume("r1")
    assert run.status == Status.DONE and run.state["result"] == "pong x"
    assert len(calls) == 1 and engine.get("r1").head.attempts == 0
