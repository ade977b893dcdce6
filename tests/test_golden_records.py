"""Drift check: the bytes of every record type at its current version are frozen.

The examples live in tests/fixtures/make_golden_records.py, which wrote
tests/fixtures/golden_records.json once. A failure here means a record's wire
format changed: add a new VERSION and a migration (formats/migrations.py) rather
than regenerating the golden bytes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import msgspec
import pytest
from bide.formats import RECORD_TYPES, decode, encode

FIXTURES = Path(__file__).parent / "fixtures"


def _load_examples():
    spec = importlib.util.spec_from_file_location("make_golden_records",
                                                  FIXTURES / "make_golden_records.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


MAKER = _load_examples()
GOLDEN: dict[str, dict] = json.loads((FIXTURES / "golden_records.json").read_text())
EXAMPLES = {r.TYPE: r for r in MAKER.EXAMPLES}


def test_every_record_type_has_golden_bytes_and_an_example():
    assert sorted(GOLDEN) == sorted(RECORD_TYPES)
    assert sorted(EXAMPLES) == sorted(RECORD_TYPES)
    assert len(MAKER.EXAMPLES) == len(EXAMPLES)


@pytest.mark.parametrize("tag", sorted(GOLDEN))
def test_golden_bytes_are_the_current_version(tag: str):
    assert GOLDEN[tag]["version"] == RECORD_TYPES[tag].VERSION


@pytest.mark.parametrize("tag", sorted(GOLDEN))
def test_encode_gives_the_golden_bytes_exactly(tag: str):
    assert encode(EXAMPLES[tag]).hex() == GOLDEN[tag]["hex"]


@pytest.mark.parametrize("tag", sorted(GOLDEN))
def test_golden_bytes_decode_to_the_example(tag: str):
    record = decode(bytes.fromhex(GOLDEN[tag]["hex"]))
    assert type(record) is RECORD_TYPES[tag]
    assert record == EXAMPLES[tag]


@pytest.mark.parametrize("tag", sorted(EXAMPLES))
def test_every_field_of_an_example_is_set_to_a_non_default(tag: str):
    record = EXAMPLES[tag]
    for field in msgspec.structs.fields(record):
        if field.default is not msgspec.NODEFAULT:
            assert getattr(record, field.name) != field.default, field.name
        if field.default_factory is not msgspec.NODEFAULT:
            assert getattr(record, field.name) != field.default_factory(), field.name


def test_maker_refuses_to_overwrite_without_force(capsys):
    assert MAKER.main([]) == 1
    assert "--force" in capsys.readouterr().err


# -- older versions: their golden bytes stay, and must keep decoding ------------------------
OLD: dict[str, dict] = json.loads((FIXTURES / "golden_records_old.json").read_text())
# What each old example reads as today; every v1 field survives: derived or kept in fixups.
UPGRADED = {
    "intent_prepared@1": {
        "run_id": "r-1", "key": "6:b:0:0", "task": "6:b:0", "node": "b", "index": 1,
        "tool": "charge", "args_digest": "d1g", "idempotency_key": "idem-1", "attempt": 2,
        "args_preview": "charge(10)", "at": 5.5},
    "intent_completed@1": {
        "run_id": "r-1", "key": "6:b:0:0", "attempt": 2, "ok": False,
        "result": EXAMPLES["intent_completed"].result, "error": "declined",
        "error_type": "CardError", "via": "reconcile", "at": 6.5},
    # v2 only changed the encoding: v1 decodes to today's example (v3 added sends,
    # v4 sends_at: an older checkpoint stores its own Sends)
    "checkpoint@1": EXAMPLES["checkpoint"].view() | {"sends": [], "sends_at": -1},
    "checkpoint@2": EXAMPLES["checkpoint"].view() | {"sends": [], "sends_at": -1},
    "checkpoint@3": EXAMPLES["checkpoint"].view() | {"sends_at": -1},
    # checkpoint v5 and intent_prepared v3 reordered the fields and use a short frame
    "checkpoint@4": EXAMPLES["checkpoint"].view(),
    "intent_prepared@2": EXAMPLES["intent_prepared"].view(),
    "intent_completed@2": {k: v for k, v in EXAMPLES["intent_completed"].view().items()
                           if k != "took"},  # v3 added took
    "pending_write@1": EXAMPLES["pending_write"].view(),
}


@pytest.mark.parametrize("name", sorted(OLD))
def test_old_golden_bytes_still_decode_with_every_field(name: str):
    tag, version = name.split("@")
    assert OLD[name]["version"] == int(version) < RECORD_TYPES[tag].VERSION
    record = decode(bytes.fromhex(OLD[name]["hex"]))
    assert type(record) is RECORD_TYPES[tag]
    assert record.view() == UPGRADED[name]


def test_a_v1_intent_written_by_the_engine_upgrades_without_fixups():
    """What an older bide really wrote (derivable ids, a sha256 digest) needs no fixups."""
    from bide.engine.run.context import args_digest
    from bide.formats.envelope import frame
    from bide.formats.records import idempotency_key

    digest = args_digest("send", (1,), {})
    v1 = {"run_id": "r", "key": "2:act:0#3", "task": "2:act:0", "node": "act", "index": 3,
          "tool": "send", "args_digest": digest,
          "idempotency_key": idempotency_key("r", "2:act:0#3"), "at": 1.0}
    record = decode(frame("intent_prepared", 1, msgspec.msgpack.encode(v1)))
    assert record.fixups is None and record.view() | {"attempt": 1, "args_preview": ""} == \
        v1 | {"attempt": 1, "args_preview": ""}
    done = decode(frame("intent_completed", 1, msgspec.msgpack.encode(
        {"run_id": "r", "key": "2:act:0#3", "result": 5})))
    assert (done.task, done.index, done.key, done.fixups) == ("2:act:0", 3, "2:act:0#3", None)


def test_compact_intents_are_small():
    """At 100 B of arguments and 100 B of result, a call's two records stay near the payload."""
    from bide.formats import IntentCompleted, IntentPrepared

    prepared = IntentPrepared(run_id="run-0001", task="12:act:0", index=0, tool="send",
                              digest=bytes(16), args_preview=repr("a" * 98), at=1e9)
    completed = IntentCompleted(run_id="run-0001", task="12:act:0", index=0, result="r" * 100,
                                at=1e9)
    assert len(encode(prepared)) + len(encode(completed)) <= 2 * 100 + 150


def test_a_lease_grant_written_before_ttl_existed_decodes_with_none():
    """ttl is a new field with a default, not a new version: a LeaseAcquired an older
    bide wrote (these bytes) reads with ttl 0 (its expires_at is what the store uses),
    and an older bide reading a new one ignores the field and reads the same expiry."""
    before = bytes.fromhex(
        "6264fb1b46b200010e6c656173655f616371756972656487a672756e5f6964a3722d31a56f776e65"
        "72a3772d31a5746f6b656e03aa657870697265735f6174cb4025000000000000a8617474656d7074"
        "7302a26174cb4024800000000000a57472616365d931306166373635313931366364343364643834"
        "34386562323131633830333139632d62376164366237313639323033333331")
    record = decode(before)
    assert record == msgspec.structs.replace(EXAMPLES["lease_acquired"], ttl=0.0)


def test_lg_writes_written_before_asks_existed_decode_with_none():
    """asks and waits (the requests an interrupt made) are new fields with defaults: an
    LGWrites an older bide wrote (these bytes) reads with none, as it was."""
    before = bytes.fromhex(
        "6264a948b0d20001096c675f77726974657389a672756e5f6964a174a26e73a3737562ad63686563"
        "6b706f696e745f6964a3316630a77461736b5f6964a47461736ba97461736b5f70617468a27e61a6"
        "777269746573929400a56974656d73a76d73677061636bc402910194ffa95f5f6572726f725f5fa7"
        "6d73677061636bc405a4626f6f6da77265706c616365c3a56572726f72a4626f6f6da26174cb402d"
        "000000000000")
    record = decode(before)
    assert record == msgspec.structs.replace(EXAMPLES["lg_writes"], asks=[], waits="")
