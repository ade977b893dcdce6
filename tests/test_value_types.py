"""Issue 11 item 3: what a node reads is the same whether or not the process restarted.

Every kept type (formats/values.py) reads back as itself after a crash; every
other type is refused when it is written, naming the key, the type and the node.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import bide
import pytest
from bide.engine.run import context
from bide.engine.run.context import args_digest
from bide.formats import Checkpoint, PendingWrite, decode, encode
from conftest import APPS, run_app
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(APPS))
from types_app import describe  # noqa: E402  (the app's own comparison, one definition)

sys.path.remove(str(APPS))


def run_types(home: Path, out: Path, action: str, fault: str | None = None,
              env: dict | None = None):
    return run_app("types_app.py", str(home), str(out), action, "r1", fault=fault, env=env)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("plain")
    done = run_types(tmp / "home", tmp / "seen.json", "start")
    assert done.returncode == 0 and done.stdout.strip() == "DONE", done.stderr
    return (tmp / "seen.json").read_text()


# after_run_created: the input is read back from the store; after_intent_completed: the tool
# result is replayed from the intent log; after_checkpoint: the next node reads stored state.
# The last two have ``make`` keep working after its call (SLOW), so its outcome is flushed
# alone before its checkpoint (``check`` calls no tool: that checkpoint is not held).
SLOW = {"SLEEP_AFTER_TOOL": "0.3"}


@pytest.mark.parametrize("fault", ["after_run_created:1", "after_intent_completed:1",
                                   "after_checkpoint:1"])
def test_every_kept_type_reads_the_same_after_a_crash(tmp_path, uninterrupted, fault):
    home, out = tmp_path / "home", tmp_path / "seen.json"
    env = None if fault == "after_run_created:1" else SLOW
    crashed = run_types(home, out, "start", fault=f"{fault}:kill", env=env)
    assert crashed.returncode in (-9, 137), crashed.stderr
    assert not out.exists()
    resumed = run_types(home, out, "resume")
    assert resumed.returncode == 0 and resumed.stdout.strip() == "DONE", resumed.stderr
    assert json.loads(out.read_text()) == json.loads(uninterrupted)


def test_the_uninterrupted_run_sees_the_types_it_wrote(uninterrupted):
    seen = dict((k[1].strip("'"), v) for k, v in json.loads(uninterrupted)[1])
    kept = dict((k[1].strip("'"), v) for k, v in seen["v"][1])
    assert kept["set"][0] == "set" and kept["tuple"][0] == "tuple"
    assert kept["decimal"] == ["Decimal", "Decimal('-0.00')"]
    assert seen["from_tool"] == seen["v"] == seen["given"] == seen["input_seen"]


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Point:
    x: int


class Foreign(dt.tzinfo):
    def utcoffset(self, d):
        return dt.timedelta(hours=1)


REFUSED = {
    "Enum": (Color.RED, "Color"),
    "IntEnum": (Level.LOW, "Level"),
    "dataclass": (Point(1), "Point"),
    "namedtuple": (collections.namedtuple("Pair", "a b")(1, 2), "Pair"),
    "OrderedDict": (collections.OrderedDict(a=1), "OrderedDict"),
    "defaultdict": (collections.defaultdict(list), "defaultdict"),
    "bytearray": (bytearray(b"x"), "bytearray"),
    "object": (object(), "object"),
    "foreign tzinfo": (dt.datetime(2024, 1, 1, tzinfo=Foreign()), "datetime"),
    "nested in a set": ({("a", Color.RED)}, "Color"),
    "as a dict key": ({Color.RED: 1}, "Color"),
    "deep in a list": ([1, {"x": [Point(2)]}], "Point"),
}


def one_node_flow(fn) -> bide.Flow:
    flow = bide.Flow("refuse")
    flow.node(fn, name="writer", start=True)
    return flow


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_node_writing_a_refused_type_fails_naming_key_type_and_node(engine, case):
    value, type_name = REFUSED[case]
    engine.register(one_node_flow(lambda state, ctx: {"bad": value}))
    run = engine.start("refuse", {}, run_id="r1")
    assert run.status == bide.Status.FAILED
    error = run.error
    assert "'bad'" in error and type_name in error and "'writer'" in error, error


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_input_is_refused_before_anything_is_stored(engine, case):
    value, type_name = REFUSED[case]
    engine.register(one_node_flow(lambda state, ctx: None))
    with pytest.raises(bide.StateNotSerializable) as info:
        engine.start("refuse", {"ok": 1, "bad": value}, run_id="r1")
    assert info.value.key == "bad" and info.value.node == "(input)"
    assert type_name in info.value.type_name and type_name in str(info.value)
    assert engine.runs() == []


@bide.tool
def give(value):
    return value


def test_a_refused_tool_argument_or_result_names_the_tool(engine):
    engine.register(one_node_flow(lambda state, ctx: {"r": ctx.tool(give, [Color.RED])}))
    run = engine.start("refuse", {}, run_id="r1")
    assert run.status == bide.Status.FAILED
    assert "arguments of tool 'give'" in run.error and "Color" in run.error, run.error
    with engine.store.reader() as r:
        assert list(r.intents("r1")) == []  # refused before the intent was prepared

    @bide.tool
    def returns_enum():
        return Color.RED

    flow = bide.Flow("result")
    flow.node(lambda state, ctx: {"r": ctx.tool(returns_enum)}, name="caller", start=True)
    engine.register(flow)
    run = engine.start("result", {}, run_id="r2")
    assert run.status == bide.Status.FAILED
    assert "result of tool 'returns_enum'" in run.error and "Color" in run.error, run.error


# -- the codec, directly ----------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
           | st.text(max_size=8) | st.binary(max_size=8) | st.dates() | st.datetimes()
           | st.datetimes(timezones=st.timezones()) | st.times() | st.timedeltas()
           | st.decimals() | st.uuids())
hashables = st.recursive(scalars.filter(lambda v: not (isinstance(v, Decimal) and v.is_snan())),
                         lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
                         max_leaves=4)
keys = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text()
                    | st.binary() | st.floats(allow_nan=False),
                    lambda inner: st.tuples(inner, inner), max_leaves=4)
values = st.recursive(
    scalars | hashables,
    lambda inner: (st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4)
                   | st.tuples(inner, inner) | st.sets(hashables, max_size=4)),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), values, max_size=4))
def test_nested_kept_values_round_trip_as_the_same_types(state):
    cp = Checkpoint(run_id="r", version=1, superstep=1, status="RUNNING", full=True, state=state,
                    ops=[(k, "set", v) for k, v in state.items()])
    back = decode(encode(cp))
    assert describe(back.state) == describe(state)
    assert describe([op[2] for op in back.ops]) == describe(list(state.values()))
    pw = decode(encode(PendingWrite(run_id="r", task="t", superstep=1, node="n",
                                    ops=[("k", "set", state)])))
    assert describe(pw.ops[0][2]) == describe(state)


# Written by bide before value types were kept (commit db67783): a set stored as an array,
# a tuple as an array, naive datetime / date / Decimal / UUID as strings, an aware datetime as
# msgpack's timestamp. They must read exactly as they always did: nothing stored changes.
OLD_CHECKPOINT = bytes.fromhex(
    "6264b3a7cc6e00010a636865636b706f696e74de0006a672756e5f6964a27231a776657273696f6e01a97375"
    "7065727374657001a6737461747573a752554e4e494e47a466756c6cc3a5737461746587a17391a162a17492"
    "0102a56e61697665b3323032342d30312d30325430333a30343a3035a56177617265d6ff65936105a3646563"
    "a4312e3530a175d92430303030303030302d303030302d303030302d303030302d3030303030303030303030"
    "37a164aa323032342d30312d3032")
OLD_INTENT = bytes.fromhex(
    "6264cbcac716000110696e74656e745f636f6d706c6574656483a672756e5f6964a27231a36b6579a3742330"
    "a6726573756c7481a178920102")


def test_records_written_before_value_types_were_kept_read_as_before():
    cp = decode(OLD_CHECKPOINT)
    assert cp.state == {
        "s": ["b"], "t": [1, 2], "naive": "2024-01-02T03:04:05",
        "aware": dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=dt.timezone.utc),
        "dec": "1.50", "u": "00000000-0000-0000-0000-000000000007", "d": "2024-01-02",
    }
    assert type(cp.state["s"]) is list and type(cp.state["t"]) is list
    assert decode(OLD_INTENT).result == {"x": [1, 2]}


def test_tool_argument_digests_of_calls_accepted_before_are_unchanged():
    args = ("a", 1, [1, 2], {"k": (1, 2)}, {3}, dt.date(2024, 1, 2), Decimal("2.5"),
            uuid.UUID(int=7), None, b"x", 1.5)
    kwargs = {"z": {"n": [True]}, "a": dt.datetime(2024, 1, 2, 3, 4, 5)}
    # the digest db67783 computed for this call: a resumed pre-upgrade run must replay it
    assert args_digest("t", args, kwargs) == "sha256:11d84bc4fa7cb380a75a6c14f93dab8d"


SET_ARGS = "({'alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta', 'eta', 'theta'},)"


def test_a_set_argument_has_the_same_digest_in_every_process():
    code = ("from bide.engine.run.context import args_digest; "
            f"print(args_digest('t', {SET_ARGS}, {{}}))")
    digests = set()
    for seed in ("1", "2", "3"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
        env["PYTHONHASHSEED"] = seed  # str hashes, hence set order, differ per process
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


CALLS: list[object] = []
TAGS = {"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"}


@bide.tool
def remember(tags):
    CALLS.append(tags)
    return sorted(tags)


def test_a_call_recorded_with_an_older_digest_still_replays(engine, monkeypatch):
    """A run started by an older bide recorded ``legacy_args_digest``; resuming replays it."""
    flow = bide.Flow("legacy")
    dies = {"once": True}

    def node(state, ctx):
        result = ctx.tool(remember, TAGS)
        if dies.pop("once", False):  # the node dies after the call was recorded
            raise RuntimeError("died after the call")
        return {"r": result}

    flow.node(node, name="n", start=True)
    engine.register(flow)
    monkeypatch.setattr(context, "args_digest",
                        lambda tool, args, kwargs: context.legacy_args_digest(args, kwargs))
    assert engine.start("legacy", {}, run_id="r1").status == bide.Status.FAILED
    monkeypatch.undo()
    with engine.store.reader() as r:
        (intent,) = list(r.intents("r1"))
    assert intent.status == "completed"
    assert intent.args_digest == context.legacy_args_digest((TAGS,), {})
    assert intent.args_digest != context.args_digest("remember", (TAGS,), {})  # 1 in 8! equal
    run = engine.resume("r1")
    assert run.status == bide.Status.DONE and run.state["r"] == sorted(TAGS)
    assert len(CALLS) == 1  # replayed from the log, not called again
