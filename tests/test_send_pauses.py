"""A map whose items pause one after another: bytes linear in its items, retention safe.

The checkpoint that plans a map stores its Sends; every later checkpoint of that
superstep (each pause, an interruption, a failure) refers to them by seq
(``Checkpoint.sends_at``) instead of storing them again. Before, N items pausing
one by one wrote N copies of N args (measured: 100 -> 300 items, 7.9x the bytes).
Prune keeps the planning checkpoint a kept one refers to, fork and copy carry the
Sends, doctor reports a reference that leads nowhere.
"""

from __future__ import annotations

import bide
import pytest
from bide.engine.read import inspect
from bide.engine.upkeep import maintenance
from bide.formats import Checkpoint, CorruptRecord
from extras import need
from test_send_durable import POLICIES


def pausing_flow() -> bide.Flow:
    flow = bide.Flow("pauses")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    def item(state, ctx):
        ok = ctx.approve("ship", {"item": state["i"]})
        return {"done": [state["i"] if ok else -1]}

    @flow.node(after=["item"])
    def total(state, ctx):
        return {"total": len(state["done"])}

    flow.route("plan", lambda s: [bide.Send("item", {"i": i, "label": f"item number {i:05d}"})
                                  for i in range(s["n"])])
    flow.reducer("done", bide.append)
    return flow


@pytest.fixture
def paused(engine):
    engine.register(pausing_flow())
    return engine


def decide_one_by_one(engine, run, *, most: int | None = None):
    """Approve what the run waits for and resume it, until DONE (or ``most`` times)."""
    for _ in range(most if most is not None else 10_000):
        if run.status == bide.Status.DONE:
            break
        assert run.status == bide.Status.WAITING_APPROVAL, (run.status, run.error)
        engine.decide(run.waiting["approval_id"], bide.Decision.APPROVE, by="ops")
        run = engine.resume(run.run_id)
    return run


def stored_bytes(engine, run_id: str) -> int:
    with engine.store.reader() as r:
        return sum(len(r.raw(seq) or b"") for seq, _ in r.run_entries(run_id))


def checkpoints(engine, run_id: str) -> list[tuple[int, Checkpoint]]:
    with engine.store.reader() as r:
        return [(seq, r.record(seq)) for seq, t in r.run_entries(run_id) if t == "checkpoint"]


def bytes_ratio(engine, small: int, big: int) -> float:
    """Stored bytes of a map of ``big`` pausing items over one of ``small``, each run to DONE."""
    sizes = {}
    for n in (small, big):
        run = decide_one_by_one(engine, engine.start("pauses", input={"n": n}, run_id=f"r-{n}"))
        assert run.status == bide.Status.DONE and run.state["done"] == list(range(n))
        sizes[n] = stored_bytes(engine, f"r-{n}")
    ratio = sizes[big] / sizes[small]
    print(f"paused map bytes {small} -> {big} items: {sizes[small]} -> {sizes[big]} "
          f"({ratio:.2f}x)")
    return ratio


@pytest.mark.slow  # 300 resumes, each running the approved item (~10 s)
def test_a_map_whose_items_pause_one_by_one_stores_bytes_linear_in_its_items(paused):
    # linear: ~3x (every pause storing every Send: 7.9x); on PostgreSQL: test_send_pauses_pg
    assert bytes_ratio(paused, 100, 300) < 3.5


def test_three_hundred_pausing_items_do_not_hold_a_reader_each(paused):
    """Regression: a paused task's traceback kept its frames, and their read
    transactions, alive; on LMDB 300 of them used up the 256 reader slots."""
    run = paused.start("pauses", input={"n": 300}, run_id="r-many")
    assert run.status == bide.Status.WAITING_APPROVAL, run.error
    assert run.waiting["item"] == "item[0]"


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: str(p.to_dict()))
def test_later_checkpoints_of_the_superstep_refer_to_the_planning_one(paused, policy):
    run = paused.start("pauses", input={"n": 4}, run_id="r", policy=policy)
    run = decide_one_by_one(paused, run)
    assert run.status == bide.Status.DONE and run.state == {"n": 4, "done": [0, 1, 2, 3],
                                                            "total": 4}
    cps = checkpoints(paused, "r")
    planners = [(seq, cp) for seq, cp in cps if cp.sends]
    assert len(planners) == 1 and len(planners[0][1].sends) == 4
    later = [cp for seq, cp in cps if seq > planners[0][0] and cp.superstep == 1]
    assert len(later) >= 4  # a pause per item at least
    assert all(cp.sends_at == planners[0][0] and cp.sends == [] for cp in later)
    infos = [c for c in paused.checkpoints("r") if c.superstep == 1]
    assert {tuple(c.next) for c in infos} == {("item[0..3]",)}  # read through the reference
    lines = [e["summary"] for e in inspect.log(paused, "r") if e["type"] == "checkpoint"]
    assert sum(f"next the Sends of #{planners[0][0]}" in line for line in lines) == len(later)


def test_a_fork_of_a_later_checkpoint_stores_the_sends_it_refers_to(paused):
    run = decide_one_by_one(paused, paused.start("pauses", input={"n": 3}, run_id="r"), most=1)
    assert run.waiting["item"] == "item[1]"
    version = paused.checkpoints("r")[-1].version
    paused.fork("r", version, new_id="r-fork")
    [(_, first)] = checkpoints(paused, "r-fork")
    assert first.sends_at == -1 and len(first.sends) == 3
    run = decide_one_by_one(paused, paused.resume("r-fork"))
    assert run.state["done"] == [0, 1, 2]


@pytest.mark.parametrize("policy", [bide.Policy(), bide.Policy(full_every=2),
                                    bide.Policy(snapshot="full")], ids=str)
def test_prune_keep_1_of_a_paused_map_keeps_its_sends_and_the_run_finishes(paused, policy):
    """With full_every=2 the latest checkpoint's chain starts after the planning one:
    only the reference keeps it."""
    run = paused.start("pauses", input={"n": 5}, run_id="r", policy=policy)
    run = decide_one_by_one(paused, run, most=3)
    assert run.waiting["item"] == "item[3]"
    report = maintenance.prune(paused.store, keep=1)
    assert report.runs_trimmed.get("r", 0) > 0, report.to_dict()
    assert maintenance.doctor(paused.store).ok
    run = decide_one_by_one(paused, paused.get("r"))
    assert run.status == bide.Status.DONE and run.state["done"] == [0, 1, 2, 3, 4]


def test_doctor_reports_a_reference_to_a_planning_checkpoint_that_is_gone(paused):
    run = decide_one_by_one(paused, paused.start("pauses", input={"n": 3}, run_id="r"), most=1)
    planner = next(seq for seq, cp in checkpoints(paused, "r") if cp.sends)
    paused.store.delete(lambda r: [planner])  # what a retention bug would do
    report = maintenance.doctor(paused.store)
    dangling = [p for p in report.problems if p.kind == "dangling"]
    assert dangling and all(f"seq {planner}" in p.detail for p in dangling), report.to_dict()
    paused.decide(run.waiting["approval_id"], bide.Decision.APPROVE)
    with pytest.raises(CorruptRecord, match=f"Sends are those of seq {planner}, which is gone"):
        paused.resume("r")
    assert any("unreadable" in ",".join(c.next) for c in paused.checkpoints("r"))


def test_a_copy_of_a_paused_map_finishes_there(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    with bide.open(src, durability="fast") as engine:
        engine.register(pausing_flow())
        decide_one_by_one(engine, engine.start("pauses", input={"n": 3}, run_id="r"), most=1)
    bide.copy_home(src, dst)
    with bide.open(dst, durability="fast") as engine:
        engine.register(pausing_flow())
        run = decide_one_by_one(engine, engine.get("r"))
        assert run.state["done"] == [0, 1, 2]


def test_a_copy_of_a_paused_map_into_postgres_finishes_there(tmp_path, pg_url):
    need("psycopg")
    src, local = tmp_path / "src", tmp_path / "local"
    with bide.open(src, durability="fast") as engine:
        engine.register(pausing_flow())
        decide_one_by_one(engine, engine.start("pauses", input={"n": 3}, run_id="r"), most=2)
    bide.copy_home(src, pg_url, destination_local=local)
    with bide.open(pg_url, local=local, durability="fast") as engine:
        engine.register(pausing_flow())
        assert engine.get("r").waiting["item"] == "item[2]"
        run = decide_one_by_one(engine, engine.get("r"))
        assert run.state["done"] == [0, 1, 2]
