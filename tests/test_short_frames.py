"""Short frames (one byte for type and version) and arrays without their trailing defaults:
the hot records' encoding (formats/envelope.py, formats/codec.py)."""

from __future__ import annotations

import struct
import zlib

import msgspec
import pytest
from bide.formats import (
    Checkpoint,
    CorruptRecord,
    IntentCompleted,
    IntentPrepared,
    UnknownRecordType,
    decode,
    encode,
    record_type,
)
from bide.formats.envelope import SHORT_BASE, SHORT_CODES

HOT = [
    Checkpoint(run_id="r0", version=3, superstep=3, base=1, writes=[-1],
               deferred=[("last", "set", "x" * 100), ("count", "set", 3)],
               committed=["step"], next=["step"], at=1.5),
    IntentPrepared(run_id="r0", task="2:step:0", index=0, tool="send", digest=bytes(16),
                   args_preview="2, 'aaa'", at=1.25),
    IntentCompleted(run_id="r0", task="2:step:0", index=0, result="r" * 100),
]


@pytest.mark.parametrize("record", HOT, ids=lambda r: r.TYPE)
def test_a_hot_record_has_a_short_frame_and_reads_back(record):
    raw = encode(record)
    assert raw[0] == SHORT_BASE + SHORT_CODES[(record.TYPE, record.VERSION)]
    assert decode(raw) == record and record_type(raw) == record.TYPE


def test_trailing_defaults_are_left_out_and_read_back_as_defaults():
    done = IntentCompleted(run_id="r0", task="2:step:0", index=0, result="ok")
    body = msgspec.msgpack.decode(encode(done)[5:])
    assert body == ["r0", "2:step:0", 0, "ok"]  # no time, no "call", no attempt 1
    failed = IntentCompleted(run_id="r0", task="2:step:0", index=0, ok=False, error="boom")
    assert decode(encode(failed)) == failed


def test_a_set_value_equal_to_its_default_of_another_type_is_kept():
    """``0 == 0.0 == False``: only a value of the default's own type is left out."""
    cp = Checkpoint(run_id="r0", version=1, superstep=1, deferred=[("n", "set", 0)])
    back = decode(encode(cp))
    assert back == cp and type(back.deferred[0][2]) is int
    assert decode(encode(IntentCompleted(run_id="r", task="0:a:0", index=0, result=False))
                  ).result is False


@pytest.mark.parametrize("record", HOT, ids=lambda r: r.TYPE)
def test_every_flipped_bit_or_cut_of_a_short_frame_is_refused(record):
    raw = encode(record)
    for i in range(len(raw)):
        for bit in (0, 7):
            bad = bytearray(raw)
            bad[i] ^= 1 << bit
            with pytest.raises((CorruptRecord, UnknownRecordType)):
                decode(bytes(bad), key=9)
    for n in range(len(raw)):
        with pytest.raises(CorruptRecord, match="key 9"):
            decode(raw[:n], key=9)


def test_an_unknown_short_code_says_upgrade():
    first = bytes((SHORT_BASE + 15,))
    raw = first + struct.pack(">I", zlib.crc32(b"\x90", zlib.crc32(first))) + b"\x90"
    with pytest.raises(UnknownRecordType, match="short code 15.*upgrade bide"):
        decode(raw, key=4)


def test_codes_are_unique_and_name_the_current_versions():
    from bide.formats import RECORD_TYPES

    assert len(set(SHORT_CODES.values())) == len(SHORT_CODES)
    assert all(0 < code <= 15 for code in SHORT_CODES.values())
    for (tag, version) in SHORT_CODES:
        assert RECORD_TYPES[tag].VERSION == version
