"""A LangGraph thread in a bide home: the CLI and recover treat it as what it is."""

from __future__ import annotations

import json
import operator
from typing import Annotated, TypedDict

from extras import need

need("langgraph")

import bide  # noqa: E402
from bide.cli import main  # noqa: E402
from bide.langgraph import BideSaver  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402


class State(TypedDict):
    log: Annotated[list, operator.add]


def graph_thread(home) -> None:
    builder = StateGraph(State)
    builder.add_node("step", lambda s: {"log": ["x"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    with BideSaver.from_home(home, durability="fast") as saver:
        builder.compile(checkpointer=saver).invoke(
            {"log": []}, {"configurable": {"thread_id": "t-1"}})


def test_cli_on_a_langgraph_thread(tmp_path):
    home = tmp_path / "home"
    graph_thread(home)
    cli = CliRunner()
    runs = cli.invoke(main, ["runs", "--home", str(home), "--json"])
    assert runs.exit_code == 0 and json.loads(runs.output)[0]["flow"] == "langgraph"
    shown = cli.invoke(main, ["show", "t-1", "--home", str(home), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["pending_writes"] == {}
    state = cli.invoke(main, ["state", "t-1", "--home", str(home), "--json"])
    assert json.loads(state.output)["state"] == {"log": ["x"]}, state.output
    rows = json.loads(cli.invoke(main, ["checkpoints", "t-1", "--home", str(home),
                                        "--json"]).output)
    assert [r["version"] for r in rows] == [2, 1, 0]  # each checkpoint's step + 1, newest first
    doc = json.loads(cli.invoke(main, ["export", "t-1", "--home", str(home)]).output)
    assert doc["langgraph"] and doc["state"]["values"] == {"log": ["x"]}
    diff = cli.invoke(main, ["diff", "t-1", "1", "2", "--home", str(home)])
    assert diff.exit_code == 1 and "LangGraph thread" in diff.output, diff.output
    assert cli.invoke(main, ["doctor", "--home", str(home)]).exit_code == 0


def test_recover_leaves_langgraph_threads_alone(tmp_path):
    home = tmp_path / "home"
    graph_thread(home)
    with bide.open(home, durability="fast", clock=lambda: 9e12) as eng:
        before = list(eng.records("t-1"))
        assert eng.recover(max_age=1) == []
        assert list(eng.records("t-1")) == before


def test_prune_keep_1_trims_a_langgraph_thread_and_keeps_its_latest(tmp_path):
    home = tmp_path / "home"
    for _ in range(4):  # each invoke adds checkpoints, writes and blobs to one thread
        graph_thread(home)
    cfg = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
    with BideSaver.from_home(home, durability="fast") as saver:
        before = saver.get_tuple(cfg)
        many = len(list(saver.list(cfg)))
    cli = CliRunner()
    out = cli.invoke(main, ["prune", "--keep", "1", "--home", str(home), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["runs_trimmed"]["t-1"] > 0
    assert report["removed_by_type"]["lg_checkpoint"] == many - 1
    with BideSaver.from_home(home, durability="fast") as saver:
        after = saver.get_tuple(cfg)
        assert [c.config for c in saver.list(cfg)] == [after.config]
        assert after.config == before.config and after.checkpoint == before.checkpoint
        assert after.checkpoint["channel_values"]["log"] == ["x"] * 4
    assert cli.invoke(main, ["doctor", "--home", str(home)]).exit_code == 0
    graph_thread(home)  # the thread goes on from what prune kept
    with BideSaver.from_home(home, durability="fast") as saver:
        assert saver.get_tuple(cfg).checkpoint["channel_values"]["log"] == ["x"] * 5
