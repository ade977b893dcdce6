"""Asking a person for a value (issue 15.2): ``ctx.ask``, WAITING_INPUT, answers by API,
inbox file and ``bide answer``, checked against the question's schema when recorded.

Every behaviour test runs on LMDB, memory and PostgreSQL homes (``any_engine``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import json
import sys
import time
import uuid
from typing import Literal, TypedDict

import bide
import msgspec
import pytest
from bide.cli import main
from bide.engine.human.inbox import Inbox, drop_decision, sign
from bide.engine.run.value_schema import example, problem, schema_of
from click.testing import CliRunner
from conftest import APPS, count_lines, open_on
from extras import need
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(APPS))
import ask_app  # noqa: E402

EXIT_BAD_STATE, EXIT_USAGE = 1, 2


@pytest.fixture
def effects(tmp_path, monkeypatch):
    path = tmp_path / "effects.log"
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(path))
    return path


@pytest.fixture
def now() -> list[float | None]:
    """The engine's clock: the real time until a test sets ``now[0]``."""
    return [None]


@pytest.fixture(params=["lmdb", "memory", "postgres"])
def any_engine(request, home, now):
    """An engine on each kind of home; request files and the inbox in ``home``."""
    with open_on(request.param, request, home,
                 lambda: time.time() if now[0] is None else now[0]) as eng:
        eng.register(ask_app.flow)
        yield eng


def start(eng: bide.Engine, run_id: str = "r-1") -> str:
    """Start the barista run; the id of the question it waits on."""
    run = eng.start("barista", run_id=run_id)
    assert run.status == bide.Status.WAITING_INPUT
    return run.waiting["approval_id"]


def decisions(eng: bide.Engine) -> int:
    return eng.stats()["records"].get("approval_decided", {}).get("count", 0)


# -- the API ----------------------------------------------------------------------------
def test_ask_pauses_with_the_question_and_returns_the_typed_answer(any_engine, home, effects):
    eng = any_engine
    aid = start(eng)
    assert eng.get("r-1").waiting == {"type": "input", "node_id": "take_order",
                                      "approval_id": aid, "question": "what to brew?"}
    (row,) = eng.pending()
    assert row["kind"] == "input" and row["question"] == "what to brew?"
    assert row["allowed"] == ["answer", "reject"] and row["payload"] == {"menu": ["tea", "coffee"]}
    assert row["schema"] == msgspec.json.schema(ask_app.Order)
    request = json.loads((home / "requests" / f"{aid}.json").read_text())
    assert request["question"] == "what to brew?" and request["schema"] == row["schema"]
    assert request["payload"] == {"menu": ["tea", "coffee"]}
    assert request["answer_file"] == {
        "approval_id": aid, "decision": "answer", "by": "YOUR NAME", "run_id": "r-1",
        "digest": row["digest"], "value": {"item": "coffee", "cups": 0}}
    assert "bide answer " + aid in request["how_to_decide"]

    assert eng.answer(aid, {"item": "coffee", "cups": 2}, by="ann") is True
    assert eng.answer(aid, {"item": "coffee", "cups": 2}, by="ann") is False  # the same: no-op
    with pytest.raises(bide.DecisionRefused, match="already decided 'answer' by ann"):
        eng.answer(aid, {"item": "tea", "cups": 1})
    run = eng.resume("r-1")
    assert run.status == bide.Status.WAITING_INPUT  # the second question, its own id
    second = run.waiting["approval_id"]
    assert second != aid and run.waiting["question"] == "for whom?"
    eng.answer(second, "bo")
    run = eng.resume("r-1")
    assert run.status == bide.Status.DONE
    assert run.state == {"order": {"item": "coffee", "cups": 2}, "for": "bo",
                         "brewed": "2 coffee"}
    lines = count_lines(effects)
    assert lines["node take_order r-1"] == 3  # asked, asked again, then finished
    assert lines["answered coffee x2"] == 2 and lines["brew coffee x2"] == 1
    assert eng.doctor().ok


def test_an_invalid_answer_is_refused_and_nothing_is_recorded(any_engine):
    eng = any_engine
    aid = start(eng)
    before = eng.stats()["total_records"]
    with pytest.raises(bide.InvalidAnswer, match=r"\$\.item: \"milk\" is not one of"):
        eng.answer(aid, {"item": "milk", "cups": 1})
    with pytest.raises(bide.InvalidAnswer, match=r"the field 'cups' is required"):
        eng.answer(aid, {"item": "tea"})
    with pytest.raises(bide.DecisionRefused, match="expected integer, got string"):
        eng.answer(aid, {"item": "tea", "cups": "2"})
    assert eng.stats()["total_records"] == before and eng.pending()[0]["approval_id"] == aid


def test_a_question_is_not_approved_and_an_approval_is_not_answered(any_engine):
    eng = any_engine
    aid = start(eng)
    with pytest.raises(bide.DecisionNotAllowed, match="it is a question; it takes answer / "
                                                      "reject, not 'approve'"):
        eng.decide(aid, bide.Decision.APPROVE)
    flow = bide.Flow("gate")
    flow.node(lambda s, ctx: {"ok": ctx.approve("ship")}, name="gate", start=True)
    eng.register(flow)
    gate = eng.start("gate", run_id="g-1").waiting["approval_id"]
    with pytest.raises(bide.DecisionNotAllowed, match="takes approve / reject, not 'answer'"):
        eng.answer(gate, True)


def test_a_rejected_question_raises_in_the_node_which_may_catch_it(any_engine):
    eng = any_engine
    flow = bide.Flow("polite")

    @flow.node(start=True)
    def greet(state, ctx):
        try:
            return {"name": ctx.ask("your name?", schema=str)}
        except bide.QuestionRejected as exc:
            return {"name": None, "why": exc.reason, "by": exc.by}

    eng.register(flow)
    aid = eng.start("polite", run_id="p-1").waiting["approval_id"]
    eng.decide(aid, bide.Decision.REJECT, by="cy", reason="rather not")
    assert eng.resume("p-1").state == {"name": None, "why": "rather not", "by": "cy"}


def test_an_expired_question_raises_question_expired(any_engine, now):
    eng = any_engine
    now[0] = 1000.0
    flow = bide.Flow("hurry")
    flow.node(lambda s, ctx: {"n": ctx.ask("how many?", schema=int, expires_in=60)},
              name="count", start=True)
    eng.register(flow)
    aid = eng.start("hurry", run_id="h-1").waiting["approval_id"]
    assert eng.pending()[0]["expires_at"] == 1060.0
    now[0] = 1061.0
    with pytest.raises(bide.DecisionRefused, match="expired"):
        eng.answer(aid, 3)
    run = eng.resume("h-1")
    assert run.status == bide.Status.FAILED and "QuestionExpired" in run.error
    assert "expired before anyone answered it" in run.error


def test_a_changed_question_is_nondeterminism(any_engine):
    eng = any_engine
    asked = ["how many?"]
    flow = bide.Flow("drift")
    flow.node(lambda s, ctx: {"n": ctx.ask(asked[0], schema=int)}, name="count", start=True)
    eng.register(flow)
    aid = eng.start("drift", run_id="d-1").waiting["approval_id"]
    eng.answer(aid, 3)
    asked[0] = "how many, roughly?"
    run = eng.resume("d-1")
    assert run.status == bide.Status.FAILED and "Nondeterminism" in run.error


def test_aanswer_and_an_async_node(any_engine):
    eng = any_engine
    flow = bide.Flow("async-ask")

    @flow.node(start=True)
    async def pick(state, ctx):
        return {"n": ctx.ask("a number?", schema=int) + 1}

    eng.register(flow)

    async def scenario() -> bide.Run:
        run = await eng.astart("async-ask", run_id="a-1")
        assert run.status == bide.Status.WAITING_INPUT
        assert await eng.aanswer(run.waiting["approval_id"], 41) is True
        return await eng.aresume("a-1")

    assert asyncio.run(asyncio.wait_for(scenario(), 30)).state == {"n": 42}


def test_an_unanswerable_schema_is_refused_when_asking(any_engine):
    eng = any_engine
    flow = bide.Flow("odd")
    flow.node(lambda s, ctx: {"x": ctx.ask("?", schema=object)}, name="ask", start=True)
    eng.register(flow)
    run = eng.start("odd", run_id="o-1")
    assert run.status == bide.Status.FAILED and "not a type msgspec can describe" in run.error


# -- the schema checker -----------------------------------------------------------------
class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Person:
    name: str
    age: int = 0


class Tag(msgspec.Struct, tag=True):
    label: str


class Box(msgspec.Struct, forbid_unknown_fields=True):
    """Nested $defs/$ref: a Struct holding a dataclass, a TypedDict and a tagged Struct."""

    owner: Person
    corner: Point
    tags: list[Tag] = []
    note: str | None = None


SCHEMAS = [  # (type, values it takes, values it refuses with this in the reason)
    (str, ["", "hé"], [(3, "expected string"), (None, "expected string")]),
    (int, [0, -7, 2 ** 62], [(1.5, "expected integer"), (True, "expected integer"),
                             ("1", "expected integer")]),
    (float, [1.5, 3], [("1.5", "expected number"), (False, "expected number")]),
    (bool, [True, False], [(1, "expected boolean"), ("true", "expected boolean")]),
    (Literal["low", "high"], ["low"], [("mid", "is not one of"), (1, "is not one of")]),
    (Literal[1, 2], [2], [(True, "is not one of"), (3, "is not one of")]),
    (Point, [{"x": 1, "y": 2}], [({"x": 1}, "'y' is required"),
                                 ({"x": 1, "y": "2"}, "$.y: expected integer")]),
    (Person, [{"name": "ann"}, {"name": "bo", "age": 3}],
     [({"age": 3}, "'name' is required"), ({"name": 5}, "$.name: expected string")]),
    (Tag, [{"type": "Tag", "label": "x"}], [({"type": "Other", "label": "x"}, "$.type"),
                                             ({"label": "x"}, "'type' is required")]),
    (list[int], [[], [1, 2]], [([1, "2"], "$[1]: expected integer"), ({}, "expected array")]),
    (dict[str, int], [{}, {"a": 1}], [({"a": "1"}, "$.a: expected integer"),
                                      ([], "expected object")]),
    (int | None, [None, 4], [("4", "matches none of the allowed forms")]),
    (int | str, [1, "one"], [(1.5, "matches none of the allowed forms")]),
    (uuid.UUID, ["6b2c1f3e-8a9d-4c5e-b1f2-0a1b2c3d4e5f"], [("6b2c", "is not a valid UUID")]),
    (datetime.date, ["2026-12-01"], [("2026-13-01", "is not a valid date")]),
    (decimal.Decimal, ["12.50"], [("twelve", "is not a valid Decimal")]),
    (bytes, ["aGk="], [("not base64!", "is not a valid bytes")]),
    (Box, [{"owner": {"name": "ann"}, "corner": {"x": 0, "y": 0},
            "tags": [{"type": "Tag", "label": "a"}]}],
     [({"owner": {"name": "ann"}, "corner": {"x": 0, "y": 0}, "tags": [{"label": "a"}]},
       "$.tags[0]: the field 'type' is required"),
      ({"owner": {"name": "ann"}, "corner": {"x": 0, "y": 0}, "color": "red"},
       "unknown field 'color'"),
      ({"owner": {"name": 1}, "corner": {"x": 0, "y": 0}}, "$.owner.name: expected string")]),
]


@pytest.mark.parametrize("tp,good,bad", SCHEMAS, ids=[repr(s[0]) for s in SCHEMAS])
def test_every_schema_type_takes_its_values_and_refuses_others(tp, good, bad):
    schema = schema_of(tp)
    for value in good:
        assert problem(value, schema) is None, value
        msgspec.convert(value, tp)  # what the node gets: the real type
    for value, why in bad:
        found = problem(value, schema)
        assert found is not None and why in found, (value, found)
        if "'type' is required" in why:  # msgspec's convert fills in a lone Struct's tag;
            continue                     # its JSON Schema requires it: the stricter rule
        with pytest.raises(msgspec.ValidationError):  # msgspec agrees it does not fit
            msgspec.convert(value, tp)
    assert problem(example(schema), schema) is None  # the answer file's template fits


def test_schema_none_takes_any_json_value(any_engine):
    eng = any_engine
    flow = bide.Flow("free")
    flow.node(lambda s, ctx: {"v": ctx.ask("anything?")}, name="ask", start=True)
    eng.register(flow)
    aid = eng.start("free", run_id="f-1").waiting["approval_id"]
    assert eng.pending()[0]["schema"] is None
    eng.answer(aid, None)
    assert eng.resume("f-1").state == {"v": None}


def test_a_schema_keyword_the_checker_does_not_know_is_refused():
    from bide.engine.run.value_schema import SchemaProblem, _check_keywords

    with pytest.raises(SchemaProblem, match="if cannot be checked"):
        _check_keywords({"type": "object", "properties": {"a": {"if": {}}}})


def test_old_request_bytes_without_a_schema_still_decode():
    """The record gained ``schema`` (a field with a default): bytes from before it read as
    the same request with no schema (the golden example before 15.2)."""
    from bide.formats import decode

    old = ("6264945c18af000112617070726f76616c5f7265717565737465648ea672756e5f6964a3722d31ab61"
           "7070726f76616c5f6964a461702d31a46b696e64a97265636f6e63696c65a46e6f6465a162a474"
           "61736ba5363a623a30a6616374696f6ea473686970a77061796c6f616482a56974656d73c70302"
           "920102a26174c7060593cd07ea021ca6646967657374a3646967ad73746174655f76657273696f"
           "6e07a7616c6c6f77656492a7617070726f7665a672656a656374a4746f6f6ca6636861726765a6"
           "696e74656e74a7363a623a303a30ac7265717565737465645f6174cb401e000000000000aa6578"
           "70697265735f6174cb4021000000000000")
    record = decode(bytes.fromhex(old))
    assert record.schema is None and record.action == "ship" and record.expires_at == 8.5


# -- answer files in the inbox ----------------------------------------------------------
def process(eng: bide.Engine) -> dict[str, tuple[bool, str]]:
    return {r.name: (r.accepted, r.reason) for r in Inbox(eng).process()}


def drop(eng: bide.Engine, aid: str, decision: str = "answer", **kw) -> str:
    return drop_decision(eng.home, aid, decision, inbox=eng.doors.inbox, **kw).name


def test_an_answer_file_is_recorded_and_a_bad_one_rejected_with_the_reason(any_engine):
    eng = any_engine
    aid = start(eng)
    rejected = eng.doors.inbox / "rejected"
    bad = drop(eng, aid, value={"item": "tea", "cups": 1.5}, run_id="r-1")
    assert process(eng) == {bad: (False, f"decision for {aid!r} refused: the answer does not "
                                         "match the question's schema: $.cups: expected "
                                         "integer, got number 1.5")}
    assert json.loads((rejected / f"{bad}.error.json").read_text())["error"].endswith("1.5")
    none = drop(eng, aid)  # an answer without a value
    valued = drop(eng, aid, "reject", value=1)
    got = process(eng)
    assert got[none] == (False, "an 'answer' decision carries a 'value' (JSON null is one), "
                                "and only an answer does")
    assert got[valued][0] is False
    approve = drop(eng, aid, "approve")
    assert "it is a question" in process(eng)[approve][1]
    wrong = drop(eng, aid, value={"item": "tea", "cups": 1}, digest="sha256:00")
    assert "digest does not match" in process(eng)[wrong][1]
    assert decisions(eng) == 0
    good = drop(eng, aid, value={"item": "tea", "cups": 1}, by="ann",
                digest=eng.pending()[0]["digest"], run_id="r-1")
    assert process(eng) == {good: (True, "recorded answer")}
    # files of one burst are taken in name order, and names of one millisecond differ
    # by a random part: the two below are checked against the recorded answer
    again = drop(eng, aid, value={"item": "tea", "cups": 1}, by="ann")
    other = drop(eng, aid, value={"item": "tea", "cups": 3})
    got = process(eng)
    assert got[again] == (True, "duplicate of a recorded decision")
    assert got[other][0] is False and "already decided 'answer'" in got[other][1]
    assert decisions(eng) == 1
    assert eng.resume("r-1").waiting["question"] == "for whom?"


def test_an_answer_file_to_an_approval_is_rejected(any_engine):
    eng = any_engine
    flow = bide.Flow("gate")
    flow.node(lambda s, ctx: {"ok": ctx.approve("ship")}, name="gate", start=True)
    eng.register(flow)
    gate = eng.start("gate", run_id="g-1").waiting["approval_id"]
    name = drop(eng, gate, value=True)
    accepted, why = process(eng)[name]
    assert not accepted and "takes approve / reject, not 'answer'" in why


def test_a_signed_home_checks_the_answer_value_is_signed(home, effects):
    key = b"k3y"
    with bide.open(home, durability="fast", approval_key=key) as eng:
        eng.register(ask_app.flow)
        aid = start(eng)
        value = {"item": "tea", "cups": 1}
        body = {"approval_id": aid, "decision": "answer", "by": "ann", "reason": None,
                "value": value}
        forged = dict(body, value={"item": "tea", "cups": 9}, sig=sign(body, key))
        for name, content in (("forged.json", forged), ("signed.json", dict(body,
                                                                         sig=sign(body, key)))):
            (eng.doors.inbox / f".{name}").write_text(json.dumps(content))
            (eng.doors.inbox / f".{name}").rename(eng.doors.inbox / name)
        assert process(eng) == {"forged.json": (False, "bad signature"),
                                "signed.json": (True, "recorded answer")}
        assert eng.resume("r-1").waiting["question"] == "for whom?"
        assert count_lines(effects)["answered tea x1"] == 1


def test_the_signature_of_other_decisions_is_unchanged():
    """Only an answer's signature covers ``value``: decision files signed before stay valid."""
    body = {"approval_id": "a-1", "decision": "approve", "by": "ann", "reason": None}
    assert sign(body, b"k") == sign(dict(body, value=None), b"k")
    answer = dict(body, decision="answer", value=1)
    assert sign(answer, b"k") != sign(dict(answer, value=2), b"k")


# -- the CLI ----------------------------------------------------------------------------
def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr + result.stdout


def test_bide_answer_drops_a_checked_answer_file_on_a_directory_home(home, effects):
    with bide.open(home, durability="fast") as eng:
        eng.register(ask_app.flow)
        aid = start(eng)
    code, out = cli("pending", "--home", str(home))
    assert code == 0 and "input" in out and "what to brew?" in out and "never" in out
    code, out = cli("show", "r-1", "--home", str(home))
    assert code == 0 and f"input {aid} in node take_order: what to brew?" in out
    code, out = cli("answer", aid, '{"item": "tea", "cups": "x"}', "--home", str(home))
    assert code == EXIT_BAD_STATE and "$.cups: expected integer, got string" in out
    code, out = cli("answer", aid, "{not json", "--home", str(home))
    assert code == EXIT_USAGE and "not JSON" in out
    assert not [p for p in (home / "inbox").iterdir() if p.is_file()]  # nothing written
    code, out = cli("approve", aid, "--home", str(home))
    assert code == EXIT_USAGE and "it is a question" in out
    code, out = cli("answer", aid, '{"item": "tea", "cups": 2}', "--by", "ann",
                    "--home", str(home))
    assert code == 0 and "dropped into the inbox" in out
    (name,) = [p.name for p in (home / "inbox").iterdir() if p.is_file()]
    body = json.loads((home / "inbox" / name).read_text())
    assert body["value"] == {"item": "tea", "cups": 2} and body["run_id"] == "r-1"
    with bide.open(home, durability="fast") as eng:
        eng.register(ask_app.flow)
        assert process(eng)[name] == (True, "recorded answer")
        run = eng.resume("r-1")
        assert run.status == bide.Status.WAITING_INPUT
    code, out = cli("log", "r-1", "--home", str(home))
    assert code == 0 and f"{aid} answered by ann" in out and "input " + aid in out


def test_bide_answer_records_in_the_database_on_a_postgresql_home(pg_url, home, effects):
    need("psycopg")
    with bide.open(pg_url, local=home, durability="fast") as eng:
        eng.register(ask_app.flow)
        aid = start(eng)
    code, out = cli("answer", aid, '{"item": "coffee"}', "--home", pg_url)
    assert code == EXIT_BAD_STATE and "the field 'cups' is required" in out
    code, out = cli("answer", aid, '{"item": "coffee", "cups": 1}', "--home", pg_url)
    assert code == 0 and "recorded in" in out, out
    with bide.open(pg_url, local=home, durability="fast") as eng:
        eng.register(ask_app.flow)
        assert decisions(eng) == 1
        assert eng.resume("r-1").waiting["question"] == "for whom?"
    code, out = cli("pending", "--home", pg_url, "--json")
    assert code == 0 and json.loads(out)[0]["question"] == "for whom?"



def test_bide_answer_signs_the_value_for_a_home_that_requires_signatures(home, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_bytes(b"k3y\n")
    with bide.open(home, durability="fast", approval_key=b"k3y") as eng:
        eng.register(ask_app.flow)
        aid = start(eng)
        assert eng.check_decision(aid, "answer", value={"item": "tea", "cups": 1})["run_id"] \
            == "r-1"
    code, out = cli("answer", aid, '{"item": "tea", "cups": 1}', "--home", str(home))
    assert code == EXIT_USAGE and "requires signed decisions" in out
    code, out = cli("answer", aid, '{"item": "tea", "cups": 1}', "--key-file", str(key_file),
                    "--home", str(home))
    assert code == 0, out
    code, out = cli("runs", "--home", str(home))
    assert code == 0 and f"answer {aid} (take_order): what to brew?" in out
    with bide.open(home, durability="fast", approval_key=b"k3y") as eng:
        eng.register(ask_app.flow)
        (result,) = Inbox(eng).process()
        assert result.accepted, result.reason
        assert eng.resume("r-1").waiting["question"] == "for whom?"


def test_an_answer_the_schema_cannot_check_fully_fails_the_node_clearly(any_engine):
    """msgspec's schema for a datetime is a plain string: checked as one when recorded,
    a malformed one raises InvalidAnswer where the node converts it."""
    eng = any_engine
    flow = bide.Flow("when")
    flow.node(lambda s, ctx: {"at": str(ctx.ask("when?", schema=datetime.datetime))},
              name="when", start=True)
    eng.register(flow)
    aid = eng.start("when", run_id="w-1").waiting["approval_id"]
    eng.answer(aid, "tomorrow-ish")
    run = eng.resume("w-1")
    assert run.status == bide.Status.FAILED and "InvalidAnswer" in run.error
    assert "Invalid RFC3339 encoded datetime" in run.error


# -- the checker agrees with msgspec (hypothesis) -----------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
    | st.sampled_from(["low", "high", "Tag", "ann", "2026-01-31", "12.5"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["x", "y", "name", "age", "type", "label", "owner",
                                       "corner", "tags", "note", "z"]), inner, max_size=5),
    max_leaves=12)
AGREE = [str, int, float, bool, Literal["low", "high"], Point, Person, list[int],
         dict[str, int], int | None, int | str, list[Point], Box, datetime.date,
         decimal.Decimal]


@pytest.mark.parametrize("tp", AGREE, ids=[repr(t) for t in AGREE])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON)
def test_a_value_the_checker_takes_is_one_msgspec_converts_and_back(tp, value):
    """What bide records, the node can convert; what the node could convert, bide records,
    but where msgspec's schema is stricter than its convert: a Struct's tag (required by
    the schema, filled in by convert) and a Decimal given as a JSON number."""
    schema = schema_of(tp)
    try:
        msgspec.convert(value, tp)
        converts = True
    except msgspec.ValidationError:
        converts = False
    found = problem(value, schema)
    if found is None:
        assert converts, value
    elif converts:
        assert "'type' is required" in found or (
            tp is decimal.Decimal and isinstance(value, (int, float))), found
