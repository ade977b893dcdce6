"""Commits of different runs never conflict on PostgreSQL; commits of one run stay atomic.

The store runs READ COMMITTED with a lock per run (pg_store's docstring). These
races run on the real test server, in threads and in separate processes, each
looped: two decisions on one approval record exactly one, a stale fence is
refused, two creators of one run id make one run, and many runs committing at
once lose nothing and are never retried. Every wait has a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from bide.engine.base.errors import DecisionRefused, StaleLease, StoreError
from bide.engine.base.vocabulary import Decision, Status
from bide.engine.run.approvals import undecided
from bide.formats import (
    ApprovalDecided,
    ApprovalRequested,
    LeaseAcquired,
    RunCreated,
    StatusChanged,
)
from extras import need

psycopg = need("psycopg")
from bide.engine.postgres.store import PostgresStore  # noqa: E402  (needs psycopg)

WAIT = 20.0  # seconds any wait may take before it counts as a hang
TIMEOUTS = "options=-c%20statement_timeout%3D20000%20-c%20lock_timeout%3D20000"
ROUNDS = 20


def opened(pg_url: str) -> PostgresStore:
    return PostgresStore(f"{pg_url}&{TIMEOUTS}", durability="fast")


def created(run_id: str, token: int = 1) -> list[Any]:
    return [RunCreated(run_id=run_id, flow="f", status=Status.RUNNING, at=1.0),
            LeaseAcquired(run_id=run_id, owner="w", token=token, expires_at=9e12)]


def asked(run_id: str, approval_id: str) -> ApprovalRequested:
    return ApprovalRequested(run_id=run_id, approval_id=approval_id, kind="action", node="n",
                             task="t", action="ship", digest="d", state_version=0,
                             allowed=[Decision.APPROVE.value, Decision.REJECT.value],
                             requested_at=1.0)


def racing(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run every fn in its own thread at once; their results or exceptions, in order."""
    go = threading.Barrier(len(fns), timeout=WAIT)
    out: list[Any] = [None] * len(fns)

    def run(i: int) -> None:
        try:
            go.wait()
            out[i] = fns[i]()
        except BaseException as exc:  # handed to the test thread
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive(), f"a racer did not finish within {WAIT}s"
    return out


def meet(barrier: threading.Barrier) -> None:
    """Wait briefly for the other racer: under a run lock it never comes (it is queued),
    without one both would read before either writes, and the race would show."""
    try:
        barrier.wait(0.2)
    except threading.BrokenBarrierError:
        pass


def decide(store: PostgresStore, approval_id: str, decision: str,
           barrier: threading.Barrier | None = None) -> list[int]:
    """What ``Engine.decide`` commits: the decision, checked in the transaction."""
    with store.reader() as r:
        req = r.approval(approval_id)
    assert req is not None

    def check(r: Any) -> None:
        undecided(r, approval_id, decision, now=2.0)
        if barrier is not None:
            meet(barrier)

    return store.commit([ApprovalDecided(run_id=req.run_id, approval_id=approval_id,
                                         decision=decision, by=decision, at=2.0)],
                        check=check)


def test_two_racing_decisions_on_one_approval_record_exactly_one(pg_url):
    store = opened(pg_url)
    try:
        for i in range(ROUNDS):
            run, aid = f"r{i}", f"a{i}"
            store.commit([*created(run), asked(run, aid)])
            barrier = threading.Barrier(2)
            out = racing([lambda d=d, aid=aid, b=barrier: decide(store, aid, d, b)
                          for d in (Decision.APPROVE.value, Decision.REJECT.value)])
            won = [o for o in out if isinstance(o, list)]
            assert len(won) == 1, out
            assert sum(isinstance(o, DecisionRefused) for o in out) == 1, out
            with store.reader() as r:
                types = [t for _, t in r.run_entries(run)]
                assert types.count(ApprovalDecided.TYPE) == 1
                assert r.approval(aid).decision in (Decision.APPROVE, Decision.REJECT)
        assert store.retries == 0
    finally:
        store.close()


def test_a_stale_fence_is_refused_whoever_commits_first(pg_url):
    """A worker holding token 1 commits while another takes the lease over (token 2):
    either the worker's record lands before the takeover, or it is refused."""
    store = opened(pg_url)
    try:
        for i in range(ROUNDS):
            run = f"r{i}"
            store.commit(created(run))
            barrier = threading.Barrier(2)

            def takeable(r: Any, run: str = run, barrier: threading.Barrier = barrier) -> None:
                assert r.head(run).lease_token == 1
                meet(barrier)

            def late(r: Any, barrier: threading.Barrier = barrier) -> None:
                meet(barrier)
                time.sleep(0.05)  # unlocked, the takeover would land meanwhile

            out = racing([
                lambda run=run: store.commit([StatusChanged(run_id=run, status=Status.RUNNING,
                                                            reason="late")],
                                             fence=(run, 1), check=late),
                lambda run=run: store.commit([LeaseAcquired(run_id=run, owner="thief", token=2,
                                                            expires_at=9e12)],
                                             check=takeable)])
            assert isinstance(out[1], list), out
            with store.reader() as r:
                entries = [r.record(seq) for seq, _ in r.run_entries(run)]
            kinds = [type(e).__name__ for e in entries]
            if isinstance(out[0], StaleLease):
                assert kinds == ["RunCreated", "LeaseAcquired", "LeaseAcquired"]
            else:
                assert isinstance(out[0], list), out
                assert kinds == ["RunCreated", "LeaseAcquired", "StatusChanged",
                                 "LeaseAcquired"]
            with pytest.raises(StaleLease):  # and from now on it is refused
                store.commit([StatusChanged(run_id=run, status=Status.RUNNING)],
                             fence=(run, 1))
    finally:
        store.close()


def test_two_creators_of_one_run_id_make_one_run(pg_url):
    store = opened(pg_url)
    try:
        for i in range(ROUNDS):
            run = f"new{i}"
            barrier = threading.Barrier(2)

            def create(owner: str, run: str = run, barrier: threading.Barrier = barrier
                       ) -> list[int]:
                def check(r: Any) -> None:
                    if r.head(run) is not None:
                        raise FileExistsError(run)
                    meet(barrier)

                return store.commit([RunCreated(run_id=run, flow=owner, at=1.0)], check=check)

            out = racing([lambda: create("first"), lambda: create("second")])
            assert sum(isinstance(o, list) for o in out) == 1, out
            assert sum(isinstance(o, FileExistsError) for o in out) == 1, out
            with store.reader() as r:
                assert r.head(run).records == 1
    finally:
        store.close()


def test_many_runs_committing_at_once_lose_nothing_and_never_conflict(pg_url):
    """Under SERIALIZABLE these commits, which share no row, aborted each other (the
    predicate locks are pages of the shared kv index): here not one is retried."""
    store = opened(pg_url)
    runs, commits = [f"run{i}" for i in range(6)], 15
    try:
        store.commit([r for run in runs for r in created(run)])

        def work(run: str) -> int:
            for k in range(commits):
                store.commit([StatusChanged(run_id=run, status=Status.RUNNING, reason=str(k))],
                             fence=(run, 1))
            return commits

        assert racing([lambda run=run: work(run) for run in runs]) == [commits] * len(runs)
        with store.reader() as r:
            for run in runs:
                reasons = [r.record(s).reason for s, t in r.run_entries(run)
                           if t == StatusChanged.TYPE]
                assert reasons == [str(k) for k in range(commits)]
            assert len(list(r.log())) == len(runs) * (2 + commits)
        assert (store.retries, store.relocks) == (0, 0)
    finally:
        store.close()


def test_a_commit_that_reads_a_run_it_did_not_name_locks_it_and_runs_again(pg_url):
    """A callable's reads are not known up front: the first pass reads run b unlocked,
    so the transaction is run again holding b's lock before its outcome counts."""
    store = opened(pg_url)
    try:
        store.commit([*created("a"), *created("b")])
        passes = []

        def records(r: Any) -> list[Any]:
            passes.append(r.head("b").records)
            return [StatusChanged(run_id="a", status=Status.RUNNING, reason="saw b")]

        store.commit(records, fence=("a", 1))
        assert len(passes) == 2 and store.relocks == 1

        def refuse(r: Any) -> None:  # an exception seen unlocked is not trusted either
            passes.append(sum(1 for _ in r.heads()))
            raise LookupError("no")

        with pytest.raises(LookupError):
            store.commit([StatusChanged(run_id="a", status=Status.RUNNING)], check=refuse)
        assert len(passes) == 4 and store.relocks == 2  # a scan of every head: whole home
    finally:
        store.close()


WORKER = """
import json, sys
from bide.engine.run.approvals import undecided
from bide.engine.base.errors import DecisionRefused
from bide.engine.postgres.store import PostgresStore
from bide.engine.base.vocabulary import Status
from bide.formats import ApprovalDecided, StatusChanged
url, mode, arg = sys.argv[1:]
store = PostgresStore(url, durability="fast")
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
if mode == "decide":
    aid, decision = arg.split(":")
    run = aid[1:]
    try:
        store.commit([ApprovalDecided(run_id="r" + run, approval_id=aid, decision=decision,
                                      at=2.0)],
                     check=lambda r: undecided(r, aid, decision, now=2.0) and None)
        won = True
    except DecisionRefused:
        won = False
    print(json.dumps({"won": won, "retries": store.retries}), flush=True)
else:
    for k in range(int(arg)):
        store.commit([StatusChanged(run_id=mode, status=Status.RUNNING, reason=str(k))],
                     fence=(mode, 1))
    print(json.dumps({"retries": store.retries, "relocks": store.relocks}), flush=True)
store.close()
"""


def in_processes(url: str, jobs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Start one process per job, let them all go at once, and read what each says."""
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, f"{url}&{TIMEOUTS}", mode, arg],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for mode, arg in jobs]
    try:
        deadline = time.monotonic() + WAIT
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready", "a worker did not start"
            assert time.monotonic() < deadline
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 1.0) + WAIT)
            assert p.returncode == 0, out
            outs.append(json.loads(out))
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(WAIT)


@pytest.mark.slow
def test_processes_racing_decisions_record_one_and_many_runs_never_conflict(pg_url):
    store = opened(pg_url)
    try:
        for i in range(ROUNDS):
            store.commit([*created(f"r{i}"), asked(f"r{i}", f"a{i}")])
            outs = in_processes(pg_url, [("decide", f"a{i}:{Decision.APPROVE.value}"),
                                         ("decide", f"a{i}:{Decision.REJECT.value}")])
            assert sorted(o["won"] for o in outs) == [False, True], outs
            with store.reader() as r:
                assert [t for _, t in r.run_entries(f"r{i}")].count(ApprovalDecided.TYPE) == 1
        runs = [f"p{i}" for i in range(4)]
        store.commit([r for run in runs for r in created(run)])
        outs = in_processes(pg_url, [(run, "25") for run in runs])
        assert all(o == {"retries": 0, "relocks": 0} for o in outs), outs
        with store.reader() as r:
            assert all(r.head(run).records == 2 + 25 for run in runs)
    finally:
        store.close()


def test_a_failed_commit_pipeline_ends_cleanly_and_writes_nothing(pg_url, capfd, caplog):
    """The log insert fails mid-pipeline (the sequence set back onto existing seqs): the
    error is raised once, nothing of the commit is written, and psycopg prints no
    "error ignored terminating <Pipeline>" while it unwinds."""
    store = opened(pg_url)
    try:
        store.commit(created("a"))
        many = [StatusChanged(run_id="a", status=Status.RUNNING, reason=str(k))
                for k in range(1500)]
        store.commit(many, fence=("a", 1))
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT setval('bide.seq', 5)")
        with pytest.raises(StoreError, match="duplicate key"):
            store.commit(many, fence=("a", 1))
        with store.reader() as r:
            assert r.head("a").records == 2 + 1500
        [seq] = store.commit([StatusChanged(run_id="a", status=Status.RUNNING)],
                             fence=("a", 1))  # the connections were left usable
        assert seq > 1501
    finally:
        store.close()
    shown = capfd.readouterr().err + caplog.text
    assert "error ignored" not in shown, shown


def test_a_state_with_large_values_folds_as_a_rebuild_would(pg_url, tmp_path):
    """Checkpoint commits prefetch the run's latest-state entries, values over
    ``LARGE`` left to be read when asked: the index still equals a replay's."""
    import bide
    from bide.engine.postgres.reader import LARGE
    from bide.engine.upkeep import maintenance

    flow = bide.Flow("big")

    @flow.node(start=True)
    def one(state, ctx):
        return {"big": "x" * (LARGE * 2), "small": 1, "items": ["a" * 100] * 12}

    @flow.node(after=["one"])
    def two(state, ctx):
        return {"big": state["big"] + "y", "small": state["small"] + 1,
                "items": state["items"] + ["b"]}

    @flow.node(after=["two"])
    def three(state, ctx):
        return {"small": state["small"] + 1}

    @flow.node(after=["three"])
    def four(state, ctx):  # the large value's entry is deleted: it must have been seen
        return {"big": ["z"]}

    with bide.open(pg_url, local=tmp_path / "local") as eng:
        eng.register(flow)
        done = eng.start("big", run_id="r")
        assert done.state["big"] == ["z"] and done.state["small"] == 3
        assert len(done.state["items"]) == 13
        assert eng.get("r").state == done.state
        assert maintenance.doctor(eng.store).ok
