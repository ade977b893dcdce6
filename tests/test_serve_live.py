"""``bide serve`` on a real socket beside its watcher: runs submitted and decided over HTTP
finish, and the event streams say so as it happens."""

from __future__ import annotations

import bide
import pytest
from polling import wait_for
from serve_world import FLOWS, Stream, live, request


@pytest.fixture
def eng(home):
    with bide.open(home, durability="fast") as e:
        e.register(*FLOWS)
        yield e


def status(server: bide.Server, run_id: str) -> str:
    code, doc = request(server, "GET", f"/runs/{run_id}")
    assert code == 200, doc
    return doc["status"]


def test_a_run_submitted_and_approved_over_http_finishes(eng):
    with live(eng) as server:
        home_stream = Stream(server, "/events")
        try:
            code, doc = request(server, "POST", "/runs", {"flow": "gated", "run_id": "r1"})
            assert (code, doc["status"]) == (202, bide.Status.PENDING)
            assert wait_for(lambda: status(server, "r1") == bide.Status.WAITING_APPROVAL, 20)
            _, pending = request(server, "GET", "/pending")
            [item] = pending["pending"]
            code, doc = request(server, "POST", f"/decisions/{item['approval_id']}",
                                {"decision": "approve", "by": "ann"})
            assert code == 200, doc
            assert wait_for(lambda: status(server, "r1") == bide.Status.DONE, 20)
            seen = home_stream.until_data(status=bide.Status.DONE)
        finally:
            home_stream.close()
    kinds = [m["event"] for m in seen if "event" in m]
    assert kinds[0] == "run_created" and "approval_decided" in kinds
    assert all(m["data"]["run_id"] == "r1" for m in seen if "data" in m)
    assert all(int(m["id"]) == m["data"]["seq"] for m in seen if "data" in m)
