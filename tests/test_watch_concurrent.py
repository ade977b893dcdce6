"""A watcher that serves while runs execute (issue 13, item 1): workers, the inbox on its
own loop, per-flow limits, async nodes on one shared loop, a stop at the next boundary."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import bide
import pytest
from bide.engine.human.inbox import drop_decision
from bide.engine.ops.dispatch import Dispatcher
from bide.engine.ops.watcher import Watcher
from polling import wait_for

DEADLINE = 30.0


class Gate:
    """A node that tells when it entered and waits (with a deadline) to be let go."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.runs: Counter[str] = Counter()

    def node(self, state, ctx):
        self.runs[ctx.run_id] += 1
        self.entered.set()
        assert self.release.wait(DEADLINE), "never released"
        return {"slow": True}


def _flows(gate: Gate) -> list[bide.Flow]:
    slow = bide.Flow("slow")
    slow.node(gate.node, name="wait", start=True)
    slow.node(lambda s, ctx: {"after": True}, name="after", after="wait")
    ask = bide.Flow("ask")

    @ask.node(start=True)
    def asking(state, ctx):
        return {"ok": ctx.approve("go")}

    return [slow, ask]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[bide.Engine, Gate, list[Watcher]]]:
    """An engine with the two flows; watchers started with ``serve`` are stopped at the end."""
    gate = Gate()
    started: list[Watcher] = []
    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(*_flows(gate))
        yield eng, gate, started
        gate.release.set()
        eng.stopping.set()
        for w in started:
            assert w.thread.join(DEADLINE) is None and not w.thread.is_alive()


def serve(eng: bide.Engine, started: list[Watcher], **kw) -> Watcher:
    watcher = Watcher(eng, log=lambda _line: None, **kw)
    watcher.thread = threading.Thread(target=watcher.serve, name="test-watch")  # type: ignore
    watcher.thread.start()  # type: ignore[attr-defined]
    started.append(watcher)
    return watcher


def status(eng: bide.Engine, run_id: str) -> bide.Status:
    return eng.get(run_id).status


def test_a_decision_for_an_idle_run_is_acted_on_while_another_run_s_node_is_busy(served):
    eng, gate, started = served
    eng.submit("slow", run_id="a")
    assert eng.start("ask", run_id="b").status == bide.Status.WAITING_APPROVAL
    serve(eng, started, workers=2)
    assert gate.entered.wait(DEADLINE)  # a's node is running, and stays so
    (ask,) = eng.pending()
    t0 = time.monotonic()
    drop_decision(eng.home, ask["approval_id"], "approve", by="t")
    assert wait_for(lambda: status(eng, "b") == bide.Status.DONE, DEADLINE)
    took = time.monotonic() - t0
    assert not gate.release.is_set() and status(eng, "a") == bide.Status.RUNNING
    gate.release.set()
    assert wait_for(lambda: status(eng, "a") == bide.Status.DONE, DEADLINE)
    assert gate.runs == {"a": 1}
    print(f"decision to DONE while another node was busy: {took * 1000:.0f} ms")


def test_a_flow_limit_holds_its_runs_to_one_at_a_time_and_others_go_on(served):
    eng, _, started = served
    active, peak, lock = [0], [0], threading.Lock()
    two = threading.Event()

    def busy(state, ctx):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            if active[0] >= 2:
                two.set()
        two.wait(0.3)  # long enough for a second run of the flow to start, if allowed
        with lock:
            active[0] -= 1
        return {"done": True}

    limited = bide.Flow("limited")
    limited.node(busy, name="busy", start=True)
    eng.register(limited)
    for i in range(3):
        eng.submit("limited", run_id=f"l{i}")
    eng.submit("ask", run_id="other")
    serve(eng, started, workers=4, limits={"limited": 1})
    assert wait_for(lambda: all(status(eng, f"l{i}") == bide.Status.DONE for i in range(3)),
                    DEADLINE)
    assert wait_for(lambda: status(eng, "other") == bide.Status.WAITING_APPROVAL, DEADLINE)
    assert peak[0] == 1


def test_async_nodes_of_every_run_share_the_watcher_s_one_loop(served):
    eng, _, started = served
    seen: list[tuple[int, str]] = []

    async def node(state, ctx):
        await asyncio.sleep(0.01)
        seen.append((id(asyncio.get_running_loop()), threading.current_thread().name))
        return {"x": 1}

    flow = bide.Flow("aio")
    flow.node(node, name="n", start=True)
    eng.register(flow)
    for i in range(4):
        eng.submit("aio", run_id=f"x{i}")
    serve(eng, started, workers=4)
    assert wait_for(lambda: all(status(eng, f"x{i}") == bide.Status.DONE for i in range(4)),
                    DEADLINE)
    assert len(seen) == 4 and len(set(seen)) == 1
    assert seen[0][1] == "bide-watch-loop"


def test_stop_ends_every_worker_at_its_next_boundary_and_the_run_resumes(served):
    eng, gate, started = served
    eng.submit("slow", run_id="a")
    watcher = serve(eng, started, workers=2)
    assert gate.entered.wait(DEADLINE)
    eng.stopping.set()
    gate.release.set()
    watcher.thread.join(DEADLINE)  # type: ignore[attr-defined]
    assert not watcher.thread.is_alive()  # type: ignore[attr-defined]
    assert status(eng, "a") == bide.Status.INTERRUPTED  # stopped after "wait", before "after"
    eng.stopping.clear()
    assert Watcher(eng, log=lambda _line: None).once()["runs"][0].status == bide.Status.DONE
    assert gate.runs == {"a": 1}  # the finished node was not run again


def test_bad_workers_and_limits_are_refused_with_what_was_wrong(tmp_path):
    with bide.open(tmp_path / "home", durability="fast") as eng:
        with pytest.raises(ValueError, match="workers must be a whole number of at least 1"):
            Watcher(eng, workers=0)
        with pytest.raises(ValueError, match="limit of flow 'f' must be .* not 0"):
            Watcher(eng, limits={"f": 0})


# -- the dispatcher alone --------------------------------------------------------------

def test_a_run_offered_while_a_worker_has_it_runs_again_after_never_twice_at_once():
    inside, calls, peak = Counter[str](), [], [0]
    lock, first_in, go = threading.Lock(), threading.Event(), threading.Event()

    def work(run_id: str) -> None:
        with lock:
            inside[run_id] += 1
            peak[0] = max(peak[0], inside[run_id])
            calls.append(run_id)
        first_in.set()
        go.wait(DEADLINE)
        with lock:
            inside[run_id] -= 1

    d = Dispatcher(work, workers=4, log=lambda _line: None)
    d.start()
    try:
        assert d.offer("r", "f")
        assert first_in.wait(DEADLINE)
        assert not d.offer("r", "f")  # busy: taken again after, not twice at once
        assert not d.offer("r", "f")
        go.set()
        assert wait_for(lambda: len(calls) == 2 and d.idle(), DEADLINE)
        assert calls == ["r", "r"] and peak[0] == 1
    finally:
        go.set()
        assert d.close(DEADLINE)


def _peak_of(workers: int, runs: int, hold: float, **options: float) -> int:
    """How many of ``runs`` runs, each taking ``hold`` seconds, a dispatcher ran at once."""
    inside, peak, lock = [0], [0], threading.Lock()
    done = threading.Semaphore(0)

    def work(run_id: str) -> None:
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        time.sleep(hold)
        with lock:
            inside[0] -= 1
        done.release()

    d = Dispatcher(work, workers=workers, log=lambda _line: None, **options)
    d.start()
    try:
        for i in range(runs):
            d.offer(f"r{i}", "f")
        for _ in range(runs):
            assert done.acquire(timeout=DEADLINE)
    finally:
        assert d.close(DEADLINE)
    return peak[0]


def test_short_resumes_run_one_at_a_time_and_long_ones_overlap_up_to_the_workers():
    # shorter than overlap_after: a burst runs on one thread (no GIL hand-offs)
    assert _peak_of(4, 12, 0.0, overlap_after=1.0) == 1
    # a run that waits (a slow tool) lets one more start each overlap_after, up to 4
    assert _peak_of(4, 8, 0.4, overlap_after=0.01) == 4
    assert _peak_of(4, 8, 0.2, overlap_after=0) == 4  # 0: all workers at once, as before


@pytest.mark.parametrize("bad", [-1, "0.1", True, float("nan")])
def test_a_bad_overlap_after_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="overlap_after must be a number of seconds"):
        Dispatcher(lambda run_id: None, workers=2, overlap_after=bad)


def test_a_worker_error_is_logged_and_the_worker_serves_on():
    lines: list[str] = []
    done = threading.Event()

    def work(run_id: str) -> None:
        if run_id == "bad":
            raise RuntimeError("boom")
        done.set()

    d = Dispatcher(work, workers=1, log=lines.append)
    d.start()
    try:
        d.offer("bad", "f")
        d.offer("good", "f")
        assert done.wait(DEADLINE)
        assert lines == ["run bad: worker error, left for the next rescan: RuntimeError: boom"]
    finally:
        assert d.close(DEADLINE)


@pytest.mark.parametrize("argv, says", [
    (["--limit", "triage"], "'triage' is not FLOW=N"),
    (["--limit", "triage=0"], "'triage=0' is not FLOW=N with N a whole number of at least 1"),
    (["--limit", "=2"], "'=2' is not FLOW=N"),
    (["--limit", "a=1", "--limit", "a=2"], "flow 'a' is limited twice"),
    (["--workers", "0"], "0 is not in the range x>=1"),
])
def test_bad_watch_options_exit_2_naming_what_was_wrong(tmp_path, argv, says):
    from bide.cli import main
    from click.testing import CliRunner

    home = tmp_path / "home"
    result = CliRunner().invoke(main, ["watch", "--home", str(home), "--app", "x:y", *argv])
    assert result.exit_code == 2 and says in result.output, result.output
    assert not home.exists()  # refused before anything was opened
