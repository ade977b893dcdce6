"""The intent log in one process: replay, nondeterminism, retries, bad input."""

from __future__ import annotations

import threading

import bide
import pytest
from bide.formats import IntentPrepared
from bide.formats.records import compact_digest


def one_node_flow(name, body):
    flow = bide.Flow(name)
    flow.node(body, name="act", start=True)
    return flow


def test_tool_outside_a_node_and_undeclared_tool(engine):
    @bide.tool
    def ping() -> str:
        return "pong"

    with pytest.raises(bide.ToolOutsideNode, match="ctx.tool"):
        ping()

    def plain() -> None:
        pass

    engine.register(one_node_flow("undeclared", lambda s, ctx: {"x": ctx.tool(plain)}))
    run = engine.start("undeclared")
    assert run.status == "FAILED" and "not a bide tool" in run.error


def test_arguments_and_results_must_serialize(engine):
    @bide.tool
    def takes(x) -> str:
        return "ok"

    @bide.tool
    def gives() -> object:
        return threading.Lock()

    engine.register(one_node_flow("args", lambda s, ctx: {"x": ctx.tool(takes, object())}))
    engine.register(one_node_flow("res", lambda s, ctx: {"x": ctx.tool(gives)}))
    run = engine.start("args", run_id="ra")
    assert run.status == "FAILED" and "arguments of tool 'takes'" in run.error
    assert engine.intents("ra") == []  # nothing recorded for a call that cannot be described
    run = engine.start("res", run_id="rr")
    assert run.status == "FAILED" and "result of tool 'gives'" in run.error
    assert [i["status"] for i in engine.intents("rr")] == ["failed"]


def test_completed_calls_replay_and_errors_reraise(engine):
    calls = {"n": 0}
    stop = {"yes": True}

    @bide.tool
    def count() -> int:
        calls["n"] += 1
        return calls["n"]

    @bide.tool
    def explode() -> None:
        raise OSError("disk gone")

    def act(state, ctx):
        first = ctx.tool(count)
        if stop["yes"]:
            raise RuntimeError("crash after the tool")
        try:
            ctx.tool(explode)
        except bide.ToolFailed as exc:
            return {"first": first, "err": exc.error_type}
        return {}

    engine.register(one_node_flow("replay", act))
    assert engine.start("replay", run_id="r").status == "FAILED"
    stop["yes"] = False
    run = engine.resume("r")
    assert run.state == {"first": 1, "err": "OSError"} and calls["n"] == 1
    rows = {i["tool"]: i for i in engine.intents("r")}
    assert rows["count"]["status"] == "completed" and rows["count"]["result"] == 1
    assert rows["explode"]["status"] == "failed" and rows["explode"]["error"] == "disk gone"


def test_nondeterminism_names_node_index_and_both_calls(engine):
    which = {"tool": "a"}

    @bide.tool
    def tool_a(x: int) -> int:
        return x

    @bide.tool
    def tool_b(x: int) -> int:
        return x

    def act(state, ctx):
        ctx.tool(tool_a if which["tool"] == "a" else tool_b, 1)
        raise RuntimeError("fail so the node runs again")

    engine.register(one_node_flow("nd", act))
    engine.start("nd", run_id="rn")
    before = engine.intents("rn")
    which["tool"] = "b"
    run = engine.resume("rn")
    assert run.status == "FAILED"
    assert "'act' call #0" in run.error and "tool_a" in run.error and "tool_b" in run.error
    assert engine.intents("rn") == before  # nothing recorded was changed


def test_same_tool_other_arguments_is_nondeterminism(engine):
    arg = {"v": 1}

    @bide.tool
    def t(x: int) -> int:
        return x

    def act(state, ctx):
        ctx.tool(t, arg["v"])
        raise RuntimeError("again")

    engine.register(one_node_flow("nd2", act))
    engine.start("nd2", run_id="r2")
    arg["v"] = 2
    assert "Nondeterminism" in engine.resume("r2").error


def test_tool_retries_each_get_an_attempt_record(engine):
    tries = {"n": 0}

    @bide.tool(retries=2)
    def flaky() -> str:
        tries["n"] += 1
        if tries["n"] < 3:
            raise TimeoutError("slow")
        return "ok"

    engine.register(one_node_flow("flaky", lambda s, ctx: {"x": ctx.tool(flaky)}))
    run = engine.start("flaky", run_id="rf")
    assert run.state == {"x": "ok"}
    with engine.store.reader() as r:
        attempts = [r.record(s).attempt for s, t in r.run_entries("rf")
                    if t == "intent_prepared"]
    assert attempts == [1, 2, 3]
    (row,) = engine.intents("rf")
    assert row["attempts"] == 3 and row["status"] == "completed"


def test_reconciler_that_raises_is_unknown_and_its_error_is_kept(engine):
    def broken(key, *args):
        raise ConnectionError("cannot ask the API")

    @bide.tool(reconcile=broken)
    def charge(amount: int) -> str:
        return "charged"

    engine.register(one_node_flow("pay", lambda s, ctx: {"x": ctx.tool(charge, 5)}))
    engine.submit("pay", run_id="rp")
    # an intent with no outcome, as a crash between prepare and complete leaves it
    from bide.engine.run.context import args_digest
    engine.store.commit([IntentPrepared(
        run_id="rp", task="0:act:0", index=0, tool="charge",
        digest=compact_digest(args_digest("charge", (5,), {})))])
    run = engine.resume("rp")
    assert run.status == "NEEDS_RECONCILIATION"
    (req,) = engine.pending()
    assert "ConnectionError: cannot ask the API" in req["payload"]["reconcile_error"]
    assert req["allowed"] == ["mark_done", "retry", "abort"] and req["run_id"] == "rp"


def test_idempotency_key_is_stable_and_passed(engine):
    keys = []

    @bide.tool(idempotent=True)
    def create(title: str, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return title

    engine.register(one_node_flow("idem", lambda s, ctx: {"a": ctx.tool(create, "x"),
                                                          "b": ctx.tool(create, "y")}))
    engine.start("idem", run_id="ri")
    (k1, k2) = keys
    assert k1 != k2 and k1.startswith("bide-")
    from bide.engine.run.context import idempotency_key
    assert k1 == idempotency_key("ri", "0:act:0#0")
    assert [i["idempotency_key"] for i in engine.intents("ri")] == [k1, k2]
