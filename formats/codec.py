"""encode(record) -> framed bytes, decode(bytes) -> record, with schema upgrades."""

from __future__ import annotations

from typing import Any

import msgspec

from .envelope import frame, unframe
from .errors import CorruptRecord, NewerSchema, NotSerializable, UnknownRecordType
from .migrations import upgrade
from .records import RECORD_TYPES, Record

_encoder = msgspec.msgpack.Encoder()
_raw = msgspec.msgpack.Decoder()
_decoders: dict[type, msgspec.msgpack.Decoder] = {}


def _decoder(cls: type[Record]) -> msgspec.msgpack.Decoder:
    dec = _decoders.get(cls)
    if dec is None:
        dec = _decoders[cls] = msgspec.msgpack.Decoder(cls)
    return dec


def encode(record: Record) -> bytes:
    """Frame a record as bytes for the store.

    Raises:
        NotSerializable: a field holds a value msgpack cannot represent.
    """
    try:
        body = _encoder.encode(record)
    except (TypeError, OverflowError, UnicodeEncodeError) as exc:
        raise NotSerializable(f"{record.TYPE} record", str(exc)) from exc
    return frame(record.TYPE, record.VERSION, body)


def decode(data: bytes, key: object = None) -> Record:
    """Read a framed record, upgrading an older schema version.

    Raises:
        CorruptRecord: checksum, truncation or body decode failure (names ``key``).
        NewerSchema / UnknownRecordType: written by a newer bide.
    """
    rtype, version, body = unframe(data, key)
    cls = RECORD_TYPES.get(rtype)
    if cls is None:
        raise UnknownRecordType(key, rtype)
    if version > cls.VERSION:
        raise NewerSchema(key, rtype, version, cls.VERSION)
    try:
        if version == cls.VERSION:
            return _decoder(cls).decode(body)
        old = _raw.decode(body)
        return msgspec.convert(upgrade(rtype, version, cls.VERSION, old), cls)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecord(key, f"body does not decode as {rtype} v{version}: {exc}") from exc


def record_type(data: bytes, key: object = None) -> str:
    """The type tag of a framed value, checked but not decoded."""
    return unframe(data, key)[0]


def pack(value: Any) -> bytes:
    """Plain msgpack for derived (rebuildable) index values."""
    return _encoder.encode(value)


def unpack(data: bytes, type: Any = Any) -> Any:  # noqa: A002 - mirrors msgspec's name
    """Inverse of :func:`pack`."""
    if type is Any:
        return _raw.decode(data)
    return msgspec.msgpack.decode(data, type=type)


def check_serializable(value: Any, what: str) -> bytes:
    """Encode ``value`` or raise :class:`NotSerializable` naming ``what``."""
    try:
        return _encoder.encode(value)
    except (TypeError, OverflowError, UnicodeEncodeError) as exc:  # lone surrogates too
        raise NotSerializable(what, str(exc)) from exc


__all__ = [
    "CorruptRecord",
    "check_serializable",
    "decode",
    "encode",
    "pack",
    "record_type",
    "unpack",
]
