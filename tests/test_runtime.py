"""The runtime API: supersteps, joins, routes, reducers, policies, failures, bad input."""

from __future__ import annotations

import asyncio
import threading

import bide
import pytest


def incident_flow() -> bide.Flow:
    flow = bide.Flow("incident")

    @flow.node(start=True)
    def search_logs(state, ctx):
        return {"logs": ["disk full on /var"]}

    @flow.node(start=True)
    def prepare_patch(state, ctx):
        return {"patch": "p-9"}

    @flow.node(after=["search_logs", "prepare_patch"])
    def apply_patch(state, ctx):
        return {"applied": state["patch"] == "p-9", "logs": ["patched"]}

    flow.reducer("logs", bide.append)
    return flow


def test_quick_start_shape(engine):
    engine.register(incident_flow())
    run = engine.start("incident", input={"query": "disk full"}, run_id="r-42")
    assert run.run_id == "r-42" and run.status == bide.Status.DONE
    assert run.state == {"query": "disk full", "logs": ["disk full on /var", "patched"],
                         "patch": "p-9", "applied": True}
    assert run.state_version == 2 and run.waiting is None and run.error is None
    cps = engine.checkpoints("r-42")
    assert [c.version for c in cps] == [0, 1, 2]
    assert cps[1].committed == ["search_logs", "prepare_patch"] and cps[1].next == ["apply_patch"]
    assert cps[-1].status == "DONE" and all(c.bytes > 0 for c in cps)
    assert engine.state("r-42", version=1) == {"query": "disk full", "patch": "p-9",
                                                 "logs": ["disk full on /var"]}
    assert engine.get("r-42").status == "DONE"
    assert [r.run_id for r in engine.runs(status=bide.Status.DONE)] == ["r-42"]
    assert engine.runs(status=bide.Status.FAILED) == []


def test_generated_run_id_and_duplicate_is_an_error(engine):
    engine.register(incident_flow())
    run = engine.start("incident")
    assert run.run_id.startswith("r-")
    before = list(engine.records(run.run_id))
    with pytest.raises(bide.RunExists):
        engine.start("incident", run_id=run.run_id)
    assert list(engine.records(run.run_id)) == before


def test_parallel_nodes_run_concurrently(engine):
    flow = bide.Flow("par")
    barrier = threading.Barrier(3, timeout=10)
    for name in ("a", "b", "c"):
        @flow.node(start=True, name=name)
        def node(state, ctx, name=name):
            barrier.wait()  # only passes if all three run at the same time
            return {name: True}
    engine.register(flow)
    assert engine.start("par").state == {"a": True, "b": True, "c": True}


def test_async_and_sync_nodes_mix(engine):
    flow = bide.Flow("mixed")

    @flow.node(start=True)
    async def fetch(state, ctx):
        await asyncio.sleep(0.01)
        return {"fetched": 1}

    @flow.node(start=True)
    def compute(state, ctx):
        return {"computed": 2}

    @flow.node(after=["fetch", "compute"])
    async def total(state, ctx):
        return {"total": state["fetched"] + state["computed"]}

    engine.register(flow)
    assert engine.start("mixed").state["total"] == 3


def test_route_loops_a_node_until_it_returns_end(engine):
    flow = bide.Flow("loop")

    @flow.node(start=True)
    def step(state, ctx):
        return {"i": state.get("i", 0) + 1, "seen": [ctx.superstep]}

    flow.route("step", lambda s: "step" if s["i"] < 5 else bide.END)
    flow.reducer("seen", bide.append)
    engine.register(flow)
    run = engine.start("loop")
    assert run.state == {"i": 5, "seen": [0, 1, 2, 3, 4]}
    assert run.state_version == 5


def test_route_to_list_and_join_waits_for_all(engine):
    flow = bide.Flow("branches")

    @flow.node(start=True)
    def split(state, ctx):
        return {}

    @flow.node()
    def left(state, ctx):
        return {"l": 1}

    @flow.node()
    def right(state, ctx):
        return {"r": 1}

    @flow.node(after=["left", "right"])
    def both(state, ctx):
        return {"sum": state["l"] + state["r"]}

    flow.route("split", lambda s: ["left", "right"])
    engine.register(flow)
    assert engine.start("branches").state == {"l": 1, "r": 1, "sum": 2}


def test_reducers_merge_and_custom(engine):
    flow = bide.Flow("red")
    for name in ("a", "b"):
        @flow.node(start=True, name=name)
        def node(state, ctx, name=name):
            return {"meta": {name: 1}, "score": 10 if name == "a" else 5}
    flow.reducer("meta", bide.merge)
    flow.reducer("score", lambda old, new: (old or 0) + new)
    engine.register(flow)
    run = engine.start("red", input={"score": 1})
    assert run.state == {"meta": {"a": 1, "b": 1}, "score": 16}
    assert engine.state(run.run_id) == run.state  # custom result read back without the flow


def test_reducer_conflict_names_both_nodes(engine):
    flow = bide.Flow("conflict")
    for name in ("a", "b"):
        flow.node(lambda s, c, name=name: {"x": name}, name=name, start=True)
    engine.register(flow)
    run = engine.start("conflict", run_id="rc")
    assert run.status == "FAILED"
    assert "'a' and 'b'" in run.error and "'x'" in run.error


@pytest.mark.parametrize("policy", [
    bide.Policy(),
    bide.Policy(checkpoint_every=3),
    bide.Policy(checkpoint_every="exit"),
    bide.Policy(pending_writes=False),
    bide.Policy(snapshot="full"),
    bide.Policy(full_every=2),
    bide.Policy(checkpoint_every=2, pending_writes=False, full_every=1),
])
def test_every_policy_reaches_the_same_state(engine, policy):
    flow = bide.Flow("p")

    @flow.node(start=True)
    def a(state, ctx):
        return {"n": state.get("n", 0) + 1, "log": [state.get("n", 0)], "m": {"k": 1}}

    @flow.node(start=True)
    def b(state, ctx):
        return {"log": ["b"], "m": {"j": 2}}

    @flow.node(after=["a", "b"])
    def c(state, ctx):
        return {"log": ["c"]}

    flow.route("c", lambda s: ["a", "b"] if s["n"] < 4 else bide.END)
    flow.reducer("log", bide.append)
    flow.reducer("m", bide.merge)
    engine.register(flow)
    run = engine.start("p", policy=policy)
    assert run.status == "DONE"
    assert run.state == {"n": 4, "log": [0, "b", "c", 1, "b", "c", 2, "b", "c", 3, "b", "c"],
                         "m": {"k": 1, "j": 2}}
    assert engine.state(run.run_id) == run.state
    assert run.policy == policy.to_dict()


def test_failure_keeps_sibling_writes_and_resume_redoes_only_the_failed(engine):
    calls = {"ok": 0, "bad": 0}
    broken = {"yes": True}
    flow = bide.Flow("f")

    @flow.node(start=True)
    def ok(state, ctx):
        calls["ok"] += 1
        return {"ok": True}

    @flow.node(start=True, retries=2)
    def bad(state, ctx):
        calls["bad"] += 1
        if broken["yes"]:
            raise ValueError("db down")
        return {"bad": "fixed"}

    engine.register(flow)
    run = engine.start("f", run_id="rf")
    assert run.status == bide.Status.FAILED
    assert "bad" in run.error and "ValueError: db down" in run.error
    assert calls == {"ok": 1, "bad": 3}  # one try + two retries
    broken["yes"] = False
    run = engine.resume("rf")
    assert run.status == "DONE" and run.state == {"ok": True, "bad": "fixed"}
    assert calls == {"ok": 1, "bad": 4}


def test_non_serializable_state_names_node_and_key_and_writes_nothing(engine):
    flow = bide.Flow("ns")

    @flow.node(start=True)
    def good(state, ctx):
        return {"fine": 1}

    @flow.node(start=True)
    def evil(state, ctx):
        return {"fine2": 2, "handle": threading.Lock()}

    engine.register(flow)
    run = engine.start("ns", run_id="rn")
    assert run.status == "FAILED"
    assert "'handle'" in run.error and "'evil'" in run.error
    types = [t for _, t, _ in engine.records("rn")]
    assert types.count("pending_write") == 1  # good's write only; nothing for evil's task
    with pytest.raises(bide.StateNotSerializable, match="'bad'"):
        engine.start("ns", input={"bad": object()})


def test_unknown_flow_and_run(engine):
    with pytest.raises(bide.UnknownFlow, match="'nope'"):
        engine.start("nope")
    with pytest.raises(bide.UnknownRun, match="'r-x'"):
        engine.get("r-x")
    with pytest.raises(bide.UnknownRun):
        engine.resume("r-x")


def test_bad_run_ids(engine):
    engine.register(incident_flow())
    for bad in ("", "a/b", "x\x00y", 5, "z" * 200):
        with pytest.raises(ValueError):
            engine.start("incident", run_id=bad)


def test_changed_flow_is_a_clear_error_and_data_untouched(home):
    flow = bide.Flow("evolve")

    @flow.node(start=True)
    def first(state, ctx):
        return {"a": 1}

    @flow.node(after=["first"])
    def second(state, ctx):
        raise RuntimeError("stop here")

    with bide.open(home, durability="fast") as eng:
        eng.register(flow)
        assert eng.start("evolve", run_id="re").status == "FAILED"
        before = list(eng.records("re"))
    changed = bide.Flow("evolve")
    changed.node(lambda s, c: {"a": 2}, name="first", start=True)
    with bide.open(home, durability="fast") as eng:
        eng.register(changed)
        with pytest.raises(bide.FlowMismatch, match="'second'"):
            eng.resume("re")
        assert list(eng.records("re")) == before


def test_done_run_is_not_resumable(engine):
    engine.register(incident_flow())
    engine.start("incident", run_id="rd")
    with pytest.raises(bide.RunNotResumable, match="DONE"):
        engine.resume("rd")


def test_policy_validation():
    for bad in (dict(checkpoint_every=0), dict(checkpoint_every="sometimes"),
                dict(snapshot="half"), dict(full_every=0), dict(full_every=True),
                dict(pending_writes="yes")):
        with pytest.raises(ValueError):
            bide.Policy(**bad)


def test_node_returning_non_dict_fails_clearly(engine):
    flow = bide.Flow("bad")
    flow.node(lambda s, c: 42, name="n", start=True)
    engine.register(flow)
    run = engine.start("bad")
    assert run.status == "FAILED" and "returned int" in run.error


def test_delta_reads_match_full_reads_at_every_version(engine):
    flow = bide.Flow("long")

    @flow.node(start=True)
    def tick(state, ctx):
        return {"i": state.get("i", 0) + 1, "items": [f"x{state.get('i', 0)}"]}

    flow.route("tick", lambda s: "tick" if s["i"] < 20 else bide.END)
    flow.reducer("items", bide.append)
    engine.register(flow)
    delta = engine.start("long", policy=bide.Policy(full_every=6))
    full = engine.start("long", policy=bide.Policy(snapshot="full"))
    for v in range(21):
        assert engine.state(delta.run_id, version=v) == engine.state(full.run_id, version=v)
    # an explicit full_every is a hard bound: v0, then one after every 6 deltas
    assert [c.version for c in engine.checkpoints(delta.run_id) if c.full] == [0, 6, 12, 18]


def test_join_waits_for_every_dependency_again_in_a_loop(engine):
    """A join inside a loop fires once per round, only when all its deps completed again."""
    flow = bide.Flow("joinloop")

    @flow.node(start=True)
    def fast(state, ctx):
        return {"f": state.get("f", 0) + 1}

    @flow.node(start=True)
    def slow1(state, ctx):
        return {}

    @flow.node(after=["slow1"])
    def slow2(state, ctx):
        return {}

    @flow.node(after=["fast", "slow2"])
    def join(state, ctx):
        return {"rounds": state.get("rounds", 0) + 1}

    flow.route("join", lambda s: ["fast", "slow1"] if s["rounds"] < 3 else bide.END)
    engine.register(flow)
    run = engine.start("joinloop")
    assert run.state == {"f": 3, "rounds": 3}
    with engine.store.reader() as r:  # joins that fired leave nothing behind
        head = r.head(run.run_id)
        assert r.record(head.checkpoint).seen == {}


def test_default_full_snapshots_are_spaced_geometrically(engine):
    """Default policy: bytes stay O(run) — fulls at v0, 64, 256 on a 300-step run."""
    flow = bide.Flow("geo")

    @flow.node(start=True)
    def tick(state, ctx):
        return {"i": state.get("i", 0) + 1, "items": [state.get("i", 0)]}

    flow.route("tick", lambda s: "tick" if s["i"] < 300 else bide.END)
    flow.reducer("items", bide.append)
    engine.register(flow)
    run = engine.start("geo")
    assert [c.version for c in engine.checkpoints(run.run_id) if c.full] == [0, 64, 256]
    assert engine.state(run.run_id)["items"] == list(range(300))
    assert engine.state(run.run_id, version=200)["items"] == list(range(200))
