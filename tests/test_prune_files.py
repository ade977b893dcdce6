"""Files that don't pile up (issue 17, item 2): ``bide prune --files-older-than`` takes
old request files of settled runs and old inbox files, never a request still waiting;
``bide inbox`` lists rejected files with their reasons; ``bide doctor`` reports orphaned
runs and rejected files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import bide
import pytest
from bide.cli import main
from bide.formats import LeaseAcquired, StatusChanged
from click.testing import CliRunner

DAY = 86400


def ask_flow() -> bide.Flow:
    flow = bide.Flow("ask")

    @flow.node(start=True)
    def gate(state, ctx):
        return {"ok": ctx.approve("deploy")}

    return flow


def age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then), follow_symlinks=False)


@pytest.fixture
def home(tmp_path) -> Path:
    """Runs waiting, decided and cancelled, each with an old request file; old and new
    inbox files, one rejected with its reason."""
    home = tmp_path / "home"
    with bide.open(home, durability="fast") as eng:
        eng.register(ask_flow())
        for run_id in ("r-wait", "r-decided", "r-cancelled"):
            eng.start("ask", run_id=run_id)
        eng.decide(eng.get("r-decided").waiting["approval_id"], "approve")
        eng.cancel("r-cancelled")
        box = eng.doors.inbox
        (box / "bad.json").write_text("{not json")
        bide.Watcher(eng, log=lambda _line: None).once()  # rejects bad.json, resumes r-decided
        (box / "processed" / "old.json").write_text("{}")
        (box / "processed" / "new.json").write_text("{}")
        (eng.doors.requests / "a-nobody.json").write_text("{}")  # the store knows no such
    for path in [*(home / "requests").iterdir(), *(home / "inbox" / "rejected").iterdir(),
                 home / "inbox" / "processed" / "old.json"]:
        age(path, 40)
    return home


def files(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for sub in ("requests", "inbox/processed", "inbox/rejected")
            for p in (home / sub).iterdir()}


def test_prune_takes_old_settled_files_and_never_a_waiting_request(home):
    with bide.open(home, create=False) as eng:
        waiting = f"requests/{eng.get('r-wait').waiting['approval_id']}.json"
    before = files(home)
    dry = CliRunner().invoke(main, ["prune", "--home", str(home), "--files-older-than", "30d",
                                    "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert files(home) == before  # a dry run removes nothing
    out = CliRunner().invoke(main, ["prune", "--home", str(home), "--files-older-than", "30d",
                                    "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)["files"]
    assert report == json.loads(dry.output)["files"]
    after = files(home)
    assert after == {waiting, "requests/a-nobody.json", "inbox/processed/new.json"}
    assert report["waiting"] == [waiting.split("/")[1]]
    assert report["unknown"] == ["a-nobody.json"]
    assert sorted(report["removed"]) == sorted(str(home / f) for f in before - after)
    assert len(report["removed"]) == 5  # 2 settled requests, 1 processed, 1 rejected + reason


def test_nothing_younger_than_the_age_is_taken(home):
    out = CliRunner().invoke(main, ["prune", "--home", str(home), "--files-older-than", "60d"])
    assert out.exit_code == 0 and "removed 0 files" in out.output, out.output


def test_inbox_lists_rejected_files_with_their_reasons(home):
    out = CliRunner().invoke(main, ["inbox", "--home", str(home), "--json"])
    assert out.exit_code == 0, out.output
    (bad,) = json.loads(out.output)
    assert bad["name"] == "bad.json" and "JSON" in bad["reason"]
    assert bad["at"].endswith("+00:00")
    text = CliRunner().invoke(main, ["inbox", "--home", str(home)]).output
    assert "bad.json" in text and "JSON" in text


def test_doctor_reports_orphaned_runs_and_rejected_files(home):
    with bide.open(home, create=False) as eng:
        eng.register(ask_flow())
        eng.submit("ask", run_id="r-orphan")
        eng.store.commit([LeaseAcquired(run_id="r-orphan", owner="gone:1:x", token=1,
                                        expires_at=time.time() - 5),
                          StatusChanged(run_id="r-orphan", status=bide.Status.RUNNING,
                                        at=time.time())])
    out = CliRunner().invoke(main, ["doctor", "--home", str(home), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["orphaned_runs"] == ["r-orphan"] and doc["rejected_files"] == ["bad.json"]
    text = CliRunner().invoke(main, ["doctor", "--home", str(home)]).output
    assert "orphaned: 1 RUNNING run" in text and "1 rejected file" in text
