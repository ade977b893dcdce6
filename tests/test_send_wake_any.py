"""A map paused on several requests resumes when ANY of them is decided.

A map of N items that each pause leaves N open requests in one pause, but
``run.waiting`` names only one. Deciding another item's request must resume the run
(through ``engine.resume``, ``recover``, ``bide watch``, PostgreSQL's wake-ups), not
leave it waiting until the reported item is decided: the decision marks the run's
head (``RunHead.woken``). Counted outside the store (tests/apps/wake_map_app.py).
"""

from __future__ import annotations

import signal
import sys
import time
from collections import Counter
from pathlib import Path

import bide
import pytest
from bide.bench.kit.crashkit import run_worker, start_worker
from bide.engine.base.vocabulary import Decision, Status
from bide.engine.human.inbox import drop_decision
from bide.engine.run.run_view import RunView
from bide.engine.storage.memory_store import SCHEME, MemoryStore
from conftest import APPS, count_lines
from extras import need

sys.path.insert(0, str(APPS))
import wake_map_app  # noqa: E402


def open_home(home: str, local: Path) -> bide.Engine:
    if home.startswith(SCHEME):
        return bide.open(local, durability="fast", store=MemoryStore(home, durability="fast"))
    if home.startswith("postgresql://"):
        return bide.open(home, local=local, durability="fast")
    return bide.open(home, durability="fast")


@pytest.fixture(params=["lmdb", "memory", "postgres"])
def home(request, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(tmp_path / "effects.log"))
    if request.param == "postgres":
        need("psycopg")
        return request.getfixturevalue("pg_url")
    return f"{SCHEME}{tmp_path}" if request.param == "memory" else str(tmp_path / "home")


def not_reported(engine: bide.Engine, run: bide.Run) -> str:
    """The request of an item other than the one ``run.waiting`` names."""
    others = [p["approval_id"] for p in engine.pending()
              if p["run_id"] == run.run_id and p["approval_id"] != run.waiting["approval_id"]]
    assert len(others) == wake_map_app.ITEMS - 1
    return others[-1]


def item_of(engine: bide.Engine, aid: str) -> int:
    with engine.store.reader() as r:
        return int(r.approval(aid).task.rpartition(":")[2])


def test_deciding_an_item_the_run_does_not_report_resumes_that_item(home, tmp_path):
    effects = tmp_path / "effects.log"
    engine = open_home(home, tmp_path / "local")
    with engine:
        engine.register(wake_map_app.flow)
        run = engine.start("wake_map", run_id="r")
        assert run.status == Status.WAITING_APPROVAL
        assert count_lines(effects) == {"start 0": 1, "start 1": 1, "start 2": 1}
        aid = not_reported(engine, run)
        i = item_of(engine, aid)
        engine.decide(aid, Decision.APPROVE, by="ops")
        run = engine.resume("r")
        assert run.status == Status.WAITING_APPROVAL, (run.status, run.error)
        assert count_lines(effects) == {"start 0": 1, "start 1": 1, "start 2": 1,
                                        f"start {i}": 2, f"ship {i}": 1}
        assert run.waiting["approval_id"] != aid
        # nothing more decided: a resume (and recover) runs no item again
        assert engine.resume("r").status == Status.WAITING_APPROVAL
        assert list(engine.recover()) == []
        assert sum(count_lines(effects).values()) == 5
        for p in [p for p in engine.pending() if p["run_id"] == "r"]:
            engine.decide(p["approval_id"], Decision.APPROVE, by="ops")
        run = engine.resume("r")
        while run.status == Status.WAITING_APPROVAL:  # at most one resume per item
            run = engine.resume("r")
        assert run.status == Status.DONE and sorted(run.state["shipped"]) == [0, 1, 2]
        assert {k: v for k, v in count_lines(effects).items() if k.startswith("ship")} == {
            "ship 0": 1, "ship 1": 1, "ship 2": 1}


def test_recover_resumes_a_run_decided_on_an_item_it_does_not_report(home, tmp_path):
    effects = tmp_path / "effects.log"
    engine = open_home(home, tmp_path / "local")
    with engine:
        engine.register(wake_map_app.flow)
        run = engine.start("wake_map", run_id="r")
        aid = not_reported(engine, run)
        engine.decide(aid, Decision.APPROVE, by="ops")
        (advanced,) = list(engine.recover())
        assert advanced.status == Status.WAITING_APPROVAL
        assert count_lines(effects)[f"ship {item_of(engine, aid)}"] == 1


def world_of(store: str, tmp_path: Path, request) -> tuple[str, Path, list[str], dict]:
    """A home (directory or PostgreSQL URL), its local directory, the watcher's doors
    and the environment its subprocesses count effects with."""
    home, local, doors = str(tmp_path / "home"), tmp_path / "home", []
    if store == "postgres":
        need("psycopg")
        home = request.getfixturevalue("pg_url")
        doors = ["--inbox", str(local / "inbox"), "--requests", str(local / "requests")]
    effects = tmp_path / "effects.log"
    request.getfixturevalue("monkeypatch").setenv("BIDE_TEST_EFFECTS", str(effects))
    return home, local, doors, {"PYTHONPATH": str(APPS), "BIDE_TEST_EFFECTS": str(effects)}


def shipped(effects: Path) -> dict[str, int]:
    return {k: v for k, v in count_lines(effects).items() if k.startswith("ship")}


@pytest.mark.parametrize("store", ["lmdb", "postgres"])
def test_bide_watch_once_resumes_on_an_inbox_file_for_an_item_not_reported(
        store, tmp_path, request):
    home, local, doors, env = world_of(store, tmp_path, request)
    effects = Path(env["BIDE_TEST_EFFECTS"])
    with open_home(home, local) as engine:
        engine.register(wake_map_app.flow)
        run = engine.start("wake_map", run_id="r")
        aid = not_reported(engine, run)
        i = item_of(engine, aid)
        drop_decision(engine.home, aid, Decision.APPROVE, by="ann", inbox=engine.doors.inbox)
    proc = run_worker("-m", "bide.cli", "watch", "--once", "--home", home, *doors,
                      "--app", "wake_map_app:flow", env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert shipped(effects) == {f"ship {i}": 1}
    with open_home(home, local) as engine:
        run = engine.get("r")
        assert run.status == Status.WAITING_APPROVAL


@pytest.mark.parametrize("store", ["lmdb", "postgres"])
def test_a_serving_watcher_resumes_promptly_on_a_decision_for_an_item_not_reported(
        store, tmp_path, request):
    """LMDB: an inbox file. PostgreSQL: ``bide approve`` in another process, which a
    watcher hears of only through the commit's announcement (its rescan is 30 s)."""
    home, local, doors, env = world_of(store, tmp_path, request)
    effects = Path(env["BIDE_TEST_EFFECTS"])
    with open_home(home, local) as engine:
        engine.register(wake_map_app.flow)
        run = engine.start("wake_map", run_id="r")
        aid = not_reported(engine, run)
        i = item_of(engine, aid)
        inbox = engine.doors.inbox
    watcher = start_worker("-m", "bide.cli", "watch", "--home", home, *doors,
                           "--app", "wake_map_app:flow", "--durability", "fast", env=env)
    try:
        time.sleep(1.0)  # let it start serving (a decision before that is found anyway)
        if store == "postgres":
            approve = run_worker("-m", "bide.cli", "approve", aid, "--home", home, "--by", "ann")
            assert approve.returncode == 0, approve.stderr + approve.stdout
        else:
            drop_decision(home, aid, Decision.APPROVE, by="ann", inbox=inbox)
        deadline = time.monotonic() + 15  # well under the 30 s rescan on PostgreSQL
        while not shipped(effects):
            assert time.monotonic() < deadline and watcher.poll() is None, "not resumed"
            time.sleep(0.05)
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err + out
    assert shipped(effects) == {f"ship {i}": 1}
    with open_home(home, local) as engine:
        run = engine.get("r")
        assert run.status == Status.WAITING_APPROVAL


def expiring_flow(started: Counter, expires: int) -> bide.Flow:
    """Three items that each ask; only item ``expires``'s request has a deadline."""
    flow = bide.Flow("expiring")

    @flow.node(start=True)
    def plan(state, ctx):
        return {}

    @flow.node()
    def item(state, ctx):
        i = state["i"]
        started[i] += 1
        ok = ctx.approve("ship", {"item": i}, expires_in=0.5 if i == expires else None)
        return {"shipped": [[i, ok]]}

    flow.route("plan", lambda s: [bide.Send("item", {"i": i}) for i in range(3)])
    flow.reducer("shipped", bide.append)
    return flow


def test_an_item_whose_request_expires_first_is_the_one_reported(home, tmp_path):
    """The watcher's timer is the reported request's deadline (``workable_at``): a map
    reports the request that expires first, so its expiry resumes the run."""
    started: Counter = Counter()
    with open_home(home, tmp_path / "local") as engine:
        engine.register(expiring_flow(started, expires=2))
        run = engine.start("expiring", run_id="r")
        assert item_of(engine, run.waiting["approval_id"]) == 2
        with engine.store.reader() as r:
            view = RunView(r, r.head("r"))
            at = view.workable_at(engine.clock())
        assert at is not None and [h.run_id for h in engine._runnable()] == []
        time.sleep(max(0.0, at - engine.clock()) + 0.05)
        assert [h.run_id for h in engine._runnable()] == ["r"]
        (advanced,) = list(engine.recover())
        assert advanced.status == Status.WAITING_APPROVAL
        assert item_of(engine, advanced.waiting["approval_id"]) in (0, 1)
        assert started == Counter({0: 1, 1: 1, 2: 2})
        assert list(engine.recover()) == []  # nothing more to do until a decision
