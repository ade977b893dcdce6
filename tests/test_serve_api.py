"""``bide serve``'s HTTP API in-process (Starlette's TestClient): runs, decisions, the page."""

from __future__ import annotations

import json

import bide
import pytest
from bide.engine.read.scripting import iso_times
from serve_world import FLOWS, TOKEN, client, waiting


@pytest.fixture
def eng(home):
    with bide.open(home, durability="fast") as e:
        e.register(*FLOWS)
        yield e


def test_pending_lists_each_item_as_bide_pending_json_does(eng):
    waiting(eng)
    with client(eng) as c:
        resp = c.get("/pending")
    assert resp.status_code == 200
    assert resp.json() == {"pending": json.loads(json.dumps(iso_times(eng.pending())))}
    assert resp.json()["pending"][0]["action"] == "ship"


def test_an_approval_posted_is_recorded_and_the_run_goes_on(eng):
    aid = waiting(eng)
    with client(eng) as c:
        resp = c.post(f"/decisions/{aid}", json={"decision": "approve", "by": "ann"})
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert (doc["decision"], doc["by"], doc["run_id"], doc["duplicate"]) == (
        bide.Decision.APPROVE, "ann", "r1", False)
    assert eng.resume("r1").status == bide.Status.DONE
    assert eng.get("r1").state["ok"] is True


def test_the_page_and_the_description_need_no_token(eng):
    with client(eng) as c:
        page = c.get("/", headers={"Authorization": ""})
        described = c.get("/openapi.json", headers={"Authorization": ""})
        refused = c.get("/pending", headers={"Authorization": ""})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert described.status_code == 200 and described.json()["openapi"].startswith("3.")
    assert refused.status_code == 401
    assert refused.json()["kind"] == "Unauthorized"
    assert TOKEN not in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["content-security-policy"] == "frame-ancestors 'none'"
    assert page.headers["x-content-type-options"] == "nosniff"


def test_no_response_carries_cors_headers(eng):
    with client(eng) as c:
        for resp in (c.get("/pending", headers={"Origin": "https://evil.example"}),
                     c.options("/pending", headers={"Origin": "https://evil.example",
                                                    "Access-Control-Request-Method": "GET"})):
            assert not any(h.lower().startswith("access-control-") for h in resp.headers)
