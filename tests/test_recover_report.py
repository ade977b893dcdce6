"""``Engine.recover`` returns a ``RecoverReport``: what it advanced, and why not the rest."""

from __future__ import annotations

from pathlib import Path

import bide
from bide.formats import LeaseAcquired, StatusChanged


def test_the_report_says_what_became_of_every_run_newest_first(tmp_path: Path) -> None:
    now = [5000.0]
    flow = bide.Flow("o")
    flow.node(lambda s, c: {"x": 1}, name="n", start=True)
    with bide.open(tmp_path / "home", durability="fast", clock=lambda: now[0],
                   lease_ttl=10) as eng:
        eng.register(flow)
        for rid, attempts in (("old", 0), ("loop", 5), ("fresh", 1)):
            now[0] += 1  # distinct creation times: "fresh" is the newest
            eng.submit("o", run_id=rid)
            eng.store.commit([LeaseAcquired(run_id=rid, owner="elsewhere:1:x", token=1,
                                            expires_at=now[0] + 10, attempts=attempts,
                                            at=now[0])])
        eng.store.commit([StatusChanged(run_id=r, status="RUNNING", at=now[0])
                          for r in ("old", "loop", "fresh")])
        now[0] += 30  # every lease expired
        eng.store.commit([StatusChanged(run_id=r, status="RUNNING", at=now[0])
                          for r in ("fresh", "loop")])
        now[0] += 1
        report = eng.recover(max_age=20, max_attempts=5)

    assert isinstance(report, bide.RecoverReport) and isinstance(report, list)
    assert [r.run_id for r in report] == ["fresh"] == [r.run_id for r in report.advanced]
    assert [(e.run_id, e.outcome, e.was, e.status) for e in report.entries] == [
        ("fresh", "advanced", "RUNNING", "DONE"),
        ("loop", "given_up", "RUNNING", "FAILED"),
        ("old", "given_up", "RUNNING", "FAILED"),
    ]
    reasons = {e.run_id: e.reason for e in report.given_up}
    assert "5 times" in reasons["loop"] and reasons["old"].startswith("expired")
    assert report.blocked == () and report.skipped == ()


def test_a_run_another_worker_holds_is_not_in_the_report(tmp_path: Path) -> None:
    flow = bide.Flow("o")
    flow.node(lambda s, c: {"x": 1}, name="n", start=True)
    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(flow)
        eng.submit("o", run_id="held")
        eng.store.commit([LeaseAcquired(run_id="held", owner=eng.owner + "-other", token=1,
                                        expires_at=9e12, at=1.0),
                          StatusChanged(run_id="held", status="RUNNING", at=1.0)])
        report = eng.recover()
    assert report == [] and report.entries == ()
