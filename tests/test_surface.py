"""The public surface: what the CLI does is reachable from ``bide`` alone, with typed results."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import bide
import pytest

CLI = Path(bide.__file__).parent / "cli.py"
# The CLI may reach inside the package only for text rendering and for the entries of
# tools that are not the library (each imported where its command runs).
CLI_INTERNAL = {"engine.base.render", "engine.read.scripting", "bench.demo", "bench.command",
                "bench.torture", "engine.langgraph"}  # bide.langgraph, loaded when used


def two_steps() -> bide.Flow:
    flow = bide.Flow("two")

    @flow.node(start=True)
    def first(state, ctx):
        return {"log": ["first"], "n": 1}

    @flow.node(after=["first"])
    def second(state, ctx):
        return {"log": ["second"], "n": 2}

    flow.reducer("log", bide.append)
    return flow


def asking() -> bide.Flow:
    flow = bide.Flow("ask")

    @flow.node(start=True)
    def gate(state, ctx):
        return {"ok": ctx.approve("ship it")}

    return flow


@pytest.fixture
def eng(tmp_path: Path):
    with bide.open(tmp_path / "home", durability="fast") as e:
        e.register(two_steps(), asking())
        yield e


def test_cli_imports_only_bides_root_names() -> None:
    tree = ast.parse(CLI.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("bide") for a in node.names), ast.dump(node)
        if isinstance(node, ast.ImportFrom) and (node.level or "bide" in (node.module or "")):
            assert node.level == 1, f"line {node.lineno}: import through `.`, not by name"
            if node.module is None:
                names = {a.name for a in node.names}
                assert names <= set(bide.__all__), names - set(bide.__all__)
            else:
                assert node.module in CLI_INTERNAL, f"line {node.lineno}: .{node.module}"


def test_open_has_the_engines_options_keyword_only_with_the_same_defaults() -> None:
    opened = inspect.signature(bide.open).parameters
    engine = inspect.signature(bide.Engine.__init__).parameters
    assert list(opened) == [p for p in engine if p != "self"]
    assert opened["home"].default == ".bide"
    for name, param in list(opened.items())[1:]:
        assert param.default == engine[name].default, name
        assert param.annotation == engine[name].annotation, name
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, name
    with pytest.raises(TypeError):
        bide.open(".bide", "fast")  # type: ignore[misc]


def test_the_readers_return_json_ready_data(eng: bide.Engine) -> None:
    run = eng.start("two", {"log": []}, run_id="r")
    assert run.status == bide.Status.DONE
    assert eng.show("r")["status"] == "DONE" and eng.show("r")["state_version"] == 2
    types = [e["type"] for e in eng.log("r")]
    assert types[0] == "run_created" and types.count("checkpoint") == 3
    assert [c["version"] for c in eng.checkpoint_rows("r")] == [0, 1, 2]
    assert eng.state_at("r", 1) == (1, {"log": ["first"], "n": 1})
    assert eng.state_at("r", 2) == (2, {"log": ["first", "second"], "n": 2})
    assert eng.state_at("r")[0] == 2
    assert [(d["key"], d["change"]) for d in eng.diff("r", 0, 2)] == [
        ("log", "appended"), ("n", "added")]
    assert eng.diff("r", 1, 2)[1]["change"] == "changed"
    assert [row["run_id"] for row in eng.run_rows(status="done")] == ["r"]
    assert eng.run_rows(status=bide.Status.FAILED) == []
    assert eng.intent_rows("r") == [] and eng.intent_rows(unknown=True) == []
    doc = eng.export("r")
    assert doc["format"] == "bide-export" and doc["state"]["values"]["n"] == 2
    json.dumps([doc, eng.log("r"), eng.show("r")])  # plain data all the way down
    with pytest.raises(bide.UnknownVersion):
        eng.state_at("r", 7)
    with pytest.raises(bide.UnknownRun):
        eng.show("nope")


def test_cancel_and_fork_are_engine_methods(eng: bide.Engine) -> None:
    eng.start("two", run_id="r")
    new = eng.fork("r", 1)
    assert new.startswith("r-fork-") and eng.get(new).status == bide.Status.PENDING
    assert eng.fork("r", 1, new_id="again") == "again"
    with pytest.raises(bide.RunExists):
        eng.fork("r", 1, new_id="again")
    assert eng.cancel(new, "not needed") is True
    assert eng.cancel(new) is False  # already cancelled
    assert eng.get(new).status == bide.Status.CANCELLED and eng.get(new).reason == "not needed"


def test_upkeep_returns_typed_reports(eng: bide.Engine, tmp_path: Path) -> None:
    eng.start("two", run_id="r")
    doctor = eng.doctor()
    assert isinstance(doctor, bide.DoctorReport) and doctor.ok and doctor.runs == 1
    assert eng.doctor(rebuild=True).rebuilt
    before = eng.stats()["total_records"]
    assert eng.prune(dry_run=True, finished_older_than=0).runs_removed == ["r"]
    assert eng.stats()["total_records"] == before
    pruned = eng.prune(keep=1, finished_older_than=0)
    assert isinstance(pruned, bide.PruneReport) and pruned.runs_removed == ["r"]
    assert eng.stats()["total_records"] == before - pruned.records
    eng.close()
    report = bide.compact(tmp_path / "home")
    assert isinstance(report, bide.CompactReport) and report.after <= report.before


def test_drop_decision_checks_then_writes_the_inbox_file(eng: bide.Engine,
                                                         tmp_path: Path) -> None:
    run = eng.start("ask", run_id="a")
    aid = run.waiting["approval_id"]
    with pytest.raises(bide.UnknownApproval):
        eng.drop_decision("no-such-request", "approve")
    with pytest.raises(bide.DecisionNotAllowed):
        eng.drop_decision(aid, "mark_done")
    assert list((eng.home / "inbox").iterdir()) == []  # a refused decision writes nothing
    path = eng.drop_decision(aid, "approve", by="ann", reason="fine")
    body = json.loads(path.read_text())
    assert path.parent == eng.home / "inbox" and body["decision"] == "approve"
    assert body["run_id"] == "a" and body["by"] == "ann" and "sig" not in body
    bide.Watcher(eng, log=lambda _line: None).once()
    assert eng.get("a").status == bide.Status.DONE and eng.get("a").state["ok"] is True


def test_read_approval_key_strips_the_file(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"  s3cret\n")
    assert bide.read_approval_key(key) == b"s3cret"
