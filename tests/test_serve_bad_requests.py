"""Bad requests to ``bide serve`` (issue 18, item 4): each gets its status and a stable
``kind``, the server keeps serving after it, and a refused decision writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import bide
import pytest
from serve_world import FLOWS, TOKEN, client, waiting

Request = tuple[str, str, dict]  # method, path, httpx keyword arguments


@pytest.fixture
def eng(home):
    with bide.open(home, durability="fast") as e:
        e.register(*FLOWS)
        yield e


def written(eng: bide.Engine) -> tuple[int, list[str]]:
    """What a refused request must not change: the log's last seq and the inbox's files."""
    with eng.store.reader() as r:
        last = r.last_seq()
    inbox = eng.doors.inbox
    files = sorted(str(p.relative_to(inbox)) for p in Path(inbox).rglob("*") if p.is_file())
    return last, files


def still_serves(c) -> None:
    assert c.get("/pending").status_code == 200


BAD = [
    # (method, path, request options, status, kind)
    ("GET", "/pending", {"headers": {"Authorization": ""}}, 401, "Unauthorized"),
    ("GET", "/pending", {"headers": {"Authorization": "Bearer wrong"}}, 401, "Unauthorized"),
    ("GET", "/pending", {"headers": {"Authorization": TOKEN}}, 401, "Unauthorized"),
    ("GET", "/runs/r1", {"headers": {"Authorization": f"Basic {TOKEN}"}}, 401, "Unauthorized"),
    ("GET", "/events", {"headers": {"Authorization": ""}}, 401, "Unauthorized"),
    ("POST", "/runs", {"headers": {"Authorization": ""}, "json": {"flow": "plain"}}, 401,
     "Unauthorized"),
    ("POST", "/runs", {"content": b"{" + b" " * (64 * 1024) + b"}",
                       "headers": {"Content-Type": "application/json"}}, 413, "BodyTooLarge"),
    ("POST", "/runs", {"content": b"{\"flow\": ", "headers": {"Content-Type":
                                                              "application/json"}},
     400, "BadJSON"),
    ("POST", "/runs", {"content": b"{\"flow\": \"plain\", \"flow\": \"gated\"}",
                       "headers": {"Content-Type": "application/json"}}, 400, "BadJSON"),
    ("POST", "/runs", {"content": b"{\"flow\": NaN}",
                       "headers": {"Content-Type": "application/json"}}, 400, "BadJSON"),
    ("POST", "/runs", {"content": b"\xff\xfe", "headers": {"Content-Type":
                                                           "application/json"}},
     400, "BadJSON"),
    ("POST", "/runs", {"content": b"flow=plain", "headers": {"Content-Type":
                                                             "application/x-www-form-urlencoded"}},
     415, "UnsupportedMediaType"),
    ("POST", "/runs", {"content": b"{\"flow\": \"plain\"}"}, 415, "UnsupportedMediaType"),
    ("POST", "/runs", {"json": ["plain"]}, 400, "BadRequest"),
    ("POST", "/runs", {"json": {"input": {}}}, 400, "BadRequest"),
    ("POST", "/runs", {"json": {"flow": "plain", "input": [1]}}, 400, "BadRequest"),
    ("POST", "/runs", {"json": {"flow": "plain", "priority": 1}}, 400, "BadRequest"),
    ("POST", "/runs", {"json": {"flow": "plain", "run_id": "a/b"}}, 400, "BadRequest"),
    ("POST", "/runs", {"json": {"flow": "nope"}}, 422, "UnknownFlow"),
    ("GET", "/runs?status=SLEEPY", {}, 400, "UnknownStatus"),
    ("GET", "/runs?limit=0", {}, 400, "BadRequest"),
    ("GET", "/runs/nope", {}, 404, "UnknownRun"),
    ("GET", "/runs/nope/state", {}, 404, "UnknownRun"),
    ("GET", "/runs/nope/events", {}, 404, "UnknownRun"),
    ("POST", "/runs/nope/cancel", {}, 404, "UnknownRun"),
    ("GET", "/runs/r1/state?version=x", {}, 400, "BadRequest"),
    ("GET", "/runs/r1/state?version=-1", {}, 400, "BadRequest"),
    ("GET", "/runs/r1/state?version=99", {}, 404, "UnknownVersion"),
    ("GET", "/runs/r1/events", {"headers": {"Last-Event-ID": "x"}}, 400, "BadRequest"),
    ("GET", "/events", {"headers": {"Last-Event-ID": "-3"}}, 400, "BadRequest"),
    ("GET", "/nowhere", {}, 404, "NoSuchRoute"),
    ("DELETE", "/runs/r1", {}, 405, "MethodNotAllowed"),
    ("POST", "/decisions/a-nope", {"json": {"decision": "approve"}}, 404, "UnknownApproval"),
]


@pytest.mark.parametrize(("method", "path", "options", "status", "kind"), BAD,
                         ids=[f"{m} {p} {s}" for m, p, _o, s, _k in BAD])
def test_a_bad_request_gets_its_status_and_kind_and_the_server_goes_on(
        eng, method, path, options, status, kind):
    waiting(eng)
    before = written(eng)
    with client(eng) as c:
        resp = c.request(method, path, **options)
        assert (resp.status_code, resp.json()["kind"]) == (status, kind), resp.text
        assert set(resp.json()) == {"error", "kind"} and resp.json()["error"]
        assert resp.headers["content-type"] == "application/json"
        still_serves(c)
    assert written(eng) == before  # a refused request wrote nothing


def test_unauthorized_says_how_to_authenticate(eng):
    with client(eng) as c:
        resp = c.get("/pending", headers={"Authorization": ""})
    assert resp.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in resp.json()["error"]


def test_a_body_larger_than_the_limit_is_refused_before_it_is_read_whole(eng):
    waiting(eng)
    with client(eng, max_body=100) as c:
        chunks = (b"x" * 60 for _ in range(1000))  # chunked: no Content-Length to go by
        resp = c.post("/runs", content=chunks, headers={"Content-Type": "application/json"})
        assert (resp.status_code, resp.json()["kind"]) == (413, "BodyTooLarge")
        assert "100 byte limit" in resp.json()["error"]
        still_serves(c)


# -- decisions: the checks of a decision file, and nothing written when refused ----------
def decide(eng, aid, body, **options):
    with client(eng, **options) as c:
        resp = c.post(f"/decisions/{aid}", json=body)
        still_serves(c)
    return resp


REFUSED = [
    ({"decision": "ship"}, 422, "DecisionNotAllowed"),
    ({"decision": "answer", "value": 3}, 422, "DecisionNotAllowed"),
    ({"decision": "approve", "run_id": "r-other"}, 422, "DecisionRefused"),
    ({"decision": "approve", "digest": "sha256:00"}, 422, "DecisionRefused"),
    ({"decision": "approve", "colour": "red"}, 422, "InvalidDecision"),
    ({"decision": "approve", "by": 7}, 422, "InvalidDecision"),
    ({"decision": "approve", "result": 1}, 422, "InvalidDecision"),
    ({"decision": "approve", "approval_id": "a-other"}, 422, "InvalidDecision"),
    ({"signal": "go", "run_id": "r1"}, 422, "InvalidDecision"),
    ({"decision": ""}, 422, "InvalidDecision"),
    ({}, 422, "InvalidDecision"),
]


@pytest.mark.parametrize(("body", "status", "kind"), REFUSED,
                         ids=[f"{k}-{i}" for i, (_b, _s, k) in enumerate(REFUSED)])
def test_a_refused_decision_writes_nothing(eng, body, status, kind):
    aid = waiting(eng)
    before = written(eng)
    resp = decide(eng, aid, body)
    assert (resp.status_code, resp.json()["kind"]) == (status, kind), resp.text
    assert written(eng) == before
    assert eng.pending()[0]["approval_id"] == aid  # still waiting


def test_a_replayed_decision_is_200_and_recorded_once(eng):
    aid = waiting(eng)
    first = decide(eng, aid, {"decision": "approve", "by": "ann"})
    after_first = written(eng)
    again = decide(eng, aid, {"decision": "approve", "by": "ann"})
    assert (first.status_code, again.status_code) == (200, 200)
    assert (first.json()["duplicate"], again.json()["duplicate"]) == (False, True)
    assert again.json()["decided_at"] == first.json()["decided_at"]
    assert written(eng) == after_first


def test_a_contradicting_decision_is_409_and_changes_nothing(eng):
    aid = waiting(eng)
    decide(eng, aid, {"decision": "approve", "by": "ann"})
    before = written(eng)
    resp = decide(eng, aid, {"decision": "reject", "by": "bob"})
    assert (resp.status_code, resp.json()["kind"]) == (409, "AlreadyDecided")
    assert "already decided 'approve' by ann" in resp.json()["error"]
    assert written(eng) == before
    assert eng.resume("r1").state["ok"] is True


def test_an_expired_request_is_refused(home):
    now = [1000.0]
    with bide.open(home, durability="fast", clock=lambda: now[0]) as eng:
        flow = bide.Flow("brief")

        @flow.node(start=True)
        def gate(state, ctx):
            return {"ok": ctx.approve("ship", expires_in=60)}

        eng.register(flow)
        aid = eng.start("brief", {}, run_id="r1").waiting["approval_id"]
        now[0] += 61
        before = written(eng)
        resp = decide(eng, aid, {"decision": "approve"})
        assert (resp.status_code, resp.json()["kind"]) == (422, "DecisionRefused")
        assert "expired" in resp.json()["error"]
        assert written(eng) == before


def test_an_answer_is_checked_against_the_questions_schema(eng):
    aid = waiting(eng, "q1", "asked")
    before = written(eng)
    bad = decide(eng, aid, {"decision": "answer", "value": "three"})
    assert (bad.status_code, bad.json()["kind"]) == (422, "InvalidAnswer")
    assert written(eng) == before
    good = decide(eng, aid, {"decision": "answer", "value": 3, "by": "ann"})
    assert good.status_code == 200 and good.json()["result"] == 3
    assert eng.resume("q1").state["n"] == 3


def test_a_home_that_requires_signatures_refuses_an_unsigned_decision(tmp_path):
    from bide.engine.human.inbox import sign

    key = b"k" * 32
    with bide.open(tmp_path / "home", durability="fast", approval_key=key) as eng:
        eng.register(*FLOWS)
        aid = waiting(eng)
        before = written(eng)
        unsigned = decide(eng, aid, {"decision": "approve", "by": "ann"})
        assert (unsigned.status_code, unsigned.json()["kind"]) == (422, "InvalidDecision")
        assert "requires signed decisions" in unsigned.json()["error"]
        forged = decide(eng, aid, {"decision": "approve", "by": "ann", "sig": "0" * 64})
        assert forged.json()["error"].endswith("bad signature")
        assert written(eng) == before
        body = {"approval_id": aid, "decision": "approve", "by": "ann", "reason": None}
        signed = decide(eng, aid, {"decision": "approve", "by": "ann",
                                   "sig": sign(body, key)})
        assert signed.status_code == 200, signed.text


def test_a_decision_posted_is_recorded_as_a_file_would_be(eng):
    """The same record a decision file makes, naming the request that carried it."""
    aid = waiting(eng)
    raw = b'{"decision": "approve", "by": "ann", "reason": "looks fine"}'
    with client(eng) as c:
        resp = c.post(f"/decisions/{aid}", content=raw,
                      headers={"Content-Type": "application/json; charset=utf-8"})
    assert resp.status_code == 200, resp.text
    with eng.store.reader() as r:
        state = r.approval(aid)
    assert (state.decision, state.by, state.reason) == (bide.Decision.APPROVE, "ann",
                                                        "looks fine")
    assert state.file == f"POST /decisions/{aid}"
    assert state.content_digest.startswith("sha256:")
    assert not os.listdir(eng.doors.inbox / "processed")  # no file was made for it
