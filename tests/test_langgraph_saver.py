"""BideSaver: LangGraph's checkpointer contract on a bide home.

The conformance suite from PyPI runs twice (async API, and the sync API through
a subclass whose async methods call the sync ones, since the suite only drives
async). Real graphs then run in subprocesses that are killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import copy
import json
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from extras import need
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

need("langgraph.checkpoint.base")
need("langgraph.graph")

from bide.engine.langgraph.store import NotALangGraphThread, needed  # noqa: E402
from bide.engine.storage.index import DERIVED, apply  # noqa: E402
from bide.engine.storage.lmdb_store import LMDBStore  # noqa: E402
from bide.formats import RunCreated, decode  # noqa: E402
from bide.formats.langgraph_records import LGBlob  # noqa: E402
from bide.langgraph import BideSaver  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

CONFORMANCE_TESTS = {"put": 17, "put_writes": 10, "get_tuple": 10, "list": 16,
                     "delete_thread": 5, "delete_for_runs": 7, "copy_thread": 8, "prune": 8}


# -- helpers ---------------------------------------------------------------------------
class _MemTables:
    def __init__(self) -> None:
        self.data: dict[str, dict[bytes, bytes]] = {t: {} for t in DERIVED}

    def get(self, table: str, key: bytes) -> bytes | None:
        return self.data[table].get(key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.data[table][key] = value

    def delete(self, table: str, key: bytes) -> None:
        self.data[table].pop(key, None)


def assert_indexes_match_log(store: LMDBStore) -> None:
    """Every derived table equals a replay of the log (what ``bide doctor`` checks)."""
    with store.reader() as r:
        mem = _MemTables()
        for seq, raw in r.log():
            apply(mem, seq, len(raw), decode(raw, key=seq))
        for table in DERIVED:
            assert dict(r.scan(table)) == mem.data[table], f"table {table} differs from a rebuild"


def config(thread: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def put(saver: BideSaver, thread: str, values: dict[str, Any], *, parent: str | None = None,
        ns: str = "", **meta: Any) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: saver.get_next_version(None, None) for k in values}
    saver.put(config(thread, parent, ns), cp, {"source": "loop", "step": 0, **meta},
              cp["channel_versions"])
    return cp["id"]


@pytest.fixture
def saver(tmp_path: Path):
    with BideSaver.from_home(tmp_path / "home", durability="fast") as s:
        yield s
    with closing(LMDBStore(tmp_path / "home", durability="fast", create=False)) as store:
        assert_indexes_match_log(store)


# -- the conformance suite -------------------------------------------------------------
class SyncDriven(BideSaver):
    """The suite drives only async methods: these call the sync twins instead."""

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        return self.put(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        self.put_writes(*args, **kwargs)

    async def aget_tuple(self, config: Any) -> Any:
        return self.get_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> Any:
        for item in self.list(config, **kwargs):
            yield item

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Any) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source: str, target: str) -> None:
        self.copy_thread(source, target)

    async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


@pytest.mark.parametrize("cls,durability", [(BideSaver, "durable"), (SyncDriven, "fast")])
def test_conformance_suite_passes_every_capability(tmp_path: Path, cls: type, durability: str):
    need("langgraph.checkpoint.conformance")
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

    homes: list[Path] = []

    @checkpointer_test(name=cls.__name__)
    async def factory():
        homes.append(tmp_path / f"home-{len(homes)}")  # a fresh home per capability
        saver = cls(homes[-1], durability=durability)
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(factory))
    results = report.results
    failures = [f for r in results.values() for f in r.failures]
    assert failures == []
    assert {k for k, r in results.items() if r.detected} == {c.value for c in ALL_CAPABILITIES}
    assert {k: r.tests_passed for k, r in results.items()} == CONFORMANCE_TESTS
    assert sum(r.tests_passed for r in results.values()) == 81
    assert report.passed_all_base() and report.passed_all()
    assert len(homes) == len(ALL_CAPABILITIES)
    for home in homes:  # deletes, prunes and copies left indexes equal to a rebuild
        with closing(LMDBStore(home, durability=durability, create=False)) as store:
            assert_indexes_match_log(store)


# -- a real graph across processes ------------------------------------------------------
WORKER = textwrap.dedent('''
    import json, operator, os, sys, time
    from typing import Annotated, TypedDict
    from langgraph.graph import StateGraph, START, END
    from langgraph.types import Command, interrupt
    from bide.langgraph import BideSaver

    home, counts, phase = sys.argv[1], sys.argv[2], sys.argv[3]
    CFG = {"configurable": {"thread_id": "t-1"}}

    def bump(name):
        """Count executions outside the store; returns this one's attempt number."""
        with open(os.path.join(counts, name), "a") as f:
            f.write("x")
        return os.path.getsize(os.path.join(counts, name))

    class S(TypedDict):
        log: Annotated[list, operator.add]

    def plain(name):
        def node(state):
            bump(name)
            return {"log": [name]}
        return node

    def c(state):
        attempt = bump("c")
        if attempt == 1:  # wait until a and b are durable, then get killed
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                tup = saver.get_tuple(CFG)
                done = {t for t, ch, _ in (tup.pending_writes if tup else []) if ch == "log"}
                if len(done) == 2:
                    break
                time.sleep(0.02)
            print("READY", flush=True)
            time.sleep(120)
        if attempt == 2:
            raise RuntimeError("c failed once")
        return {"log": ["c"]}

    def review(state):
        bump("review")
        answer = interrupt({"question": "ship it?"})
        return {"log": [f"review:{answer}"]}

    b = StateGraph(S)
    for name in ("a", "b"):
        b.add_node(name, plain(name))
        b.add_edge(START, name)
    b.add_node("c", c)
    b.add_edge(START, "c")
    b.add_node("join", plain("join"))
    b.add_edge(["a", "b", "c"], "join")
    b.add_node("review", review)
    b.add_edge("join", "review")
    b.add_node("finish", plain("finish"))
    b.add_edge("review", "finish")
    b.add_edge("finish", END)

    def status():
        with saver.threads.store.reader() as r:
            head = r.head("t-1")
        return {"status": head.status, "flow": head.flow, "error": head.error}

    saver = BideSaver(home)
    graph = b.compile(checkpointer=saver)
    if phase == "1":
        graph.invoke({"log": []}, CFG)
    elif phase == "2":
        try:
            graph.invoke(None, CFG)
        except RuntimeError as exc:
            print("FAILED", json.dumps({"error": str(exc), **status()}), flush=True)
        out = graph.invoke(None, CFG)
        print("INTERRUPTED", json.dumps({"value": out["__interrupt__"][0].value, **status()}),
              flush=True)
        time.sleep(120)
    else:
        state = graph.get_state(CFG)
        before = {"next": list(state.next), "interrupts": [i.value for i in state.interrupts]}
        out = graph.invoke(Command(resume="approved"), CFG)
        print("DONE", json.dumps({"before": before, "log": out["log"], **status()}), flush=True)
''')


def _start(script: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_until_kill(proc: subprocess.Popen, last: str, timeout: float = 30) -> dict[str, str]:
    """Collect ``WORD json`` lines until ``last`` is seen, then SIGKILL the process."""
    lines: dict[str, str] = {}
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            word, _, rest = line.strip().partition(" ")
            lines[word] = rest
            if word == last:
                break
    finally:
        timer.cancel()
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate()  # reaps the process and closes its pipes
    assert last in lines, err
    return lines


def test_graph_survives_sigkill_failure_and_interrupt_across_processes(tmp_path: Path):
    home = tmp_path / "home"
    sigkill_failure_and_interrupt(tmp_path, home)
    with closing(LMDBStore(home, create=False)) as store:
        assert_indexes_match_log(store)


def sigkill_failure_and_interrupt(tmp_path: Path, home: Path | str) -> None:
    """A graph killed mid-superstep, failing once, interrupted and killed, then resumed by
    a third process: every node ran as often as it had to, no more (LMDB or PostgreSQL)."""
    script, counts = tmp_path / "worker.py", tmp_path / "counts"
    script.write_text(WORKER)
    counts.mkdir()

    # 1: a and b finish, c is killed mid-superstep
    _read_until_kill(_start(script, home, counts, 1), "READY")
    # 2: c fails (a, b are not run again), then succeeds; review interrupts; killed there
    seen = _read_until_kill(_start(script, home, counts, 2), "INTERRUPTED")
    failed, interrupted = json.loads(seen["FAILED"]), json.loads(seen["INTERRUPTED"])
    assert failed["status"] == "FAILED" and "c failed once" in failed["error"]
    assert interrupted["status"] == "WAITING_INPUT"  # its request is in the inbox
    assert interrupted["value"] == {"question": "ship it?"}
    # 3: a new process resumes the interrupt with Command(resume=...)
    proc = _start(script, home, counts, 3)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    done = json.loads(out.split("DONE ", 1)[1])
    assert done["before"] == {"next": ["review"], "interrupts": [{"question": "ship it?"}]}
    assert sorted(done["log"][:3]) == ["a", "b", "c"]
    assert done["log"][3:] == ["join", "review:approved", "finish"]
    assert (done["status"], done["flow"]) == ("DONE", "langgraph")
    runs = {p.name: p.stat().st_size for p in counts.iterdir()}
    assert runs == {"a": 1, "b": 1, "c": 3, "join": 1, "review": 2, "finish": 1}


LOOPER = textwrap.dedent('''
    import operator, sys
    from typing import Annotated, TypedDict
    from langgraph.graph import StateGraph, START, END
    from bide.langgraph import BideSaver

    home, thread, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])

    class S(TypedDict):
        items: Annotated[list, operator.add]
        n: int

    def step(s):
        return {"items": [thread + ":" + str(s["n"]) + "." * 4000], "n": s["n"] + 1}

    b = StateGraph(S)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    with BideSaver.from_home(home, map_size=128 * 1024) as saver:
        out = b.compile(checkpointer=saver).invoke(
            {"items": [], "n": 0}, {"configurable": {"thread_id": thread}, "recursion_limit": 500})
    assert out["n"] == steps and len(out["items"]) == steps
    print("OK", flush=True)
''')


def test_two_processes_write_one_home_while_the_map_grows(tmp_path: Path):
    script, home = tmp_path / "looper.py", tmp_path / "home"
    script.write_text(LOOPER)
    LMDBStore(home, map_size=128 * 1024).close()
    procs = [_start(script, home, f"p{i}", 40) for i in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "OK" in out, err
    with BideSaver.from_home(home, durability="durable") as saver:
        assert saver.threads.store.info()["map_size"] > 128 * 1024
        for thread in ("p0", "p1"):
            state = saver.get_tuple(config(thread)).checkpoint["channel_values"]
            assert state["n"] == 40
            assert [i.split(":")[0] for i in state["items"]] == [thread] * 40
            assert [int(i.split(":")[1].rstrip(".")) for i in state["items"]] == list(range(40))
        with saver.threads.store.reader() as r:
            heads = {h.run_id: (h.flow, h.status) for h in r.heads()}
        assert heads == {"p0": ("langgraph", "DONE"), "p1": ("langgraph", "DONE")}
        assert_indexes_match_log(saver.threads.store)


# -- the API directly -------------------------------------------------------------------
def test_more_than_ten_writes_per_task_come_back_in_order(saver: BideSaver):
    cid = put(saver, "t", {"x": 1})
    cfg = config("t", cid)
    saver.put_writes(cfg, [(f"ch{i}", i) for i in range(15)], task_id="task-b", task_path="b")
    saver.put_writes(cfg, [("__interrupt__", "wait"), ("__error__", "boom")], task_id="task-a",
                     task_path="a")
    saver.put_writes(cfg, [(f"ch{i}", -i) for i in range(15)], task_id="task-b",
                     task_path="b")  # first write wins: ignored
    got = saver.get_tuple(cfg).pending_writes
    assert got[:2] == [("task-a", "__interrupt__", "wait"), ("task-a", "__error__", "boom")]
    assert got[2:] == [("task-b", f"ch{i}", i) for i in range(15)]
    saver.put_writes(cfg, [("__error__", "again")], task_id="task-a", task_path="a")
    assert ("task-a", "__error__", "again") in saver.get_tuple(cfg).pending_writes  # replaced


def test_a_graph_node_writing_twelve_channels_keeps_their_order(saver: BideSaver):
    keys = [f"k{i}" for i in range(12)]
    S = TypedDict("S", {k: int for k in keys})  # noqa: N806
    b = StateGraph(S)
    b.add_node("many", lambda s: {k: i for i, k in enumerate(keys)})
    b.add_edge(START, "many")
    b.add_edge("many", END)
    graph = b.compile(checkpointer=saver)
    graph.invoke({k: -1 for k in keys}, config("g"))
    step0 = [t for t in saver.list(config("g")) if t.metadata["step"] == 0][0]
    writes = [(ch, v) for task, ch, v in step0.pending_writes if ch.startswith("k")]
    assert writes == [(k, i) for i, k in enumerate(keys)]


def test_list_across_all_threads_newest_first_with_filter_and_limit(saver: BideSaver):
    ids = []
    for i in range(6):
        ids.append(put(saver, f"t{i % 3}", {"v": i}, score=i % 2, ns="" if i != 5 else "sub"))
    every = [t.config["configurable"]["checkpoint_id"] for t in saver.list(None)]
    assert every == ids[::-1]
    assert [t.checkpoint["channel_values"]["v"] for t in saver.list(None, filter={"score": 1})] \
        == [5, 3, 1]
    assert len(list(saver.list(None, limit=4))) == 4
    assert [t.checkpoint["channel_values"]["v"] for t in saver.list(
        None, before=config("t0", ids[3]))] == [2, 1, 0]
    assert [t.config["configurable"]["checkpoint_ns"] for t in saver.list(
        {"configurable": {"thread_id": "t2"}})] == ["sub", ""]  # no ns in config: every ns
    with saver.threads.store.reader() as r:
        assert {h.run_id: h.flow for h in r.heads()} == {f"t{i}": "langgraph" for i in range(3)}


def test_growing_list_is_stored_as_deltas_and_reads_back_everywhere(tmp_path: Path):
    home = tmp_path / "home"

    class S(TypedDict):
        items: Annotated[list, operator.add]
        n: int

    def graph(saver: BideSaver, limit: int) -> Any:
        b = StateGraph(S)
        b.add_node("step", lambda s: {"items": [f"{s['n']}" + "x" * 1000], "n": s["n"] + 1})
        b.add_edge(START, "step")
        b.add_conditional_edges("step", lambda s: "step" if s["n"] < limit else END)
        return b.compile(checkpointer=saver)

    def numbers(items: list[str]) -> list[int]:
        return [int(i.rstrip("x")) for i in items]

    cfg = {**config("d"), "recursion_limit": 500}
    with BideSaver.from_home(home, durability="fast") as saver:
        graph(saver, 60).invoke({"items": [], "n": 0}, cfg)
        with saver.threads.store.reader() as r:
            first_process = r.last_seq()
    with BideSaver.from_home(home, durability="fast") as saver:  # no in-memory chain now
        out = graph(saver, 70).invoke({"items": [], "n": 60}, cfg)
        assert numbers(out["items"]) == list(range(70))
        with saver.threads.store.reader() as r:
            blobs = [(s, r.record(s)) for s, t in r.run_entries("d") if t == "lg_blob"]
            stored = sum(len(r.raw(s) or b"") for s, _ in r.run_entries("d"))
        items = [(s, b) for s, b in blobs if isinstance(b, LGBlob) and b.channel == "items"]
        assert sum(b.base >= 0 for _, b in items) > len(items) // 2
        assert any(s > first_process and 0 <= b.base <= first_process for s, b in items)
        assert stored < 12 * 70 * 1024  # the whole state per step would be ~2.5 MB
        # time travel: continue from an older checkpoint; its list is the base, not the newest
        old = next(t for t in saver.list(config("d")) if t.metadata["step"] == 30)
        with saver.threads.store.reader() as r:
            before_fork = r.last_seq()
        out = graph(saver, 70).invoke(None, {**old.config, "recursion_limit": 500})
        assert numbers(out["items"]) == list(range(70))
        with saver.threads.store.reader() as r:
            forked = [r.record(s) for s, t in r.run_entries("d") if s > before_fork
                      and t == "lg_blob"]
        assert any(b.channel == "items" and 0 <= b.base <= before_fork for b in forked)
        states = [t.checkpoint["channel_values"] for t in saver.list(config("d"))]
        for state in states:
            assert numbers(state.get("items", [])) == list(range(len(state.get("items", []))))
        saver.copy_thread("d", "d2")
        saver.prune(["d"])
        for thread in ("d", "d2"):
            latest = saver.get_tuple(config(thread)).checkpoint["channel_values"]
            assert numbers(latest["items"]) == list(range(70))
        assert len(list(saver.list(config("d")))) == 1
        assert len(list(saver.list(config("d2")))) == len(states)
        assert_indexes_match_log(saver.threads.store)


def test_retention_keeps_deltas_bases_and_bide_heads_right(saver: BideSaver):
    first = put(saver, "t", {"a": [1]}, run_id="run-1")
    second = put(saver, "t", {"a": [1, 2]}, parent=first, run_id="run-2")
    saver.put_writes(config("t", second), [("a", [3])], task_id="x")
    put(saver, "other", {"a": [9]}, run_id="run-2")
    store = saver.threads.store
    with store.reader() as r:
        before, top = r.head("t"), r.last_seq()
        items = [(s, len(r.raw(s)), r.record(s)) for s, _ in r.run_entries("t")]
    kinds = [(type(rec).__name__, getattr(rec, "base", None)) for _, _, rec in items]
    assert kinds == [("RunCreated", None), ("LGBlob", -1), ("LGCheckpoint", None),
                     ("LGBlob", items[1][0]), ("LGCheckpoint", None), ("LGWrites", None)]
    summary = saver.threads.summary("t")
    assert summary["checkpoints"] == {"": 2} and summary["status"] == "RUNNING"
    assert summary["latest"]["checkpoint_id"] == second
    assert summary["latest"]["pending_writes"] == [("x", "a")]
    # keeping the newest checkpoint keeps the whole value its delta is read from
    assert needed(items) == {items[i][0] for i in (0, 1, 3, 4, 5)}

    saver.delete_for_runs(["run-2"])
    assert saver.get_tuple(config("other")) is None
    assert saver.get_tuple(config("t")).checkpoint["channel_values"] == {"a": [1]}
    with store.reader() as r:
        after = r.head("t")
        assert [s for s, _ in r.run_entries("t")] == [items[i][0] for i in (0, 1, 2)]
        assert r.head("other").records == 1  # its RunCreated: the thread exists, empty
    assert (after.records, after.checkpoint) == (3, items[2][0]) != (before.records,
                                                                       before.checkpoint)
    saver.delete_thread("t")
    with store.reader() as r:
        assert r.head("t") is None and list(r.run_entries("t")) == []
    assert_indexes_match_log(store)
    assert store.commit([RunCreated(run_id="later", flow="x")]) == [top + 1]  # no seq reuse


def test_thread_id_of_a_bide_run_is_refused(saver: BideSaver):
    saver.threads.store.commit([RunCreated(run_id="r-1", flow="incident")])
    with pytest.raises(NotALangGraphThread, match="incident"):
        put(saver, "r-1", {"a": 1})
    with pytest.raises(NotALangGraphThread):
        saver.delete_thread("r-1")
    with saver.threads.store.reader() as r:
        assert r.head("r-1").flow == "incident"


def test_copies_share_the_store_and_threads_use_it_safely(saver: BideSaver):
    clone = copy.copy(saver)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            who = clone if i % 2 else saver
            cid = put(who, f"t{i % 3}", {"v": [i]})
            for j in range(5):
                who.put_writes(config(f"t{i % 3}", cid), [("v", [j])], task_id=f"task{j}")
            assert who.get_tuple(config(f"t{i % 3}", cid)).pending_writes
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(list(saver.list(None))) == 12
    assert_indexes_match_log(saver.threads.store)


def test_async_graph_and_async_list(saver: BideSaver):
    class S(TypedDict):
        log: Annotated[list, operator.add]

    b = StateGraph(S)
    for name in ("a", "b"):
        b.add_node(name, lambda s, name=name: {"log": [name]})
        b.add_edge(START, name)
    b.add_edge(["a", "b"], END)
    graph = b.compile(checkpointer=saver)

    async def main() -> tuple[Any, list[Any]]:
        out = await graph.ainvoke({"log": []}, config("async"))
        return out, [t async for t in saver.alist(config("async"), limit=2)]

    out, listed = asyncio.run(main())
    assert sorted(out["log"]) == ["a", "b"]
    assert len(listed) == 2 and listed[0].metadata["step"] > listed[1].metadata["step"]


def test_durability_is_checked_and_the_core_does_not_import_langgraph(tmp_path: Path):
    with pytest.raises(ValueError, match="durability"):
        BideSaver(tmp_path / "h", durability="sync")
    code = ("import sys, bide, bide.engine.storage.index, bide.engine.langgraph.store, "
            "bide.formats.langgraph_records; "
            "sys.exit(any(m.split('.')[0] == 'langgraph' for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


# -- records (format tests without LangGraph: test_langgraph_records.py) -----------------
ints = st.integers(-(2**63), 2**63 - 1)  # what LangGraph's msgpack serializer takes
items = st.one_of(ints, st.text(max_size=30), st.lists(ints, max_size=3),
                  st.dictionaries(st.text(max_size=4), ints, max_size=2))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.booleans(), st.lists(items, max_size=20)), min_size=1,
                      max_size=40))
def test_every_checkpoint_of_a_changing_list_reads_back_exactly(tmp_path_factory, steps):
    """Appends become deltas, anything else a whole value; every version reads back as put."""
    home = tmp_path_factory.mktemp("prop") / "home"
    expected, value, parent = {}, [], None
    with BideSaver.from_home(home, durability="fast") as saver:
        for append, new in steps:
            value = value + new if append else new
            parent = put(saver, "p", {"items": value}, parent=parent)
            expected[parent] = list(value)
        for cid, want in expected.items():
            assert saver.get_tuple(config("p", cid)).checkpoint["channel_values"] == \
                {"items": want}
        assert_indexes_match_log(saver.threads.store)


# -- issue 11, item 17: where BideSaver differed from LangGraph's own savers ----------------
def _put_with_id(saver: Any, thread: str, checkpoint_id: str, parent: str | None,
                 values: dict[str, Any], writes: list[tuple[str, Any]] = ()) -> None:
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id
    cp["channel_values"] = values
    cp["channel_versions"] = {k: saver.get_next_version(None, None) for k in values}
    saver.put(config(thread, parent), cp, {"source": "loop", "step": 0}, cp["channel_versions"])
    if writes:
        saver.put_writes(config(thread, checkpoint_id), list(writes), f"task-{checkpoint_id}")


def test_an_empty_checkpoint_id_reads_the_latest_like_langgraphs_savers(saver: BideSaver):
    from langgraph.checkpoint.memory import InMemorySaver

    memory = InMemorySaver()
    for s in (saver, memory):
        _put_with_id(s, "t", "1f0a-1", None, {"n": 1})
        _put_with_id(s, "t", "1f0a-2", "1f0a-1", {"n": 2})
    for s in (memory, saver):  # the reference first: this is what LangGraph's savers do
        empty = config("t", "")
        latest = s.get_tuple(empty)
        assert latest is not None, type(s).__name__
        assert latest.config["configurable"]["checkpoint_id"] == "1f0a-2"
        assert latest.checkpoint["channel_values"] == {"n": 2}
        assert [t.config["configurable"]["checkpoint_id"] for t in s.list(empty)] == [
            "1f0a-2", "1f0a-1"]
        assert [t.checkpoint["id"] for t in s.list(config("t"), before=empty)] == [
            "1f0a-2", "1f0a-1"]
    assert asyncio.run(saver.aget_tuple(config("t", ""))).checkpoint["id"] == "1f0a-2"


def _delta_history_within(call: Any, seconds: float = 10) -> Any:
    """Run ``call`` on a thread; fail (not hang) if it does not return in time."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="delta-history", daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "the parent-chain walk did not end: it loops"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_the_delta_history_walk_follows_parents_like_the_base_class(saver: BideSaver):
    from langgraph.checkpoint.base import BaseCheckpointSaver

    _put_with_id(saver, "t", "1f0b-1", None, {"log": ["a"]}, [("log", "b")])
    _put_with_id(saver, "t", "1f0b-2", "1f0b-1", {}, [("log", "c"), ("other", 1)])
    _put_with_id(saver, "t", "1f0b-3", "1f0b-2", {}, [("log", "pending")])
    target = config("t", "1f0b-3")
    ours = _delta_history_within(
        lambda: saver.get_delta_channel_history(config=target, channels=["log", "none"]))
    base = BaseCheckpointSaver.get_delta_channel_history(saver, config=target,
                                                         channels=["log", "none"])
    assert ours == base
    assert ours["log"]["seed"] == ["a"]
    assert [w[1:] for w in ours["log"]["writes"]] == [("log", "b"), ("log", "c")]
    assert ours["none"] == {"writes": []}
    assert asyncio.run(saver.aget_delta_channel_history(config=target, channels=["log"])) == {
        "log": ours["log"]}


def test_a_cycle_in_the_parent_chain_is_reported_not_walked_forever(saver: BideSaver):
    from bide import CorruptRecord

    _put_with_id(saver, "t", "1f0c-1", None, {}, [("log", "x")])
    _put_with_id(saver, "t", "1f0c-2", "1f0c-1", {}, [("log", "y")])
    _put_with_id(saver, "t", "1f0c-1", "1f0c-2", {}, [("log", "x")])  # put again: a loop
    target = config("t", "1f0c-2")
    with pytest.raises(CorruptRecord, match="1f0c-2.*loops|loops.*1f0c-2"):
        _delta_history_within(
            lambda: saver.get_delta_channel_history(config=target, channels=["log"]))
    with pytest.raises(CorruptRecord):
        _delta_history_within(lambda: asyncio.run(
            saver.aget_delta_channel_history(config=target, channels=["log"])))
