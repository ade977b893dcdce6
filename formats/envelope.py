"""The frame around every stored value: magic, checksum, schema version, record type.

Layout (big-endian)::

    b"bd" | crc32 (4) | version (2) | len(type) (1) | type (ascii) | msgpack body

The CRC covers every byte after itself, so any truncation or single-bit flip
anywhere in the value (the CRC field included) is detected.

A record written once per step or per tool call has a short frame instead: one
byte that stands for its type and version (``0xb0`` + its code in ``SHORT_CODES``,
1 to 15: never ``b"b"``, the long frame's first byte, nor ``0xc1``), then the
checksum, which covers that byte too::

    0xb0 + code (1) | crc32 (4) | msgpack body

The names cost a small record a sixth of its bytes (41 B of a tool call's 499).

Derived index values (rebuildable from the log) have a smaller frame::

    0xc1 | crc32 (4) | msgpack body

0xc1 is the one byte msgpack never uses, so a value written before index
checksums (a bare msgpack map or array) is told apart from a framed one.
"""

from __future__ import annotations

import struct
import zlib

from .errors import CorruptRecord, UnknownRecordType

MAGIC = b"bd"
_HEAD = struct.Struct(">2sIHB")

SHORT_BASE = 0xB0  # a short frame's first byte is this plus its code
_SHORT_HEAD = 5
# (type, version) -> its code (1 to 15) in a short frame. A code is never reused or
# renumbered: stored bytes name their record by it forever.
SHORT_CODES: dict[tuple[str, int], int] = {
    ("checkpoint", 5): 1,
    ("intent_prepared", 3): 2,
    ("intent_completed", 3): 3,
}
_SHORT_NAMES = {code: name for name, code in SHORT_CODES.items()}
# per short code: its first byte, and the checksum of that byte (the body's crc starts there)
_SHORT_HEADS = {name: (bytes((SHORT_BASE + code,)), zlib.crc32(bytes((SHORT_BASE + code,))))
                for name, code in SHORT_CODES.items()}
_CRC = struct.Struct(">I")


def frame(rtype: str, version: int, body: bytes) -> bytes:
    """Wrap an encoded body with its type, version and checksum."""
    head = _SHORT_HEADS.get((rtype, version))
    if head is not None:
        first, seed = head
        return first + _CRC.pack(zlib.crc32(body, seed)) + body
    tag = rtype.encode("ascii")
    rest = struct.pack(">HB", version, len(tag)) + tag + body
    return MAGIC + struct.pack(">I", zlib.crc32(rest)) + rest


def unframe(data: bytes, key: object = None) -> tuple[str, int, memoryview]:
    """Check a framed value and return ``(type, version, body)``.

    Raises:
        CorruptRecord: bad magic, short header, or checksum mismatch; names ``key``.
    """
    if data and SHORT_BASE < data[0] <= SHORT_BASE + 15:
        return _unframe_short(data, key)
    if len(data) < _HEAD.size:
        raise CorruptRecord(key, f"truncated: {len(data)} bytes is shorter than the header")
    magic, crc, version, tlen = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise CorruptRecord(key, f"bad magic {bytes(magic)!r}")
    view = memoryview(data)
    if zlib.crc32(view[6:]) != crc:
        raise CorruptRecord(key, "checksum mismatch (truncated or bit-flipped)")
    end = _HEAD.size + tlen
    if end > len(data):
        raise CorruptRecord(key, "truncated inside the type tag")
    try:
        rtype = bytes(view[_HEAD.size:end]).decode("ascii")
    except UnicodeDecodeError as exc:
        raise CorruptRecord(key, "type tag is not ascii") from exc
    return rtype, version, view[end:]


def _unframe_short(data: bytes, key: object) -> tuple[str, int, memoryview]:
    if len(data) < _SHORT_HEAD:
        raise CorruptRecord(key, f"truncated: {len(data)} bytes is shorter than the header")
    view = memoryview(data)
    if zlib.crc32(view[_SHORT_HEAD:], zlib.crc32(view[:1])) != struct.unpack_from(">I", data, 1)[0]:
        raise CorruptRecord(key, "checksum mismatch (truncated or bit-flipped)")
    code = data[0] - SHORT_BASE
    named = _SHORT_NAMES.get(code)
    if named is None:  # the checksum holds: a newer bide, with more codes, wrote it
        raise UnknownRecordType(key, f"short code {code}")
    return named[0], named[1], view[_SHORT_HEAD:]


INDEX_MAGIC = b"\xc1"
_INDEX_HEAD = 5


def frame_index(body: bytes) -> bytes:
    """Prefix an index value's body with its checksum."""
    return INDEX_MAGIC + struct.pack(">I", zlib.crc32(body)) + body


def unframe_index(data: bytes) -> memoryview | None:
    """The checked body of a framed index value; None for an unframed (older) one.

    Raises:
        ValueError: the checksum does not match, or the value is truncated.
    """
    if data[:1] != INDEX_MAGIC:
        return None
    if len(data) < _INDEX_HEAD:
        raise ValueError(f"truncated: {len(data)} bytes is shorter than the checksum")
    view = memoryview(data)
    if zlib.crc32(view[_INDEX_HEAD:]) != struct.unpack_from(">I", data, 1)[0]:
        raise ValueError("checksum mismatch (bit-flipped or truncated)")
    return view[_INDEX_HEAD:]
