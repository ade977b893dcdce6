"""The runtime runs flows on the in-memory store (the second ``Store`` backend).

The runtime, intent and approval tests that use the ``engine`` fixture run
again with ``--store memory``; the fixture then checks no LMDB file was made.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import bide
from bide.engine.storage.memory_store import MemoryStore

TESTS = Path(__file__).parent
SUITES = ("test_runtime.py", "test_intents.py", "test_approvals.py")


def test_runtime_intent_and_approval_tests_pass_on_the_memory_store() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         "--store", "memory", *(str(TESTS / s) for s in SUITES)],
        capture_output=True, text=True, timeout=600, cwd=TESTS.parent)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_an_engine_on_a_memory_store_runs_and_reopens(tmp_path: Path) -> None:
    flow = bide.Flow("count")

    @flow.node(start=True)
    def add(state, ctx):
        return {"n": state.get("n", 0) + 1}

    name = f"memory:{tmp_path}"
    with bide.open(tmp_path / "home", store=MemoryStore(name)) as eng:
        eng.register(flow)
        assert eng.start("count", run_id="r1").state == {"n": 1}
    with bide.open(tmp_path / "home", store=MemoryStore(name, create=False)) as eng:
        assert eng.get("r1").status == "DONE"
    assert not (tmp_path / "home" / "store").exists()


def test_doctor_prune_and_stats_work_on_a_memory_store(tmp_path: Path) -> None:
    from bide.engine.upkeep import maintenance

    flow = bide.Flow("steps")

    @flow.node(start=True)
    def one(state, ctx):
        return {"n": 1}

    @flow.node(after=["one"])
    def two(state, ctx):
        return {"n": 2}

    with bide.open(tmp_path / "home", store=MemoryStore()) as eng:
        eng.register(flow)
        eng.start("steps", run_id="r", policy=bide.Policy(snapshot="full"))
        store = eng.store
        assert maintenance.doctor(store).ok
        assert maintenance.doctor(store, rebuild=True).ok
        before = maintenance.stats(store)["total_records"]
        pruned = maintenance.prune(store, keep=1)
        assert pruned.records > 0 and pruned.runs_trimmed == {"r": pruned.records}
        assert maintenance.stats(store)["total_records"] == before - pruned.records
        assert maintenance.doctor(store).ok
        assert eng.state("r") == {"n": 2}
