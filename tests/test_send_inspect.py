"""``bide show``, ``bide log``, ``bide checkpoints`` name a map's tasks: ``search[3]``."""

from __future__ import annotations

import json

import bide
from bide.cli import main
from click.testing import CliRunner


def stopped_mid_map(home) -> None:
    """A map of 5 whose item 2 fails: the others' outputs wait as pending writes."""
    flow = bide.Flow("research")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    def search(state, ctx):
        if state["q"] == "q2":
            raise RuntimeError("search engine down")
        if state["q"] == "q4" and not ctx.approve("search q4"):
            return {}
        return {"results": [state["q"]]}

    flow.route("plan", lambda s: [bide.Send("search", {"q": f"q{i}"}) for i in range(5)])
    flow.reducer("results", bide.append)
    with bide.open(home, durability="fast") as engine:
        engine.register(flow)
        run = engine.start("research", run_id="r-map")
        assert run.status in (bide.Status.FAILED, bide.Status.WAITING_APPROVAL)


def cli(home, *args: str):
    result = CliRunner().invoke(main, [*args, "--home", str(home)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_show_names_each_finished_item_and_checkpoints_the_planned_ones(tmp_path):
    home = tmp_path / "home"
    stopped_mid_map(home)
    shown = json.loads(cli(home, "show", "r-map", "--json"))
    assert sorted(shown["pending_writes"]) == ["search[0]", "search[1]", "search[3]"]
    assert "search[1]:" in cli(home, "show", "r-map")
    rows = json.loads(cli(home, "checkpoints", "r-map", "--json"))
    assert rows[1]["committed"] == ["plan"] and rows[1]["next"] == ["search[0..4]"]
    assert "search[0..4]" in cli(home, "checkpoints", "r-map")
    summaries = [json.loads(line)["summary"] for line in cli(home, "log", "r-map", "--json")
                 .splitlines()]
    assert summaries[3].endswith("committed plan; next search[0..4]")
    assert summaries[5] == "search (task 1:search:1) wrote results"


def test_a_waiting_item_is_named_in_show(tmp_path):
    home = tmp_path / "home"
    flow = bide.Flow("ask")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    def pay(state, ctx):
        return {"ok": [ctx.approve(f"pay {state['i']}")]} if state["i"] == 2 else {}

    flow.route("plan", lambda s: [bide.Send("pay", {"i": i}) for i in range(3)])
    flow.reducer("ok", bide.append)
    with bide.open(home, durability="fast") as engine:
        engine.register(flow)
        assert engine.start("ask", run_id="r-ask").waiting["item"] == "pay[2]"
    assert "in node pay[2]" in cli(home, "show", "r-ask")
