"""The crash matrix and the random kill trials, in CI size (BIDE_TORTURE=nightly: full size).

Every fault point × occurrences 1..K × {SIGKILL, os._exit} × workload × durability;
after each crash a fresh process resumes to the end and the invariants are checked
against a fault-free run (tests/torture/harness/torture.py). The negative control turns intent
replay off and must see duplicated effects: proof the matrix can fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from bide.engine.base.faults import FAULT_POINTS
from bide.tests.torture.harness import torture, workloads

pytestmark = pytest.mark.slow
NIGHTLY = os.environ.get("BIDE_TORTURE") == "nightly"
PLAN = torture.Plan.nightly(seed=int(os.environ.get("BIDE_TORTURE_SEED", "0"))) if NIGHTLY \
    else torture.Plan(occurrences=12, random_trials=600, corpus=False,
                      seed=int(os.environ.get("BIDE_TORTURE_SEED", "0")))


# the LangGraph agent (bide tools) too, where LangGraph is installed (CI: always)
NEGATIVE_WORKLOADS = ("tools", "approval", *(("langgraph",) if workloads.langgraph_here() else ()))


@pytest.fixture(scope="module")
def tally():
    """Trials run where ``bide torture`` runs them (tmpfs when there is one); kept on failure."""
    base = Path(tempfile.mkdtemp(prefix="bide-torture-test-", dir=torture.scratch_dir()))
    t = torture.run(PLAN, base)
    yield t
    if not t.failures:
        shutil.rmtree(base, ignore_errors=True)


def explain(t: torture.Tally) -> str:
    lines = [f"seed {PLAN.seed}: {len(t.failures)} trial(s) broke an invariant"]
    for f in t.failures[:10]:
        lines.append(f"  {f['job']} at {f.get('point')}: {f['violations'][:3]} "
                     f"(kept in {f.get('dir')})")
    return "\n".join(lines)


def test_every_fault_point_is_reached_by_a_crash(tally):
    missing = set(FAULT_POINTS) - tally.points_covered
    assert not missing, f"fault points no crash test reaches: {sorted(missing)}"


def test_enough_crashes_were_injected(tally):
    assert tally.crashes >= (100_000 if NIGHTLY else 1_000), tally.table(len(FAULT_POINTS))


def test_no_invariant_broke(tally):
    assert not tally.failures, explain(tally)
    assert tally.lost_commits == 0 and tally.duplicated_effects == 0
    assert tally.watcher_crashes == 0
    assert tally.unknown_surfaced > 0  # the matrix really made outcomes unknown


def test_negative_control_without_intent_replay_effects_repeat(tmp_path):
    """The same matrix (tool workloads, intent protocol points) with replay switched off."""
    points = ["after_intent_completed", "after_pending_write", "after_checkpoint"]
    with torture.Pool(2) as pool:
        refs = {r["workload"]: Counter(r["points"]) for r in pool.map(
            [{"kind": "reference", "base": str(tmp_path), "workload": w, "durability": "fast"}
             for w in NEGATIVE_WORKLOADS])}
        jobs = torture.matrix_jobs(tmp_path, refs, occurrences=2, workloads=refs,
                                   durabilities=["fast"], only=points,
                                   switches="no_intent_replay")
        t = torture.Tally()
        for r in pool.map([{**j, "keep": False} for j in jobs]):
            t.add(r)
    assert t.crashes >= 10
    assert t.duplicated_effects > 0, "with replay off the matrix must see repeated effects"
    assert any("non-idempotent" in v for f in t.failures for v in f["violations"])
    if "langgraph" in NEGATIVE_WORKLOADS:  # its own check can fail as well
        assert any(f["job"]["workload"] == "langgraph" and "non-idempotent" in v
                   for f in t.failures for v in f["violations"])


def test_the_langgraph_agent_is_in_the_matrix_wherever_langgraph_is():
    assert ("langgraph" in PLAN.workloads) == workloads.langgraph_here()
    if os.environ.get("CI") == "true":  # CI installs the extra: the workload must run there
        assert "langgraph" in PLAN.workloads
