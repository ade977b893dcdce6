"""``engine.follow`` in one process, on every store: the run's records as typed events, in
order, once each; ``since`` resumes without gap or repeat; it stops when the run finishes
or pauses (or goes on through pauses); a deadline; closing early releases the feed.

Every thread is joined with a deadline, and every follow has a timeout, so nothing hangs.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bide
import pytest
from bide import Event, FollowTimeout, Status
from bide.formats import Checkpoint
from conftest import APPS
from extras import need

sys.path.insert(0, str(APPS))
import follow_app  # noqa: E402

DEADLINE = 30.0
BACKENDS = ["lmdb", "memory", "postgres"]


@pytest.fixture(params=BACKENDS)
def eng(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[bide.Engine]:
    store = None
    if request.param == "memory":
        from bide.engine.storage.memory_store import SCHEME, MemoryStore
        store = MemoryStore(f"{SCHEME}{tmp_path}", durability="fast")
    elif request.param == "postgres":
        need("psycopg")
        from bide.engine.postgres.store import PostgresStore
        store = PostgresStore(request.getfixturevalue("pg_url"), durability="fast")
    with bide.open(tmp_path / "home", durability="fast", store=store) as e:
        e.register(*follow_app.flows)
        yield e


class Follower:
    """``engine.follow`` in a thread of its own, collecting events (or the error)."""

    def __init__(self, eng: bide.Engine, run_id: str, **options: Any) -> None:
        self.events: list[Event] = []
        self.error: BaseException | None = None
        options.setdefault("timeout", DEADLINE)
        self._events = eng.follow(run_id, **options)
        self.thread = threading.Thread(target=self._run, name="test-follower", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self._events:
                self.events.append(event)
        except BaseException as exc:  # checked by the test
            self.error = exc

    def join(self) -> list[Event]:
        self.thread.join(DEADLINE + 5)
        assert not self.thread.is_alive(), "the follower did not stop"
        assert self.error is None, self.error
        return self.events


def dicts(events: list[Event]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


def test_every_record_arrives_once_in_order_and_the_follow_ends_with_the_run(eng):
    run_id = eng.submit("steps", {"topic": "t"})
    follower = Follower(eng, run_id)  # started before any worker: it waits
    assert eng.resume(run_id).status == Status.DONE
    events = follower.join()
    assert dicts(events) == eng.log(run_id)  # the same objects as `bide log --json`
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    last = [e for e in events if isinstance(e.record, Checkpoint)][-1]
    assert last.status == Status.DONE and last.kind == "checkpoint"
    assert all(e.run_id == run_id for e in events)


def test_typed_events_name_their_node_task_and_status(eng):
    run = eng.start("asks")
    events = list(eng.follow(run.run_id, timeout=DEADLINE))
    asked = [e for e in events if e.kind == "approval_requested"]
    assert [(e.node, e.task) for e in asked] == [("ask_first", "0:ask_first:0")]
    assert events[0].kind == "run_created" and events[0].status == Status.RUNNING
    checkpoints = [e for e in events if isinstance(e.record, Checkpoint)]
    assert checkpoints[-1].status == Status.WAITING_APPROVAL
    assert all(isinstance(e.at, float) and e.summary for e in events)


def test_since_resumes_after_an_event_without_gap_or_repeat(eng):
    run = eng.start("steps", {"topic": "t"})
    first = eng.follow(run.run_id, timeout=DEADLINE)
    head = [next(first) for _ in range(3)]
    first.close()
    rest = list(eng.follow(run.run_id, since=head[-1].seq, timeout=DEADLINE))
    assert dicts(head + rest) == eng.log(run.run_id)
    assert list(eng.follow(run.run_id, since=rest[-1].seq, timeout=DEADLINE)) == []


def test_a_pause_ends_the_follow_unless_it_goes_on_through_pauses(eng):
    run = eng.start("asks")
    assert run.status == Status.WAITING_APPROVAL
    paused = list(eng.follow(run.run_id, timeout=DEADLINE))  # returns: the run waits
    assert paused[-1].seq == eng.log(run.run_id)[-1]["seq"]
    follower = Follower(eng, run.run_id, since=paused[-1].seq, through_pauses=True)
    eng.decide(run.waiting["approval_id"], bide.Decision.APPROVE, by="test")
    assert eng.resume(run.run_id).status == Status.DONE
    assert dicts(paused + follower.join()) == eng.log(run.run_id)


def test_a_run_put_to_sleep_ends_the_follow(eng):
    run = eng.start("naps")
    assert run.status == Status.SLEEPING
    slept = list(eng.follow(run.run_id, timeout=DEADLINE))  # returns: nobody runs it now
    assert dicts(slept) == eng.log(run.run_id)


def test_unknown_run_raises_at_the_call_as_get_does(eng):
    with pytest.raises(bide.UnknownRun) as raised:
        eng.follow("r-nobody")
    with pytest.raises(bide.UnknownRun) as got:
        eng.get("r-nobody")
    assert str(raised.value) == str(got.value)


def test_the_deadline_raises_with_the_cursor_to_go_on_from(eng):
    run_id = eng.submit("steps")  # PENDING: nobody advances it
    seen: list[Event] = []
    with pytest.raises(FollowTimeout) as raised:
        for event in eng.follow(run_id, timeout=0.3):
            seen.append(event)
    assert raised.value.last_seq == seen[-1].seq and raised.value.status == Status.PENDING
    assert f"since={seen[-1].seq}" in str(raised.value)
    with pytest.raises(ValueError, match="fallback"):
        eng.follow(run_id, fallback=0)


def test_async_follow_yields_the_same_events(eng):
    run = eng.start("steps", {"topic": "t"})

    async def collect() -> list[Event]:
        return [e async for e in eng.afollow(run.run_id, timeout=DEADLINE)]

    assert dicts(asyncio.run(asyncio.wait_for(collect(), DEADLINE))) == eng.log(run.run_id)


def test_async_follow_left_early_closes_its_follow(eng):
    run_id = eng.submit("steps")

    async def first_then_leave() -> Event:
        async for event in eng.afollow(run_id, timeout=DEADLINE, fallback=0.1):
            return event
        raise AssertionError("no event")

    assert asyncio.run(asyncio.wait_for(first_then_leave(), DEADLINE)).kind == "run_created"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_follow_closed_early_releases_what_it_holds(eng):
    run_id = eng.submit("steps")
    before = _open_fds()
    for _ in range(20):
        events = eng.follow(run_id, timeout=DEADLINE)
        assert next(events).kind == "run_created"  # its feed is open now
        events.close()
    assert _open_fds() <= before  # no descriptor (inotify, connection) left behind
    if "postgres" in type(eng.store).__name__.lower():
        assert _follower_rows(eng) == []


def _follower_rows(eng: bide.Engine) -> list[str]:
    from bide.engine.postgres.follow import PREFIX
    from bide.engine.postgres.reader import SCHEMA

    with eng.store.reader() as r:
        return [k for (k,) in r.conn.execute(  # type: ignore[attr-defined]
            f"SELECT key FROM {SCHEMA}.meta WHERE starts_with(key, %s)", (PREFIX,))]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_an_async_follow_cancelled_while_waiting_releases_its_feed(eng):
    run_id = eng.submit("steps")  # nobody advances it: the follow waits
    before = _open_fds()

    async def cancel_while_waiting() -> None:
        got: list[Event] = []

        async def consume() -> None:
            async for event in eng.afollow(run_id, timeout=DEADLINE, fallback=0.2):
                got.append(event)

        task = asyncio.create_task(consume())
        while len(got) < 2:  # both records read: it waits on its feed now
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_while_waiting(), DEADLINE))
    assert _open_fds() <= before


def test_a_history_longer_than_a_batch_arrives_whole(eng, monkeypatch):
    from bide.engine.read import follow as following

    monkeypatch.setattr(following, "BATCH", 2)  # every read is a full batch but the last
    run = eng.start("steps", {"topic": "t"})
    events = list(eng.follow(run.run_id, timeout=DEADLINE))
    assert dicts(events) == eng.log(run.run_id) and len(events) > 4
    tail = list(eng.follow(run.run_id, since=events[1].seq, timeout=DEADLINE))
    assert dicts(tail) == eng.log(run.run_id)[2:]
