"""Child runs (issue 16.3): ``ctx.child``, WAITING_CHILD, ChildFailed, the cancel cascade,
and the links ``bide show`` prints. Behaviour tests run on LMDB, memory and PostgreSQL
homes; with no watcher, ``start``/``resume`` run the children in the calling worker.
"""

from __future__ import annotations

import asyncio
import sys
import time

import bide
import pytest
from bide.engine.base.vocabulary import Waiting, pause_status
from bide.engine.run import children
from conftest import APPS, open_on

sys.path.insert(0, str(APPS))
import child_app  # noqa: E402

ran: list[str] = []  # node executions of the in-process flows below

solo = bide.Flow("solo")  # one child, named by a key; the node may catch ChildFailed


@solo.node(start=True)
def spawn(state, ctx):
    ran.append("spawn")
    try:
        got = ctx.child(state.get("flow", "kid"), {"n": state.get("n", 4)},
                        key=state.get("key", "only"))
    except bide.ChildFailed as exc:
        return {"failed": [exc.child, str(exc.status), exc.error]}
    return {"got": got}


asker = bide.Flow("asker")  # a child that pauses for a person


@asker.node(start=True)
def ask(state, ctx):
    return {"ok": ctx.approve("launch", {"n": state["n"]})}


boom = bide.Flow("boom")


@boom.node(start=True)
def explode(state, ctx):
    raise RuntimeError("kid exploded")


loop = bide.Flow("loop")  # starts itself for ever


@loop.node(start=True)
def again(state, ctx):
    return {"depth": ctx.child("loop", {})["depth"] + 1}


nested = bide.Flow("nested")  # a child that has a child


@nested.node(start=True)
def middle(state, ctx):
    return {"inner": ctx.child("solo", {"n": 7})["got"]["paid"]}


aparent = bide.Flow("aparent")


@aparent.node(start=True)
async def aspawn(state, ctx):
    return {"got": (await ctx.achild("kid", {"n": 5}))["paid"]}


FLOWS = (child_app.family, child_app.kid, solo, asker, boom, loop, nested, aparent)


@pytest.fixture(params=["lmdb", "memory", "postgres"])
def any_engine(request, home, tmp_path, monkeypatch):
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(tmp_path / "effects"))
    ran.clear()
    with open_on(request.param, request, home, time.time) as eng:
        eng.register(*FLOWS)
        yield eng


def test_a_parent_with_three_children_finishes_with_each_child_once(any_engine, tmp_path):
    eng = any_engine
    run = eng.start("family", run_id="p")
    assert run.status == bide.Status.DONE
    assert sorted(run.state["paid"]) == [0, 10, 20] and run.state["total"] == 30
    kids = eng.show("p")["children"]
    assert len(kids) == 3 and {k["status"] for k in kids} == {"DONE"}
    assert all(eng.show(k["run_id"])["child_of"] == "p" for k in kids)
    lines = (tmp_path / "effects").read_text().splitlines()
    assert sorted(line.split()[0] + line.split()[1] for line in lines) == [
        "charge0", "charge1", "charge2", "kid0", "kid1", "kid2"]
    assert eng.show("p")["child_of"] is None


def test_the_child_id_is_derived_so_a_resume_never_starts_a_second(any_engine):
    eng = any_engine
    eng.submit("solo", {"flow": "asker"}, run_id="s")
    first = eng.resume("s")
    assert first.status == bide.Status.WAITING_CHILD
    assert first.waiting == {"type": "child", "node_id": "spawn", "run_id": "s~only",
                             "flow": "asker"}
    again = eng.resume("s")  # the child still waits for a person: nothing moves
    assert again.status == bide.Status.WAITING_CHILD
    assert [r.run_id for r in eng.runs(flow="asker")] == ["s~only"]
    assert eng.get("s~only").status == bide.Status.WAITING_APPROVAL
    rows = {r["kind"]: r for r in eng.pending()}
    assert rows["child"]["run_id"] == "s" and rows["child"]["children"] == ["s~only"]
    assert rows["approval"]["run_id"] == "s~only"
    eng.decide(rows["approval"]["approval_id"], "approve")
    run = eng.resume("s")  # runs the decided child here, then the parent
    assert run.status == bide.Status.DONE and run.state["got"] == {"n": 4, "ok": True}
    assert ran.count("spawn") == 2  # paused once, then returned the child's state


def test_a_failed_child_raises_child_failed_in_the_parent_node(any_engine):
    eng = any_engine
    run = eng.start("solo", {"flow": "boom"}, run_id="s")
    assert run.status == bide.Status.DONE
    child, status, error = run.state["failed"]
    assert (child, status) == ("s~only", "FAILED") and "kid exploded" in error
    assert eng.get("s~only").status == bide.Status.FAILED


def test_nested_children_each_link_to_their_parent(any_engine):
    eng = any_engine
    run = eng.start("nested", {}, run_id="n")  # nested -> solo -> kid: every level works
    assert run.status == bide.Status.DONE and run.state["inner"] == 70
    (middle,) = eng.show("n")["children"]
    assert middle["flow"] == "solo" and middle["status"] == "DONE"
    (leaf,) = eng.show(middle["run_id"])["children"]
    assert leaf == {"run_id": middle["run_id"] + "~only", "flow": "kid", "node": "spawn",
                    "key": "only", "status": "DONE"}
    assert eng.show(leaf["run_id"])["child_of"] == middle["run_id"]


def test_bad_keys_unknown_flows_and_endless_nesting_are_clear_errors(any_engine):
    eng = any_engine
    run = eng.start("solo", {"key": "no spaces"}, run_id="k")
    assert run.status == bide.Status.FAILED and "InvalidChild" in run.error
    assert "key 'no spaces'" in run.error
    run = eng.start("solo", {"flow": "nope"}, run_id="u")
    assert run.status == bide.Status.FAILED and "unknown flow 'nope'" in run.error
    run = eng.start("loop", run_id="l")  # the deepest child fails, and each parent with it
    assert run.status == bide.Status.FAILED
    assert len(eng.runs(flow="loop")) == children.MAX_DEPTH + 1
    loops = eng.runs(flow="loop")
    assert {r.status for r in loops} == {bide.Status.FAILED}
    assert all(f"runs nest {children.MAX_DEPTH} deep" in (r.error or "") for r in loops)
    assert sum("ChildFailed" in (r.error or "") for r in loops) == children.MAX_DEPTH
    assert eng.runs(flow="kid") == []  # nothing started by a refused call


def test_cancelling_a_parent_cancels_its_children_in_the_same_commit(any_engine):
    eng = any_engine
    eng.start("nested", {}, run_id="n")  # done: a fresh tree below
    eng.register(_with_asker())
    run = eng.start("tree", run_id="t")
    assert run.status == bide.Status.WAITING_CHILD
    mid = run.waiting["run_id"]
    leaf = eng.get(mid).waiting["run_id"]
    assert eng.get(leaf).status == bide.Status.WAITING_APPROVAL
    assert eng.cancel("t") is True
    assert [eng.get(x).status for x in ("t", mid, leaf)] == [bide.Status.CANCELLED] * 3
    assert eng.get(leaf).reason == f"its parent run {mid} was cancelled"
    assert not [r for r in eng.pending() if r["kind"] == "child"]


def test_cancelling_a_child_wakes_the_parent_with_child_failed(any_engine):
    eng = any_engine
    eng.start("solo", {"flow": "asker"}, run_id="s")
    eng.cancel("s~only")
    run = eng.resume("s")
    assert run.status == bide.Status.DONE
    assert run.state["failed"][:2] == ["s~only", "CANCELLED"]


def test_an_async_node_awaits_its_child(any_engine):
    run = asyncio.run(any_engine.astart("aparent", run_id="a"))
    assert run.status == bide.Status.DONE and run.state["got"] == 50


def test_runs_and_show_say_what_a_waiting_child_run_waits_for(any_engine):
    eng = any_engine
    eng.start("solo", {"flow": "asker"}, run_id="s")
    from bide.engine.read import inspect

    rows = {r["run_id"]: r for r in inspect.runs(eng)}
    assert rows["s"]["waiting_on"] == "child s~only (spawn, flow asker)"
    doc = eng.show("s")
    assert doc["children"] == [{"run_id": "s~only", "flow": "asker", "node": "spawn",
                                "key": "only", "status": "WAITING_APPROVAL"}]


def test_waiting_child_ranks_below_outside_waits_and_above_a_timer():
    assert pause_status({Waiting.CHILD.value}) == bide.Status.WAITING_CHILD
    assert pause_status({Waiting.CHILD.value, Waiting.TIMER.value}) == bide.Status.WAITING_CHILD
    assert pause_status({Waiting.CHILD.value, Waiting.SIGNAL.value}) == bide.Status.WAITING_SIGNAL
    assert pause_status({Waiting.CHILD.value, Waiting.INPUT.value}) == bide.Status.WAITING_INPUT
    assert pause_status({Waiting.CHILD.value, "approval"}) == bide.Status.WAITING_APPROVAL


def test_child_ids_are_stable_bounded_and_keyed():
    assert children.child_id("p", "0:a:0", 0, None) == children.child_id("p", "0:a:0", 0, None)
    assert children.child_id("p", "0:a:0", 0, None) != children.child_id("p", "0:a:0", 1, None)
    assert children.child_id("p", "0:a:0", 3, "k1") == "p~k1"
    deep = "x" * 128
    for _ in range(children.MAX_DEPTH):
        deep = children.child_id(deep, "0:a:0", 0, "k" * 48)
        bide.engine.run.runs.check_run_id(deep)
    with pytest.raises(bide.InvalidChild, match="key"):
        children.check_key("p", "../up")


def _with_asker() -> bide.Flow:
    tree = bide.Flow("tree")  # tree -> solo(asker) -> asker waits for a person

    @tree.node(start=True)
    def top(state, ctx):
        return {"got": ctx.child("solo", {"flow": "asker"})}

    return tree


def test_the_cli_shows_the_links_and_cancels_the_tree(tmp_path):
    import json

    from bide.cli import main
    from click.testing import CliRunner

    home = tmp_path / "home"
    with bide.open(home, durability="fast") as eng:
        eng.register(*FLOWS)
        eng.start("solo", {"flow": "asker"}, run_id="s")

    def cli(*argv: str) -> str:
        result = CliRunner().invoke(main, [*argv, "--home", str(home)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert "children:       s~only WAITING_APPROVAL (flow asker, node spawn)" in cli("show", "s")
    assert "child of:       s" in cli("show", "s~only")
    doc = json.loads(cli("show", "s", "--json"))
    assert doc["child_of"] is None and doc["children"][0]["run_id"] == "s~only"
    assert json.loads(cli("show", "s~only", "--json"))["child_of"] == "s"
    assert "child s~only (spawn, flow asker)" in cli("runs")
    rows = json.loads(cli("pending", "--json"))
    assert sorted((r["kind"], r["run_id"]) for r in rows) == [("approval", "s~only"),
                                                              ("child", "s")]
    log = cli("log", "s")
    assert "started s~only (flow asker) in spawn, key only" in log
    assert "child of s (its spawn), depth 1" in cli("log", "s~only")
    cli("cancel", "s")
    assert {r["run_id"]: r["status"] for r in json.loads(cli("runs", "--json"))} == {
        "s": "CANCELLED", "s~only": "CANCELLED"}


def test_bide_run_of_a_parent_whose_child_paused_says_what_to_do(tmp_path):
    from bide.cli import main
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["run", "guardian", "--app", "child_app:flows", "--home",
                                       str(tmp_path / "home")], catch_exceptions=False)
    assert result.exit_code == 4, result.output
    assert "waits for its child run" in result.output and "g~ask" not in result.output
    assert "~ask (node guard), which paused" in result.output
