"""``bide copy SRC DST`` (issue 14.4): LMDB to PostgreSQL and back, record by record, verified.

The PostgreSQL ends are databases of the throwaway cluster of ``tests/pg_cluster.py``.
"""

from __future__ import annotations

import json
import operator
import sys
import time
from pathlib import Path
from typing import Annotated, TypedDict

import bide
import pytest
from bide.cli import main
from bide.engine.human import signing
from bide.engine.storage import memory_store, store
from bide.engine.upkeep.maintenance import prune
from bide.formats import LeaseAcquired, RunCreated, StatusChanged
from click.testing import CliRunner
from conftest import APPS, count_lines, run_worker
from extras import need

sys.path.insert(0, str(APPS))
import incident_app  # noqa: E402

need("psycopg")


@pytest.fixture
def databases(pg_cluster):
    """Fresh empty databases of the test cluster, as URLs: ``databases()`` makes one."""
    made: list[str] = []

    def make() -> str:
        made.append(pg_cluster.create_database())
        return pg_cluster.url(made[-1])

    yield make
    for name in made:
        pg_cluster.drop_database(name)


@pytest.fixture
def effects(tmp_path, monkeypatch):
    path = tmp_path / "effects.log"
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(path))
    return path


def build_home(home: Path, *, runs: int = 4) -> None:
    """Runs DONE and one WAITING_APPROVAL (tool calls, parallel nodes, a decision), pruned
    so the log has gaps and a high-water mark, and a LangGraph thread when it is installed."""
    with bide.open(home, durability="fast") as eng:
        eng.register(incident_app.flow)
        for i in range(runs):
            run = eng.start("incident", input={"query": f"q{i}"}, run_id=f"r-{i}")
            if i < runs - 1:
                eng.decide(run.waiting["approval_id"], bide.Decision.APPROVE, by="alice")
                assert eng.resume(f"r-{i}").status == bide.Status.DONE
        prune(eng.store, keep=1)
    try:
        graph_thread(home, times=3)
    except ImportError:
        pass


class LGState(TypedDict):
    log: Annotated[list, operator.add]


def graph_thread(home: Path, *, times: int) -> None:
    """A LangGraph thread whose list channel is stored as blobs on a ``base`` seq."""
    from bide.langgraph import BideSaver
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(LGState)
    builder.add_node("step", lambda s: {"log": ["x"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    for _ in range(times):
        with BideSaver.from_home(home, durability="fast") as saver:
            builder.compile(checkpointer=saver).invoke(
                {"log": []}, {"configurable": {"thread_id": "t-1"}})


def log_of(home, **kw) -> list[tuple[int, bytes]]:
    with bide.open(home, create=False, **kw) as eng, eng.store.reader() as r:
        return list(r.log())


def last_seq(home, **kw) -> int:
    with bide.open(home, create=False, **kw) as eng, eng.store.reader() as r:
        return r.last_seq()


# -- Store.restore, on every backend --------------------------------------------------------
@pytest.fixture(params=["lmdb", "memory", "postgres"])
def empty_store(request, tmp_path):
    if request.param == "postgres":
        from bide.engine.postgres.store import PostgresStore
        s = PostgresStore(request.getfixturevalue("pg_url"), durability="fast")
    elif request.param == "memory":
        s = bide.MemoryStore(f"{memory_store.SCHEME}{tmp_path}", durability="fast")
    else:
        from bide.engine.storage.lmdb_store import LMDBStore
        s = LMDBStore(tmp_path / "home", durability="fast")
    yield s
    s.close()
    memory_store.forget_all(str(tmp_path))


def test_restore_keeps_seqs_and_later_commits_go_on_above_them(empty_store):
    source = bide.MemoryStore(durability="fast")
    source.commit([RunCreated(run_id="r1", flow="f", at=1.0)])
    source.delete(lambda r: [])
    source.commit([StatusChanged(run_id="r1", status=bide.Status.FAILED, error="x", at=2.0)])
    with source.reader() as r:
        rows = [(seq + 10 * seq, raw) for seq, raw in r.log()]  # gaps, as PostgreSQL has
    assert [s for s, _ in rows] == [0, 11]
    empty_store.restore([], marker="copying")
    assert empty_store.copy_marker() == "copying"
    empty_store.restore(rows, marker="copying")
    with pytest.raises(ValueError, match="cannot restore seq 11"):
        empty_store.restore(rows[1:], marker=None)  # below the last seq: nothing written
    assert empty_store.copy_marker() == "copying"
    empty_store.restore([], marker=None, last_seq=40)
    assert empty_store.copy_marker() is None
    assert empty_store.commit([StatusChanged(run_id="r1", status=bide.Status.DONE)]) == [41]
    with empty_store.reader() as r:
        assert [s for s, _ in r.log()] == [0, 11, 41]
        assert r.raw(11) == rows[1][1]
        assert r.head("r1").status == bide.Status.DONE and r.head("r1").records == 3
        assert [s for s, _ in r.run_entries("r1")] == [0, 11, 41]


# -- the round trip ---------------------------------------------------------------------------
def test_lmdb_to_postgres_to_lmdb_keeps_every_record_and_a_paused_run_finishes_there(
        tmp_path, databases, effects):
    src, back = tmp_path / "src", tmp_path / "back"
    build_home(src)
    url, local = databases(), tmp_path / "pg-local"
    there = bide.copy_home(src, url, destination_local=local, batch_records=7)
    assert there.ok, (there.differences, there.destination_doctor.problems)
    assert there.records == len(log_of(src)) and there.batches > 1
    assert there.runs == {bide.Status.DONE: 3 + _has_langgraph(),
                          bide.Status.WAITING_APPROVAL: 1}
    assert there.source_doctor.records == there.destination_doctor.records
    home_again = bide.copy_home(url, back, source_local=local)
    assert home_again.ok, home_again.differences
    assert log_of(src) == log_of(url, local=local) == log_of(back)  # same seqs, same bytes
    assert last_seq(src) == last_seq(url, local=local) == last_seq(back)  # the high water too
    for home in (src, back):
        with bide.open(home, create=False) as a, bide.open(url, local=local, create=False) as b:
            assert [(h.run_id, h.status, h.state_version) for h in a.runs()] == \
                   [(h.run_id, h.status, h.state_version) for h in b.runs()]
            assert all(a.get(f"r-{i}").state == b.get(f"r-{i}").state for i in range(4))
    if _has_langgraph():
        assert _lg_values(back) == _lg_values(src) == ["x"] * 3
    waiting = json.loads((local / "requests").joinpath(
        next(p.name for p in (local / "requests").iterdir())).read_text())
    assert waiting["run_id"] == "r-3"
    applied = _git_applies(effects)
    with bide.open(url, local=local) as eng:
        eng.register(incident_app.flow)
        assert eng.decide(waiting["approval_id"], bide.Decision.APPROVE, by="bob") is True
        run = eng.resume("r-3")
        assert run.status == bide.Status.DONE and run.state["applied"] is True
        assert eng.doctor().ok
    assert _git_applies(effects) == applied + 1  # the approved patch, applied once there


def _git_applies(effects: Path) -> int:
    return sum(n for line, n in count_lines(effects).items() if line.startswith("tool git_apply"))


def _has_langgraph() -> bool:
    try:
        import langgraph.graph  # noqa: F401
    except ImportError:
        return False
    return True


def _lg_values(home: Path) -> list:
    from bide.langgraph import BideSaver
    with BideSaver.from_home(home, durability="fast") as saver:
        found = saver.get_tuple({"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}})
    return found.checkpoint["channel_values"]["log"]


# -- refusals: nothing is written ------------------------------------------------------------
@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_a_destination_that_is_not_empty_is_refused_and_left_as_it_was(tmp_path, databases,
                                                                         kind):
    src = tmp_path / "src"
    build_home(src, runs=1)
    dst = str(tmp_path / "dst") if kind == "lmdb" else databases()
    with bide.open(dst, local=tmp_path / "local", durability="fast") as eng:
        eng.store.commit([RunCreated(run_id="mine", flow="f", at=1.0)])
    before = log_of(dst, local=tmp_path / "local")
    for sub in ("inbox", "requests"):
        (tmp_path / ("dst" if kind == "lmdb" else "local") / sub).rmdir()
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(bide.CopyRefused, match=r"not empty: .* 1 runs \(mine\)") as refused:
        bide.copy_home(src, dst, destination_local=tmp_path / "local")
    assert not refused.value.interrupted and isinstance(refused.value, bide.Conflict)
    assert log_of(dst, local=tmp_path / "local") == before
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == files  # no new file


def test_a_run_under_a_live_lease_refuses_the_copy_an_expired_one_is_taken_over_there(
        tmp_path, effects):
    src, dst = tmp_path / "src", tmp_path / "dst"
    now = time.time()
    with bide.open(src, durability="fast") as eng:
        eng.register(incident_app.flow)
        eng.submit("incident", {"query": "q"}, run_id="busy")
        eng.store.commit([LeaseAcquired(run_id="busy", owner="elsewhere:1:w", token=1,
                                        expires_at=now + 30, attempts=1)])
    with pytest.raises(bide.CopyRefused, match="run busy is leased by elsewhere:1:w: a worker"):
        bide.copy_home(src, dst, now=now)
    assert not dst.exists()  # refused before the destination was made
    report = bide.copy_home(src, dst, now=now + 60)
    assert report.ok and report.records == 3  # created, its first checkpoint, the lease
    with bide.open(dst, durability="fast", clock=lambda: time.time() + 60) as eng:
        assert eng.get("busy").status == bide.Status.PENDING
        eng.register(incident_app.flow)
        (taken,) = eng.recover()  # the dead worker's run, taken over in the new home
        assert taken.run_id == "busy" and taken.status == bide.Status.WAITING_APPROVAL


def test_a_damaged_source_is_refused(tmp_path):
    src = tmp_path / "src"
    build_home(src, runs=1)
    with bide.open(src, durability="fast") as eng:  # an index that lies about a run
        eng.store.rebuild_indexes(lambda r: [])
    with pytest.raises(bide.CopyRefused, match="the source fails bide doctor"):
        bide.copy_home(src, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


def test_the_same_home_twice_is_refused(tmp_path):
    build_home(tmp_path / "src", runs=1)
    with pytest.raises(bide.CopyRefused, match="the same home"):
        bide.copy_home(tmp_path / "src", str(tmp_path / "x" / ".." / "src"))


def test_signed_decisions_stay_required_and_another_key_is_refused(tmp_path, databases):
    src, local = tmp_path / "src", tmp_path / "local"
    with bide.open(src, approval_key=b"k1", durability="fast") as eng:
        eng.store.commit([RunCreated(run_id="r", flow="f", at=1.0)])
    url = databases()
    report = bide.copy_home(src, url, destination_local=local)
    with bide.open(url, local=local) as pg:  # every host of the database sees it, not a file
        assert signing.requirement(signing.marker(local, pg.store)) == \
            signing.requirement(signing.marker(src))
    assert not (local / "signing.json").exists()
    assert any("signed decisions required" in note for note in report.notes)
    back = bide.copy_home(url, tmp_path / "back", source_local=tmp_path / "elsewhere")
    assert any("no directory" in n and "--source-local" in n for n in back.notes)  # not silent
    # the requirement comes back from the database even with no local directory for it
    assert signing.requirement(signing.marker(tmp_path / "back")) == \
        signing.requirement(signing.marker(src))
    other = tmp_path / "other"
    with bide.open(other, approval_key=b"k2", durability="fast"):
        pass
    with pytest.raises(bide.CopyRefused, match="signed with hmac-sha256"):
        bide.copy_home(src, other)
    assert signing.requirement(signing.marker(other))["key_id"] == signing.key_id(b"k2")


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_a_home_copies_to_its_own_kind_in_batches_of_bounded_size(tmp_path, databases, kind):
    src = tmp_path / "src"
    build_home(src, runs=2)
    first, second = ((tmp_path / "a", tmp_path / "b") if kind == "lmdb"
                     else (databases(), databases()))
    bide.copy_home(src, first, destination_local=tmp_path / "local")
    sizes: list[int] = []
    stop = store.observe(lambda e: sizes.append(len(e.seqs)) if e.kind == "restore" else None)
    try:
        report = bide.copy_home(first, second, batch_records=4, source_local=tmp_path / "local",
                                destination_local=tmp_path / "local")
    finally:
        stop()
    assert report.ok and log_of(second, local=tmp_path / "local") == log_of(src)
    assert sizes[0] == sizes[-1] == 0  # the marker first, cleared last
    assert max(sizes) == 4 and sum(sizes) == report.records and len(sizes) == report.batches + 2


def test_resume_finishes_only_a_copy_from_the_same_source(tmp_path):
    build_home(tmp_path / "src", runs=1)
    build_home(tmp_path / "other", runs=1)
    dst = bide.MemoryStore(durability="fast")
    dst.restore([], marker=json.dumps({"source": str(tmp_path / "src")}))
    with pytest.raises(bide.CopyRefused, match="from that same source only") as refused:
        bide.copy_home(tmp_path / "other", dst, resume=True)
    assert refused.value.interrupted and dst.copy_marker() is not None
    report = bide.copy_home(tmp_path / "src", dst, resume=True)
    assert report.ok and report.resumed_from == 0 and dst.copy_marker() is None


def test_memory_stores_copy_too_and_waiting_inbox_files_are_named_not_moved(tmp_path):
    build_home(tmp_path / "src", runs=2)
    (tmp_path / "src" / "inbox" / "d-1.json").write_text("{}")
    mem = bide.MemoryStore(durability="fast")
    report = bide.copy_home(tmp_path / "src", mem)
    assert report.ok and report.records == len(log_of(tmp_path / "src"))
    assert any("1 decision files wait in" in n and "d-1.json" in n for n in report.notes)
    assert (tmp_path / "src" / "inbox" / "d-1.json").exists()
    report = bide.copy_home(mem, tmp_path / "back")
    assert report.ok and log_of(tmp_path / "back") == log_of(tmp_path / "src")


# -- verification ---------------------------------------------------------------------------
def test_a_source_written_during_the_copy_fails_verification_with_the_difference_named(
        tmp_path):
    src = tmp_path / "src"
    build_home(src, runs=1)
    late = []

    def worker_still_running(event: store.WriteEvent) -> None:
        if event.kind == "restore" and not late:  # while the copy runs: a commit to the source
            with bide.open(src) as eng:  # the copy holds it open with durability "durable"
                late.extend(eng.store.commit([RunCreated(run_id="late", flow="f", at=1.0)]))

    stop = store.observe(worker_still_running)
    try:
        out = CliRunner().invoke(main, ["copy", str(src), str(tmp_path / "dst")])
    finally:
        stop()
    assert out.exit_code == 1, out.output
    assert f"log seq {late[0]}: in the source, missing from the destination" in out.output
    assert "runs late: in the source, missing from the destination" in out.output
    assert "verification failed: the two ends differ" in out.output


def test_cli_copy_prints_what_it_copied_and_both_doctors(tmp_path, databases):
    src = tmp_path / "src"
    build_home(src, runs=2)
    url = databases()
    cli = CliRunner()
    out = cli.invoke(main, ["copy", str(src), url, "--destination-local",
                            str(tmp_path / "local")])
    assert out.exit_code == 0, out.output
    assert f"copied {len(log_of(src))} records" in out.output
    assert f"doctor {src}: ok" in out.output and f"doctor {url}: ok" in out.output
    assert "verified: the same records at the same seqs" in out.output
    again = cli.invoke(main, ["copy", str(src), url, "--json"])
    assert again.exit_code == 1 and "the destination is not empty" in again.output
    back = cli.invoke(main, ["copy", url, str(tmp_path / "back"), "--json",
                             "--source-local", str(tmp_path / "local")])
    doc = json.loads(back.stdout, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert doc["ok"] and doc["records"] == len(log_of(src)) and doc["differences"] == []
    assert doc["destination_doctor"]["ok"] and doc["runs"][bide.Status.WAITING_APPROVAL] == 1


# -- a copy killed half-way -----------------------------------------------------------------
@pytest.mark.parametrize("kind, kill_at", [("postgres", 3), ("lmdb", 3), ("lmdb", 1),
                                           ("lmdb", "last batch")])
def test_a_copy_killed_mid_way_is_refused_as_interrupted_then_resumed(tmp_path, databases,
                                                                       kind, kill_at):
    src = tmp_path / "src"
    build_home(src)
    whole = log_of(src)
    dst = databases() if kind == "postgres" else str(tmp_path / "dst")
    local = ["--destination-local", str(tmp_path / "local")]
    cmd = ["-m", "bide.cli", "copy", str(src), dst, "--batch-records", "5", *local]
    # commit 1 writes the marker, then one per batch of 5 records, then the marker goes
    occurrence = 1 + -(-len(whole) // 5) if kill_at == "last batch" else kill_at
    killed = run_worker(*cmd, fault=f"after_commit:{occurrence}:kill")
    assert killed.returncode == -9, killed.stderr
    copied = log_of(dst, local=tmp_path / "local")
    assert copied == whole[:5 * (occurrence - 1)]
    again = run_worker(*cmd)
    assert again.returncode == 1
    assert "was interrupted" in again.stderr and "--resume" in again.stderr, again.stderr
    assert log_of(dst, local=tmp_path / "local") == copied  # nothing deleted, nothing added
    with bide.open(dst, local=tmp_path / "local", create=False) as eng:
        assert any("has not finished" in w for w in eng.doctor().warnings)
    resumed = run_worker(*cmd, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed at seq {copied[-1][0] + 1 if copied else 0}" in resumed.stdout
    assert log_of(dst, local=tmp_path / "local") == whole
    with bide.open(dst, local=tmp_path / "local", create=False) as eng:
        assert eng.store.copy_marker() is None and eng.doctor().ok
