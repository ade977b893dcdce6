"""``bide serve``'s run routes (issue 18, item 1): submit (idempotent on run_id), list, show,
state, the run's event stream, cancel; and the OpenAPI description of every route."""

from __future__ import annotations

import json

import bide
import pytest
from bide.engine.read.scripting import iso_times
from serve_world import FLOWS, client


@pytest.fixture
def eng(home):
    with bide.open(home, durability="fast") as e:
        e.register(*FLOWS)
        yield e


def as_json(doc):
    """What the CLI's ``--json`` prints for ``doc``, read back."""
    return json.loads(json.dumps(iso_times(doc)))


def test_post_runs_submits_a_pending_run_at_once(eng):
    with client(eng) as c:
        resp = c.post("/runs", json={"flow": "plain", "input": {"to": "x"}})
    assert resp.status_code == 202
    doc = resp.json()
    assert doc["status"] == bide.Status.PENDING and doc["flow"] == "plain"
    assert eng.get(doc["run_id"]).status == bide.Status.PENDING
    assert eng.resume(doc["run_id"]).state == {"to": "x", "done": True}


def test_post_runs_is_idempotent_on_run_id(eng):
    with client(eng) as c:
        first = c.post("/runs", json={"flow": "gated", "input": {"to": "a"}, "run_id": "r1"})
        again = c.post("/runs", json={"flow": "gated", "input": {"to": "a"}, "run_id": "r1"})
        eng.resume("r1")  # it moves on: a repeat says where it is now
        later = c.post("/runs", json={"flow": "gated", "input": {"to": "a"}, "run_id": "r1"})
        other_input = c.post("/runs", json={"flow": "gated", "input": {"to": "b"},
                                            "run_id": "r1"})
        other_flow = c.post("/runs", json={"flow": "plain", "input": {"to": "a"},
                                           "run_id": "r1"})
    assert (first.status_code, again.status_code, later.status_code) == (202, 200, 200)
    assert again.json() == first.json()
    assert later.json()["status"] == bide.Status.WAITING_APPROVAL
    for refused in (other_input, other_flow):
        assert (refused.status_code, refused.json()["kind"]) == (409, "RunExists")
    assert [r["run_id"] for r in eng.run_rows()] == ["r1"]


def test_get_runs_lists_the_rows_of_bide_runs_and_filters_by_status(eng):
    eng.start("plain", {}, run_id="done")
    eng.start("gated", {}, run_id="waits")
    with client(eng) as c:
        every = c.get("/runs").json()["runs"]
        waiting = c.get("/runs", params={"status": "waiting_approval"}).json()["runs"]
        one = c.get("/runs", params={"limit": 1}).json()["runs"]
    assert every == as_json(eng.run_rows())
    assert [r["run_id"] for r in waiting] == ["waits"]
    assert len(one) == 1


def test_get_run_is_bide_show_json(eng):
    eng.start("gated", {}, run_id="r1")
    with client(eng) as c:
        resp = c.get("/runs/r1")
    doc = resp.json()
    assert resp.status_code == 200 and doc["status"] == bide.Status.WAITING_APPROVAL
    shown = as_json(eng.show("r1"))
    assert doc.keys() == shown.keys()
    assert {k: v for k, v in doc.items() if k != "lease"} == \
        {k: v for k, v in shown.items() if k != "lease"}


def test_get_state_at_the_latest_or_a_given_version(eng):
    eng.start("plain", {"to": "x"}, run_id="r1")
    with client(eng) as c:
        latest = c.get("/runs/r1/state").json()
        first = c.get("/runs/r1/state", params={"version": 0}).json()
    assert latest == {"run_id": "r1", "version": 1, "state": {"to": "x", "done": True}}
    assert first == {"run_id": "r1", "version": 0, "state": {"to": "x"}}


def test_cancel_stops_a_run_for_good_and_says_so_twice(eng):
    eng.start("gated", {}, run_id="r1")
    eng.start("plain", {}, run_id="done")
    with client(eng) as c:
        first = c.post("/runs/r1/cancel", json={"reason": "not today"})
        again = c.post("/runs/r1/cancel")
        finished = c.post("/runs/done/cancel")
    assert first.json() == {"run_id": "r1", "cancelled": True, "status": bide.Status.CANCELLED}
    assert again.json()["cancelled"] is False
    assert eng.get("r1").status == bide.Status.CANCELLED
    assert (finished.status_code, finished.json()["kind"]) == (409, "NotCancellable")


def events_of(text: str) -> list[dict]:
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if line and not line.startswith(":"))
        if fields:
            out.append({**fields, "data": json.loads(fields["data"])})
    return out


def test_a_runs_events_are_its_records_as_bide_log_json_then_end(eng):
    eng.start("plain", {}, run_id="r1")
    with client(eng) as c:
        resp = c.get("/runs/r1/events")
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = events_of(resp.text)
    logged = as_json(eng.log("r1"))
    assert [e["data"] for e in events[:-1]] == logged
    assert [int(e["id"]) for e in events[:-1]] == [e["seq"] for e in logged]
    assert [e["event"] for e in events[:-1]] == [e["type"] for e in logged]
    assert events[-1]["event"] == "end"
    assert events[-1]["data"] == {"run_id": "r1", "status": bide.Status.DONE}


def test_a_runs_events_go_on_after_last_event_id(eng):
    eng.start("plain", {}, run_id="r1")
    seqs = [e["seq"] for e in eng.log("r1")]
    with client(eng) as c:
        resp = c.get("/runs/r1/events", headers={"Last-Event-ID": str(seqs[1])})
    assert [int(e["id"]) for e in events_of(resp.text) if "id" in e] == seqs[2:]


def test_the_description_lists_every_route_of_the_app(eng):
    from bide.engine.serve.app import make_app
    from starlette.routing import Route

    app = make_app(eng, "t" * 40)
    served = {(m.lower(), r.path) for r in app.routes if isinstance(r, Route)
              for m in (r.methods or ()) if m != "HEAD"}
    with client(eng) as c:
        doc = c.get("/openapi.json").json()
    described = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert served == described
    assert doc["paths"]["/"]["get"]["security"] == []
    assert doc["paths"]["/pending"]["get"]["responses"]["401"]
