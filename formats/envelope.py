"""The frame around every stored value: magic, checksum, schema version, record type.

Layout (big-endian)::

    b"bd" | crc32 (4) | version (2) | len(type) (1) | type (ascii) | msgpack body

The CRC covers every byte after itself, so any truncation or single-bit flip
anywhere in the value (the CRC field included) is detected.
"""

from __future__ import annotations

import struct
import zlib

from .errors import CorruptRecord

MAGIC = b"bd"
_HEAD = struct.Struct(">2sIHB")


def frame(rtype: str, version: int, body: bytes) -> bytes:
    """Wrap an encoded body with its type, version and checksum."""
    tag = rtype.encode("ascii")
    rest = struct.pack(">HB", version, len(tag)) + tag + body
    return MAGIC + struct.pack(">I", zlib.crc32(rest)) + rest


def unframe(data: bytes, key: object = None) -> tuple[str, int, memoryview]:
    """Check a framed value and return ``(type, version, body)``.

    Raises:
        CorruptRecord: bad magic, short header, or checksum mismatch; names ``key``.
    """
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
