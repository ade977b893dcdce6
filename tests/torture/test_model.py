"""Model-based test: random sequences of start, step, crash, resume, approve, reject,
decide, cancel, prune, compact and fork against a small model of what must be true.

The flow: ``prep`` (an idempotent tool) → ``pay`` (asks for approval, then calls the
non-idempotent ``charge``) → ``finish``. A crash arms one fault point in ``raise`` mode,
resumes until it fires, then drops the engine and opens a new one (the model's clock
jumps past the lease, as a dead worker's would expire). Reconciliation is decided as a
correct operator would: by looking at the world (the effects counted outside the store).

What must hold after every step: ``doctor`` is clean; DONE and CANCELLED never change;
``charge`` happened at most once per run; a DONE run's state is the fault-free one for
its decision, with ``charge`` done exactly once if approved and never if rejected;
prune and compact change no run's status or state.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path

import bide
import pytest
from bide.engine.base import faults
from bide.engine.base.faults import InjectedFault
from bide.engine.run import held
from bide.engine.upkeep import compaction, maintenance, operations
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _outcomes_always_ride(monkeypatch):
    """A "raise" fault fires in the thread that makes the outcome durable: the node's or
    the flusher's, by timing. Hypothesis replays a case and needs the same one each
    time, so here outcomes always ride (tests/test_held_*.py cover the flusher)."""
    monkeypatch.setattr(held, "HOLD_BOUND", 3600.0)

TTL = 5.0
TERMINAL = ("DONE", "CANCELLED")
CRASH_POINTS = ("before_commit", "after_commit", "after_run_created", "after_checkpoint",
                "after_pending_write", "before_intent_prepared", "after_intent_prepared",
                "after_tool_effect", "after_intent_completed", "after_pause_committed",
                "after_request_file", "after_lease_acquired")


CRASH = st.none() | st.tuples(st.sampled_from(CRASH_POINTS), st.integers(1, 4))


class World:
    """Side effects, counted outside the store."""

    def __init__(self) -> None:
        self.effects: Counter[str] = Counter()

    def flow(self) -> bide.Flow:
        @bide.tool(idempotent=True)
        def notify(run: str, *, idempotency_key: str) -> str:
            self.effects[f"notify {run} {idempotency_key}"] += 1
            return "notified"

        @bide.tool
        def charge(run: str, *, idempotency_key: str) -> str:
            self.effects[f"charge {run}"] += 1
            return "charged"

        flow = bide.Flow("model")

        @flow.node(start=True)
        def prep(state, ctx):
            return {"prep": ctx.tool(notify, ctx.run_id)}

        @flow.node(after=["prep"])
        def pay(state, ctx):
            if not ctx.approve("pay", payload={"amount": 5}):
                return {"paid": None}
            return {"paid": ctx.tool(charge, ctx.run_id)}

        @flow.node(after=["pay"])
        def finish(state, ctx):
            return {"done": True}

        return flow

    def charged(self, run_id: str) -> int:
        return self.effects[f"charge {run_id}"]


class Model(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="bide-model-"))
        self.home = self.dir / "home"
        self.now = [1_000_000.0]
        self.world = World()
        self.flow = self.world.flow()
        self.eng = self._open()
        self.status: dict[str, str] = {}  # run -> last status seen
        self.decision: dict[str, str] = {}  # run -> approve/reject given to its pay approval
        self.inherited: dict[str, object] = {}  # fork -> "paid" in the state it started from
        self.n = 0

    def _open(self) -> bide.Engine:
        eng = bide.open(self.home, durability="fast", lease_ttl=TTL, clock=lambda: self.now[0])
        eng.register(self.flow)
        return eng

    def teardown(self) -> None:
        faults.configure(None)
        self.eng.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------------
    def _live(self) -> list[str]:
        return sorted(r for r, s in self.status.items() if s not in TERMINAL)

    def _waiting(self, kind: str) -> list[dict]:
        return sorted((p for p in self.eng.pending() if p["kind"] == kind
                       and self.status.get(p["run_id"]) not in TERMINAL),
                      key=lambda p: p["approval_id"])

    def _note(self, run_id: str) -> str:
        status = self.eng.get(run_id).status.value
        before = self.status.get(run_id)
        event(f"{before} -> {status}")
        assert before not in TERMINAL or status == before, f"{run_id}: {before} -> {status}"
        self.status[run_id] = status
        return status

    def _advance(self, run_id: str, crash: tuple[str, int] | None = None) -> None:
        """Resume the run to its next boundary; with ``crash``, a fault may stop it first
        (then the engine is dropped and reopened, as a new worker after a dead one)."""
        if crash is not None:
            faults.configure(f"{crash[0]}:{crash[1]}:raise")
        try:
            run = self.eng.resume(run_id)
        except InjectedFault:
            event(f"crashed at {crash[0]}")  # type: ignore[index]
            self.eng.close()  # the worker is gone; its lease expires
            self.now[0] += TTL + 1
            self.eng = self._open()
            self._note(run_id)
            return
        finally:
            faults.configure(None)
        assert run.status.value in ("DONE", "WAITING_APPROVAL", "NEEDS_RECONCILIATION",
                                    "FAILED"), (run_id, run.status, run.error)
        if run.status.value == "FAILED":  # only an injected fault's leftovers may fail a run
            assert "InjectedFault" in (run.error or ""), run.error
        self._note(run_id)

    def _snapshot(self) -> dict[str, tuple[str, dict]]:
        return {r: (self.eng.get(r).status.value, self.eng.state(r)) for r in self.status}

    # -- rules ------------------------------------------------------------------------------
    @initialize()
    def first_run(self) -> None:
        self.start()

    @precondition(lambda self: len(self.status) < 6)
    @rule()
    def start(self) -> None:
        run_id = f"r{self.n}"
        self.n += 1
        self.eng.submit("model", run_id=run_id)
        self._note(run_id)

    @precondition(lambda self: self._live())
    @rule(data=st.data(), crash=CRASH)
    def step(self, data, crash) -> None:
        """Resume a run to its next boundary (a pause, the end, or nothing to do), or crash
        on the way there."""
        self._advance(data.draw(st.sampled_from(self._live())), crash)

    @precondition(lambda self: self._live())
    @rule(data=st.data(), point=st.sampled_from(CRASH_POINTS), occurrence=st.integers(1, 4))
    def crash(self, data, point: str, occurrence: int) -> None:
        self._advance(data.draw(st.sampled_from(self._live())), (point, occurrence))

    @precondition(lambda self: self._waiting("approval"))
    @rule(data=st.data(), approve=st.booleans(), crash=CRASH)
    def decide_approval(self, data, approve: bool, crash) -> None:
        """approve / reject: a human decides, and the run goes on."""
        p = data.draw(st.sampled_from(self._waiting("approval")))
        decision = "approve" if approve else "reject"
        assert self.eng.decide(p["approval_id"], decision, by="model") is True
        self.decision[p["run_id"]] = decision
        self._advance(p["run_id"], crash)

    @precondition(lambda self: self._waiting("reconciliation"))
    @rule(data=st.data(), crash=CRASH)
    def decide(self, data, crash) -> None:
        """Reconciliation, as a correct operator: look at the world, then say what happened."""
        p = data.draw(st.sampled_from(self._waiting("reconciliation")))
        run_id = p["run_id"]
        assert p["tool"] == "charge"
        if self.world.charged(run_id):
            self.eng.decide(p["approval_id"], "mark_done", by="model", result="charged")
        else:
            self.eng.decide(p["approval_id"], "retry", by="model")
        self._advance(run_id, crash)

    @precondition(lambda self: self._live())
    @rule(data=st.data(), dice=st.integers(0, 3))
    def cancel(self, data, dice: int) -> None:
        if dice:  # rarer than the rest: a cancelled run has nothing left to test
            return
        run_id = data.draw(st.sampled_from(self._live()))
        assert operations.cancel(self.eng, run_id, reason="model") is True
        assert self._note(run_id) == "CANCELLED"
        with pytest.raises(bide.RunNotResumable):
            self.eng.resume(run_id)

    @rule()
    def prune(self) -> None:
        before = self._snapshot()
        maintenance.prune(self.eng.store, keep=1)
        assert self._snapshot() == before

    @rule()
    def compact(self) -> None:
        before = self._snapshot()
        self.eng.close()  # compaction refuses while any process has the store open
        compaction.compact(self.home)
        self.eng = self._open()
        assert self._snapshot() == before

    @precondition(lambda self: self.status and len(self.status) < 8)
    @rule(data=st.data(), dice=st.integers(0, 2))
    def fork(self, data, dice: int) -> None:
        if dice:
            return
        parent = data.draw(st.sampled_from(sorted(self.status)))
        versions = sorted({c.version for c in self.eng.checkpoints(parent)})
        if not versions:
            return  # prune kept no checkpoint to fork from (it always keeps the latest)
        version = data.draw(st.sampled_from(versions))
        new = operations.fork(self.eng, parent, version, f"r{self.n}")
        self.n += 1
        self.inherited[new] = self.eng.state(new).get("paid", "unset")
        assert self._note(new) == "PENDING"

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def doctor_is_clean(self) -> None:
        report = maintenance.doctor(self.eng.store)
        assert report.ok, report.problems[:3]

    @invariant()
    def non_idempotent_effects_at_most_once(self) -> None:
        for run_id in self.status:
            assert self.world.charged(run_id) <= 1, run_id

    @invariant()
    def finished_runs_match_the_fault_free_run(self) -> None:
        for run_id, status in self.status.items():
            assert self.eng.get(run_id).status.value == status  # nothing moved behind us
            if status != "DONE":
                continue
            decision = self.decision.get(run_id)
            if decision is None:  # a fork taken after its parent's pay: nothing asked again
                paid = self.inherited[run_id]
            else:
                paid = "charged" if decision == "approve" else None
            assert self.eng.state(run_id) == {"prep": "notified", "paid": paid, "done": True}
            assert self.world.charged(run_id) == (decision == "approve"), run_id


Model.TestCase.settings = settings(max_examples=300, stateful_step_count=30, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
TestModel = Model.TestCase
