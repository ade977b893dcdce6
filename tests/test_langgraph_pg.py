"""BideSaver on a PostgreSQL home: the conformance suite, deltas, copies and retention.

Every test runs against the real server of ``tests/pg_cluster.py``. PostgreSQL's
seqs come from a sequence with gaps, so nothing may predict the seq a commit will
give (LMDB's are last + 1): the copy tests open gaps on purpose.
"""

from __future__ import annotations

import asyncio
import json
import operator
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from extras import need

need("psycopg")
need("langgraph.checkpoint.base")
need("langgraph.graph")

import psycopg  # noqa: E402
from bide.cli import main  # noqa: E402
from bide.engine.base.vocabulary import Status  # noqa: E402
from bide.engine.postgres.store import PostgresStore  # noqa: E402
from bide.formats.langgraph_records import LGBlob  # noqa: E402
from bide.langgraph import BideSaver  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from test_langgraph_saver import (  # noqa: E402
    CONFORMANCE_TESTS,
    LOOPER,
    SyncDriven,
    _start,
    assert_indexes_match_log,
    config,
    put,
    sigkill_failure_and_interrupt,
)


def burn_seqs(url: str, n: int) -> None:
    """Open a gap in the seqs, as rolled-back commits and other hosts' commits do."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT nextval('bide.seq') FROM generate_series(1, %s)", (n,))


def check_indexes(url: str) -> None:
    with closing(PostgresStore(url, durability="fast", create=False)) as store:
        assert_indexes_match_log(store)


class S(TypedDict):
    items: Annotated[list, operator.add]
    n: int


def growing(saver: BideSaver, limit: int) -> Any:
    """A graph whose ``items`` list grows by one item a step: stored as delta chains."""
    b = StateGraph(S)
    b.add_node("step", lambda s: {"items": [f"{s['n']}" + "x" * 200], "n": s["n"] + 1})
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < limit else END)
    return b.compile(checkpointer=saver)


def numbers(items: list[str]) -> list[int]:
    return [int(i.rstrip("x")) for i in items]


@pytest.fixture
def pg_saver(pg_url: str):
    with BideSaver.from_home(pg_url, durability="fast") as s:
        yield s
    check_indexes(pg_url)


# -- the conformance suite ----------------------------------------------------------------
@pytest.mark.parametrize("cls,durability", [(BideSaver, "durable"), (SyncDriven, "fast")])
def test_conformance_suite_passes_every_capability_on_postgres(pg_cluster, cls: type,
                                                               durability: str):
    need("langgraph.checkpoint.conformance")
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

    urls: list[str] = []

    @checkpointer_test(name=f"{cls.__name__}-postgres")
    async def factory():
        urls.append(pg_cluster.url(pg_cluster.create_database()))  # a fresh database each
        saver = cls(urls[-1], durability=durability)
        try:
            yield saver
        finally:
            saver.close()

    try:
        report = asyncio.run(validate(factory))
        results = report.results
        assert [f for r in results.values() for f in r.failures] == []
        assert {k for k, r in results.items() if r.detected} == {c.value for c in
                                                                  ALL_CAPABILITIES}
        assert {k: r.tests_passed for k, r in results.items()} == CONFORMANCE_TESTS
        assert sum(r.tests_passed for r in results.values()) == 81
        assert report.passed_all_base() and report.passed_all()
        assert len(urls) == len(ALL_CAPABILITIES)
        for url in urls:  # deletes, prunes and copies left indexes equal to a rebuild
            check_indexes(url)
    finally:
        for url in urls:
            pg_cluster.drop_database(url.rsplit("/", 1)[1].split("?")[0])


# -- copies keep their delta chains whatever seqs the server gives -------------------------
def test_copy_of_a_delta_chain_reads_back_after_a_seq_gap(pg_url: str, pg_saver: BideSaver):
    cfg = {**config("d"), "recursion_limit": 100}
    growing(pg_saver, 20).invoke({"items": [], "n": 0}, cfg)
    with pg_saver.threads.store.reader() as r:
        chained = [r.record(s) for s, t in r.run_entries("d") if t == LGBlob.TYPE]
    assert sum(isinstance(b, LGBlob) and b.base >= 0 for b in chained) > 10
    burn_seqs(pg_url, 7)
    pg_saver.copy_thread("d", "d2")
    states = {t: [tup.checkpoint["channel_values"].get("items", [])
                  for tup in pg_saver.list(config(t))] for t in ("d", "d2")}
    assert states["d2"] == states["d"] and numbers(states["d2"][0]) == list(range(20))
    with pg_saver.threads.store.reader() as r:
        copied = {s: r.record(s) for s, t in r.run_entries("d2") if t == LGBlob.TYPE}
    for blob in copied.values():  # every base is a blob of the copy, of the same channel
        assert isinstance(blob, LGBlob)
        if blob.base >= 0:
            base = copied[blob.base]
            assert isinstance(base, LGBlob) and base.channel == blob.channel
    pg_saver.delete_thread("d")  # the copy owns its chains
    assert numbers(pg_saver.get_tuple(config("d2")).checkpoint["channel_values"]["items"]) \
        == list(range(20))


def test_a_copy_with_another_hosts_commit_inside_it_finds_its_bases(
        pg_url: str, pg_saver: BideSaver, monkeypatch: pytest.MonkeyPatch):
    """Another host commits (and rolls one back) while the copy's transaction is open, after
    its snapshot: the seqs the copy is given follow those, not the snapshot's last seq."""
    growing(pg_saver, 12).invoke({"items": [], "n": 0}, {**config("d"), "recursion_limit": 100})
    want = [tup.checkpoint["channel_values"] for tup in pg_saver.list(config("d"))]
    created, inside = pg_saver.threads._created, []

    def created_while_another_host_commits(r: Any, thread: str, now: float) -> Any:
        if not inside:  # once: a retried copy meets no new commit
            inside.append(thread)
            with BideSaver.from_home(pg_url, durability="fast") as other:
                put(other, "other-host", {"v": [1]})
            burn_seqs(pg_url, 2)
        return created(r, thread, now)

    monkeypatch.setattr(pg_saver.threads, "_created", created_while_another_host_commits)
    pg_saver.copy_thread("d", "d2")
    assert inside == ["d2"]
    assert [t.checkpoint["channel_values"] for t in pg_saver.list(config("d2"))] == want
    assert pg_saver.get_tuple(config("other-host")) is not None


# -- real graphs in processes --------------------------------------------------------------
def test_graph_survives_sigkill_failure_and_interrupt_on_postgres(tmp_path: Path,
                                                                  pg_url: str):
    sigkill_failure_and_interrupt(tmp_path, pg_url)
    check_indexes(pg_url)


def test_two_processes_write_one_postgres_home(tmp_path: Path, pg_url: str):
    script = tmp_path / "looper.py"
    script.write_text(LOOPER)
    procs = [_start(script, pg_url, f"p{i}", 25) for i in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "OK" in out, err
    with BideSaver.from_home(pg_url, durability="fast") as saver:
        for thread in ("p0", "p1"):
            items = saver.get_tuple(config(thread)).checkpoint["channel_values"]["items"]
            assert [i.rstrip(".") for i in items] == [f"{thread}:{n}" for n in range(25)]
    check_indexes(pg_url)


# -- the async saver ------------------------------------------------------------------------
def test_async_saver_waits_for_the_server_off_the_event_loop(pg_url: str, pg_saver: BideSaver):
    """While ``aput`` waits on a row another session holds, the loop keeps running."""
    first = put(pg_saver, "t", {"v": [1]})
    parent = pg_saver.get_tuple(config("t", first))
    assert parent is not None
    checkpoint = {**parent.checkpoint, "id": first[:-1] + ("0" if first[-1] != "0" else "1")}

    async def main_loop(holder: psycopg.Connection) -> tuple[int, int]:
        ticks = 0
        task = asyncio.ensure_future(pg_saver.aput(config("t"), checkpoint,
                                                   {"source": "loop", "step": 1}, {}))
        deadline = time.monotonic() + 30
        while ticks < 20 and time.monotonic() < deadline:  # the put is stuck behind the lock
            await asyncio.sleep(0.01)
            ticks += 1
        assert not task.done()
        holder.rollback()  # release the row: the put goes through
        await asyncio.wait_for(task, timeout=30)
        return ticks, len([t async for t in pg_saver.alist(config("t"))])

    with psycopg.connect(pg_url) as holder:  # a transaction holding the thread's head row
        assert holder.execute("SELECT 1 FROM bide.kv WHERE tbl = 'runs' AND key = %s "
                              "FOR UPDATE", (b"t",)).fetchone() == (1,)
        safety = threading.Timer(15, holder.rollback)  # a loop blocked by aput cannot hang
        safety.start()
        try:
            ticks, listed = asyncio.run(main_loop(holder))
        finally:
            safety.cancel()
    assert ticks == 20 and listed == 2


# -- the CLI on a PostgreSQL home -------------------------------------------------------------
def test_cli_reads_and_prunes_a_langgraph_thread_on_postgres(pg_url: str):
    class State(TypedDict):
        log: Annotated[list, operator.add]

    builder = StateGraph(State)
    builder.add_node("step", lambda s: {"log": ["x"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    cfg = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
    with BideSaver.from_home(pg_url, durability="fast") as saver:
        graph = builder.compile(checkpointer=saver)
        for _ in range(3):
            graph.invoke({"log": []}, cfg)
        before, many = saver.get_tuple(cfg), len(list(saver.list(cfg)))
    cli = CliRunner()
    runs = cli.invoke(main, ["runs", "--home", pg_url, "--json"])
    assert runs.exit_code == 0, runs.output
    assert [(r["run_id"], r["flow"]) for r in json.loads(runs.output)] == [("t-1", "langgraph")]
    shown = cli.invoke(main, ["show", "t-1", "--home", pg_url, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["status"] == Status.DONE
    out = cli.invoke(main, ["prune", "--keep", "1", "--home", pg_url, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["removed_by_type"]["lg_checkpoint"] == many - 1
    with BideSaver.from_home(pg_url, durability="fast") as saver:
        after = saver.get_tuple(cfg)
        assert [c.config for c in saver.list(cfg)] == [after.config]
        assert after.checkpoint == before.checkpoint
        assert after.checkpoint["channel_values"]["log"] == ["x"] * 3
        graph = builder.compile(checkpointer=saver)
        assert graph.invoke({"log": []}, cfg)["log"] == ["x"] * 4  # goes on from what was kept
    doctor = cli.invoke(main, ["doctor", "--home", pg_url])
    assert doctor.exit_code == 0, doctor.output
    check_indexes(pg_url)


def test_bide_tools_and_interrupts_on_postgres(pg_url: str):
    """The LangGraph guarantees on a PostgreSQL home: a recorded call replays, an
    interrupt is a request in the database, a decision resumes the thread through the
    driver of another engine (another host's watcher)."""
    import bide
    from bide.langgraph import durable_tool, serve_graphs
    from langgraph.types import interrupt

    made: list[int] = []

    @durable_tool
    def pay(amount: int) -> str:
        made.append(amount)
        return f"paid {amount}"

    def node(state: S) -> dict[str, Any]:
        paid = pay(amount=5)
        return {"items": [paid, interrupt("ship it?")]}

    b = StateGraph(S)
    b.add_node("work", node)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    cfg = {"configurable": {"thread_id": "t-pg"}}
    with BideSaver.from_home(pg_url, durability="fast") as saver:
        b.compile(checkpointer=saver).invoke({"items": []}, cfg)
    with bide.open(pg_url, durability="fast") as eng:
        assert eng.get("t-pg").status == Status.WAITING_INPUT
        (req,) = eng.pending()
        eng.answer(req["approval_id"], "yes")
        serve_graphs(eng, b)
        (run,) = eng.recover().advanced
        assert run.status == Status.DONE
    assert made == [5]  # the node ran twice; the payment once
    check_indexes(pg_url)
