"""A serving watcher (``Watcher.serve`` in a thread) starts a schedule's runs on time: it
hears a schedule recorded after it started (on PostgreSQL from another engine, by
LISTEN; on a directory home by the store file changing) and sleeps until each slot,
rather than finding it at a 30 s re-read. Every wait has a deadline."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import bide
import pytest
from conftest import APPS, watched
from polling import wait_for

sys.path.insert(0, str(APPS))
import schedule_app  # noqa: E402

DEADLINE = 30.0


@pytest.fixture(params=["lmdb", "postgres"])
def served(request, home) -> Iterator[tuple[bide.Engine, bide.Engine]]:
    """A watcher serving one engine in a thread, and a second engine (another client)."""
    with watched(request, home, schedule_app.flow) as engines:
        yield engines


def test_a_schedule_recorded_while_serving_starts_its_slots_on_time(served):
    eng, client = served
    time.sleep(0.3)  # the watcher is asleep (no schedule: until its 30 s re-read)
    first = int(client.schedule("beat", "tick", every=1).next_due)
    assert wait_for(lambda: len(eng.runs(flow="tick")) >= 2, 10)  # not at the 30 s re-read
    runs = {r.run_id: r for r in eng.runs(flow="tick")}
    assert f"s-beat-{first}" in runs and f"s-beat-{first + 1}" in runs
    late = [eng.show(rid)["created_at"] - int(rid.rsplit("-", 1)[1]) for rid in runs]
    print(f"slot runs created {max(late) * 1000:.0f} ms after their slot at most")
    assert max(late) < 0.9, late  # slept until the slot, not a rescan (loose under load)
    client.unschedule("beat")
    assert wait_for(lambda: all(r.status == bide.Status.DONE for r in eng.runs(flow="tick")),
                    DEADLINE)
