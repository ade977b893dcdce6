"""A thread waiting for a coroutine it sent to an event loop gets an error, not an
endless wait, when that loop stops first (engine/base/offload.py ``wait_on_loop``)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import bide
import pytest
from bide.engine.base.offload import on_loop
from bide.engine.ops.watcher import Watcher
from polling import wait_for

DEADLINE = 10.0


def test_on_loop_raises_once_the_loop_it_waits_on_stops():
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    started, outcome = threading.Event(), {}

    async def slow() -> int:
        started.set()
        await asyncio.sleep(3600)  # ends only if the loop goes on
        return 1

    def wait() -> None:
        try:
            outcome["value"] = on_loop(loop, slow())
        except BaseException as exc:  # noqa: BLE001 - what the test checks
            outcome["error"] = exc

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    try:
        assert started.wait(DEADLINE)
        loop.call_soon_threadsafe(loop.stop)
        runner.join(DEADLINE)
        waiter.join(DEADLINE)
        assert not waiter.is_alive(), "still waiting for a loop that stopped"
        assert isinstance(outcome.get("error"), RuntimeError)
        assert "event loop" in str(outcome["error"]) and "stopped" in str(outcome["error"])
    finally:
        if not runner.is_alive():
            loop.close()


def test_on_loop_still_returns_and_raises_what_the_coroutine_did():
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    async def value() -> int:
        await asyncio.sleep(0.01)
        return 7

    async def late() -> None:
        raise TimeoutError("the coroutine's own")

    try:
        assert on_loop(loop, value()) == 7
        with pytest.raises(TimeoutError, match="the coroutine's own"):
            on_loop(loop, late())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(DEADLINE)
        loop.close()


def test_a_watcher_worker_is_told_when_the_watcher_s_loop_stopped_under_its_run(
        tmp_path: Path):
    """The worker hears of it (not a wait for ever), the loop runs again, the run stopped
    on it ends INTERRUPTED with its lease released and is resumed to the end, and a later
    async run is served: one bad node does not end async runs for the whole watcher."""
    lines: list[str] = []
    entered = threading.Event()
    calls: list[int] = []

    async def stops_the_loop(state, ctx):
        calls.append(1)
        if len(calls) == 1:
            entered.set()
            asyncio.get_running_loop().stop()  # the watcher's one loop: every async run's
            await asyncio.sleep(0.5)
        return {"x": 1}

    flow = bide.Flow("aio")
    flow.node(stops_the_loop, name="n", start=True)
    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(flow)
        eng.submit("aio", run_id="a")
        watcher = Watcher(eng, log=lines.append, workers=1, grace=2.0)
        thread = threading.Thread(target=watcher.serve, name="test-watch", daemon=True)
        thread.start()
        try:
            assert entered.wait(DEADLINE)
            assert wait_for(lambda: any("run a: worker error" in line for line in lines),
                            DEADLINE), f"the worker still waits: {lines}"
            said = next(line for line in lines if "run a: worker error" in line)
            assert "event loop" in said and "stopped" in said
            assert any("running it again" in line for line in lines), lines
            assert wait_for(lambda: eng.get("a").status == bide.Status.DONE, DEADLINE), lines
            eng.submit("aio", run_id="b")
            assert wait_for(lambda: eng.get("b").status == bide.Status.DONE, DEADLINE), lines
            assert len(calls) == 3  # a twice (stopped, then resumed), b once
        finally:
            eng.stopping.set()
            thread.join(DEADLINE)
        assert not thread.is_alive()
