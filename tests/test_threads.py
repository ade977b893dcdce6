"""Many threads of one process on one home: every run finishes, nothing hangs.

A hang here froze the whole interpreter (a thread holding the GIL waited for
LMDB's writer lock, held by a thread waiting for the GIL), so a join with a
timeout in the same process could never fire. Each scenario therefore runs in
a child process that the test kills after a deadline; the child joins its own
threads with a timeout and ends with the doctor's check.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from extras import need

THREADS = 8
DEADLINE = 90  # seconds for a whole child; a healthy one takes well under 5

PRELUDE = textwrap.dedent('''
    import sys, threading
    import bide
    from bide.engine import maintenance
    from bide.engine.storage.lmdb_store import LMDBStore

    home, threads, steps = sys.argv[1], int(sys.argv[2]), 50
    errors = []

    def loop_flow():
        flow = bide.Flow("loop")

        @flow.node(start=True)
        def step(state, ctx):
            return {"i": state.get("i", 0) + 1}

        flow.route("step", lambda s: "step" if s["i"] < steps else bide.END)
        return flow

    def guarded(fn, k):
        try:
            fn(k)
        except BaseException as exc:
            errors.append(f"thread {k}: {exc!r}")

    def run_threads(fn):
        ts = [threading.Thread(target=guarded, args=(fn, k), daemon=True) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        alive = [t.name for t in ts if t.is_alive()]
        assert not alive and not errors, (alive, errors)

    def doctor_clean(expected_runs):
        store = LMDBStore(home, create=False)
        try:
            report = maintenance.doctor(store)
        finally:
            store.close()
        assert report.ok and report.runs == expected_runs, report.to_dict()
''')

OWN_ENGINE = PRELUDE + textwrap.dedent('''
    def work(k):
        with bide.open(home) as engine:
            engine.register(loop_flow())
            run = engine.start("loop", run_id=f"t{k}")
            assert run.status == bide.Status.DONE and run.state == {"i": steps}, run

    run_threads(work)
    doctor_clean(threads)
    print("OK")
''')

SHARED_ENGINE = PRELUDE + textwrap.dedent('''
    with bide.open(home) as engine:
        engine.register(loop_flow())

        def work(k):
            run = engine.start("loop", run_id=f"t{k}")
            assert run.status == bide.Status.DONE and run.state == {"i": steps}, run

        run_threads(work)
    doctor_clean(threads)
    print("OK")
''')

SAVER_PER_THREAD = PRELUDE + textwrap.dedent('''
    import operator
    from typing import Annotated, TypedDict
    from langgraph.graph import END, START, StateGraph
    from bide.langgraph import BideSaver

    class S(TypedDict):
        items: Annotated[list, operator.add]
        n: int

    b = StateGraph(S)
    b.add_node("step", lambda s: {"items": [s["n"]], "n": s["n"] + 1})
    b.add_edge(START, "step")
    b.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)

    def work(k):
        with BideSaver.from_home(home) as saver:
            out = b.compile(checkpointer=saver).invoke(
                {"items": [], "n": 0},
                {"configurable": {"thread_id": f"t{k}"}, "recursion_limit": 500})
        assert out == {"items": list(range(steps)), "n": steps}, out

    run_threads(work)
    doctor_clean(threads)
    print("OK")
''')


def run_child(script: str, home: Path) -> None:
    try:
        proc = subprocess.run([sys.executable, "-c", script, str(home), str(THREADS)],
                              capture_output=True, text=True, timeout=DEADLINE)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{THREADS} threads hung for {DEADLINE}s; stderr: {exc.stderr!r}")
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-3000:]


def test_threads_each_with_its_own_engine_create_the_home_and_finish(tmp_path: Path):
    """The home does not exist yet: the threads create it at once (none sees NotAHome)."""
    run_child(OWN_ENGINE, tmp_path / "new-home")


def test_threads_each_with_its_own_engine_on_an_existing_home(tmp_path: Path):
    import bide

    bide.open(tmp_path / "home").close()
    run_child(OWN_ENGINE, tmp_path / "home")


def test_threads_sharing_one_engine_finish(tmp_path: Path):
    run_child(SHARED_ENGINE, tmp_path / "home")


def test_langgraph_saver_per_thread_finishes(tmp_path: Path):
    need("langgraph.graph")
    run_child(SAVER_PER_THREAD, tmp_path / "home")
