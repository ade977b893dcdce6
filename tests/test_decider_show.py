"""``bide show`` says why a run has its status, and only while that is still true."""

from __future__ import annotations

import sys

import pytest
from bide.formats import StatusChanged
from conftest import APPS

sys.path.insert(0, str(APPS))
import incident_app  # noqa: E402


@pytest.fixture(autouse=True)
def effects(tmp_path, monkeypatch):
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(tmp_path / "effects.log"))


def moves(engine, run_id: str) -> list[tuple[str, str | None]]:
    with engine.store.reader() as r:
        return [(rec.status, rec.reason) for seq, _ in r.run_entries(run_id)
                if isinstance(rec := r.record(seq), StatusChanged)]


def test_a_submitted_run_is_started_not_resumed(engine) -> None:
    engine.register(incident_app.flow)
    engine.submit("incident", input={"query": "disk full"}, run_id="r-1")
    run = engine.resume("r-1")
    assert run.status == "WAITING_APPROVAL"
    assert ("RUNNING", "started") in moves(engine, "r-1")
    assert engine.show("r-1")["reason"] is None  # paused since: "started" says nothing now
    engine.decide(run.waiting["approval_id"], "approve", by="alice")
    assert engine.resume("r-1").status == "DONE"
    assert moves(engine, "r-1")[-1] == ("RUNNING", "resumed")
    shown = engine.show("r-1")
    assert shown["status"] == "DONE" and shown["reason"] is None


def test_checkpoints_explain_a_version_listed_twice(engine, home) -> None:
    from bide.cli import main
    from click.testing import CliRunner

    engine.register(incident_app.flow)
    run = engine.start("incident", input={"query": "disk full"}, run_id="r-2")
    engine.decide(run.waiting["approval_id"], "approve", by="alice")
    assert engine.resume("r-2").status == "DONE"
    rows = engine.checkpoint_rows("r-2")
    versions = [r["version"] for r in rows]
    assert len(versions) > len(set(versions))  # the pause checkpoints its version again
    (again,) = [r for r in rows if r["note"]]
    assert "went from RUNNING to WAITING_APPROVAL" in again["note"]
    assert [r["note"] for r in rows if r is not again] == [None] * (len(rows) - 1)
    engine.close()  # the CLI opens the home itself
    out = CliRunner().invoke(main, ["checkpoints", "--home", str(home), "r-2"]).output
    assert f"{again['version']}*" in out and f"* {again['note']} (seq {again['seq']})" in out
