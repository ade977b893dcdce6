"""Records: round trips, checksums, schema upgrades, newer-version refusal."""

from __future__ import annotations

import struct
import zlib

import msgspec
import pytest
from bide.formats import (
    Checkpoint,
    CorruptRecord,
    NewerSchema,
    PendingWrite,
    StatusChanged,
    UnknownRecordType,
    decode,
    encode,
)
from bide.formats.envelope import frame
from hypothesis import given
from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
    | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@given(state=st.dictionaries(st.text(max_size=10), json_values, max_size=6),
       version=st.integers(0, 10_000), full=st.booleans())
def test_checkpoint_round_trips(state, version, full):
    cp = Checkpoint(run_id="r", version=version, superstep=version, status="RUNNING",
                    full=full, state=state, next=["a"], counts={"a": 1})
    assert decode(encode(cp)) == cp


@given(ops=st.lists(st.tuples(st.text(max_size=5), st.sampled_from(["set", "append", "merge"]),
                              json_values), max_size=5))
def test_pending_write_round_trips(ops):
    pw = PendingWrite(run_id="r", task="0:a:0", superstep=0, node="a", ops=ops)
    assert decode(encode(pw)) == pw


def test_every_truncation_and_bit_flip_is_detected():
    raw = encode(PendingWrite(run_id="r-1", task="0:a:0", superstep=0, node="a",
                              ops=[("k", "set", "v" * 40)]))
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecord) as info:
            decode(raw[:cut], key=7)
        assert info.value.key == 7
    for i in range(len(raw)):
        for bit in range(8):
            bad = bytearray(raw)
            bad[i] ^= 1 << bit
            with pytest.raises(CorruptRecord, match="key 9"):
                decode(bytes(bad), key=9)


def test_old_status_changed_v1_record_still_reads():
    """A fixture written as bide's schema v1 of status_changed (one ``message`` field)."""
    v1_body = msgspec.msgpack.encode({"run_id": "r-1", "status": "CANCELLED",
                                      "message": "operator asked", "at": 1.0})
    old = frame("status_changed", 1, v1_body)
    rec = decode(old)
    assert isinstance(rec, StatusChanged)
    assert rec.reason == "operator asked" and rec.error is None
    failed = decode(frame("status_changed", 1, msgspec.msgpack.encode(
        {"run_id": "r-1", "status": "FAILED", "message": "boom"})))
    assert failed.error == "boom" and failed.reason is None


def test_frozen_fixture_bytes_of_v1_decode():
    """Bytes exactly as an older bide wrote them (kept literally, not re-encoded)."""
    fixture = bytes.fromhex(
        "6264" "00000000" "0001" "0e" + b"status_changed".hex()
        + msgspec.msgpack.encode({"run_id": "r-9", "status": "INTERRUPTED",
                                  "message": "power"}).hex())
    body = fixture[6:]
    fixture = fixture[:2] + struct.pack(">I", zlib.crc32(body)) + body
    assert decode(fixture).reason == "power"


def test_newer_schema_says_upgrade():
    raw = frame("checkpoint", 99, msgspec.msgpack.encode({"run_id": "r"}))
    with pytest.raises(NewerSchema, match="upgrade bide"):
        decode(raw, key=3)


def test_unknown_type_says_upgrade():
    with pytest.raises(UnknownRecordType, match="upgrade bide"):
        decode(frame("from_the_future", 1, b"\x80"), key=4)


def test_body_that_does_not_match_schema_is_corrupt_not_crash():
    raw = frame("checkpoint", 1, msgspec.msgpack.encode({"run_id": 5}))
    with pytest.raises(CorruptRecord, match="key 11"):
        decode(raw, key=11)


def test_lone_surrogate_is_not_serializable_not_a_crash():
    from bide.formats import NotSerializable, check_serializable
    from bide.formats.records import RunCreated

    with pytest.raises(NotSerializable):
        check_serializable({"k": "\ud800"}, "state")
    with pytest.raises(NotSerializable):
        encode(RunCreated(run_id="r", flow="f", input={"k": "\udcff"}))
