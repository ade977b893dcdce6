"""encode(record) -> framed bytes, decode(bytes) -> record, with schema upgrades."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

import msgspec

from .envelope import SHORT_CODES, frame, frame_index, unframe, unframe_index
from .errors import CorruptIndex, CorruptRecord, NewerSchema, NotSerializable, UnknownRecordType
from .migrations import upgrade
from .records import RECORD_TYPES, Record
from .values import ext_hook, to_wire

_PLAIN = frozenset({str, int, float, bool, type(None), bytes})  # to_wire leaves them as they are

_encoder = msgspec.msgpack.Encoder()
_raw = msgspec.msgpack.Decoder(ext_hook=ext_hook)
_decoders: dict[Any, msgspec.msgpack.Decoder] = {}
_ENCODE_ERRORS = (TypeError, OverflowError, UnicodeEncodeError)  # lone surrogates too


def _decoder(cls: Any) -> msgspec.msgpack.Decoder:
    dec = _decoders.get(cls)
    if dec is None:
        dec = _decoders[cls] = msgspec.msgpack.Decoder(cls, ext_hook=ext_hook)
    return dec


def _wire_fields(struct: msgspec.Struct, names: Iterable[str]) -> dict[str, Any]:
    """The fields among ``names`` whose wire form differs (kept types as extension values)."""
    changes = {}
    for name in names:
        value = getattr(struct, name)
        if type(value) in _PLAIN:  # None, a str...: msgpack's own, as it is
            continue
        wire = to_wire(value)
        if wire is not value:
            changes[name] = wire
    return changes


def _wire_ops(ops: list[Any]) -> list[Any]:
    """``ops`` (``(key, kind, value)``) with values in wire form: ``ops`` itself when
    none changes (a step's appends of strings), not a copy made for the encoder."""
    out = None
    for i, (key, kind, value) in enumerate(ops):
        if type(value) in _PLAIN:
            continue
        wire = to_wire(value)
        if wire is not value:
            if out is None:
                out = list(ops)
            out[i] = (key, kind, wire)
    return ops if out is None else out


def _wire_record(record: Record) -> Record:
    """The record with its user values in wire form (kept types as extension values)."""
    changes = _wire_fields(record, record.VALUE_FIELDS)
    for name in record.OP_FIELDS:
        ops = getattr(record, name)
        if ops:
            wired = _wire_ops(ops)
            if wired is not ops:
                changes[name] = wired
    return msgspec.structs.replace(record, **changes) if changes else record


_defaults_of: dict[type, tuple[tuple[Any, type], ...]] = {}


def _defaults(cls: type[Record]) -> tuple[tuple[Any, type], ...]:
    """The default of each field of an array-like record and its type, in order
    (NODEFAULT: required; no value equals it)."""
    found = _defaults_of.get(cls)
    if found is None:
        values = [f.default_factory() if f.default_factory is not msgspec.NODEFAULT
                  else f.default for f in msgspec.structs.fields(cls)]
        found = _defaults_of[cls] = tuple((v, type(v)) for v in values)
    return found


def _row(record: Record) -> tuple[Any, ...]:
    """An array-like record as its array without the defaults at its end: msgspec
    writes every field of an array, and reads a shorter one with the defaults."""
    row = msgspec.structs.astuple(record)
    defaults = _defaults(type(record))
    n = len(row)
    while n:
        value = row[n - 1]
        default, kind = defaults[n - 1]
        # equal and of the same type (0 == 0.0 == False would drop a set value); a word
        # may be a str enum member (Status.RUNNING)
        if value != default or (type(value) is not kind and not isinstance(value, str)):
            break
        n -= 1
    return row[:n]


_is_short: dict[type, bool] = {}  # per record class: written in a short frame


def encode(record: Record) -> bytes:
    """Frame a record as bytes for the store.

    Raises:
        NotSerializable: a field holds a value bide does not keep.
    """
    short = _is_short.get(type(record))
    if short is None:
        short = _is_short[type(record)] = (record.TYPE, record.VERSION) in SHORT_CODES
    try:
        wire = _wire_record(record)
        body = _encoder.encode(_row(wire) if short else wire)
    except NotSerializable as exc:
        raise NotSerializable(f"{record.TYPE} record", exc.why, type_name=exc.type_name,
                              trail=exc.trail) from exc
    except _ENCODE_ERRORS as exc:
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
        return msgspec.convert(_shaped(cls, upgrade(rtype, version, cls.VERSION, old)), cls)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise CorruptRecord(key, f"body does not decode as {rtype} v{version}: {exc}") from exc


def _shaped(cls: type[Record], data: dict[str, Any]) -> Any:
    """An upgraded mapping in the form ``cls`` decodes: a row for an array-like record."""
    if not cls.__struct_config__.array_like:
        return data
    row = []
    for f in msgspec.structs.fields(cls):
        if f.name in data:
            row.append(data[f.name])
        elif f.default is not msgspec.NODEFAULT:
            row.append(f.default)
        elif f.default_factory is not msgspec.NODEFAULT:
            row.append(f.default_factory())
        else:
            raise ValueError(f"the upgraded record has no {f.name!r}")
    return row


def record_type(data: bytes, key: object = None) -> str:
    """The type tag of a framed value, checked but not decoded."""
    return unframe(data, key)[0]


def pack(value: Any) -> bytes:
    """Plain msgpack, as bide always wrote it: index keys and the bytes digests hash.

    Every kept type has a msgpack form here (a set as an array, a date as a
    string...), so digests of values accepted by an older bide stay the same.
    """
    return _encoder.encode(value)


def unpack(data: bytes, type: Any = Any) -> Any:  # noqa: A002 - mirrors msgspec's name
    """Decode msgpack (plain, or with kept types as extension values)."""
    return _decoder(type).decode(data)


def digest_bytes(value: Any) -> bytes:
    """The bytes a digest hashes: :func:`pack`, with every set's items in sorted order.

    A set of strings iterates in a different order in every process (hash
    randomization), so hashing it as iterated made a resumed run's digest differ.
    Without sets these are exactly :func:`pack`'s bytes, as older bides hashed.
    """
    return _encoder.encode(_sets_sorted(value))


def _sets_sorted(value: Any) -> Any:
    t = type(value)
    if t is set or t is frozenset:
        return sorted((_sets_sorted(v) for v in value), key=_encoder.encode)
    if t is list or t is tuple:
        return [_sets_sorted(v) for v in value]
    if t is dict:
        return {k: _sets_sorted(v) for k, v in value.items()}
    return value


def _index_fields(struct: Any) -> dict[str, Any]:
    """The fields of an index struct whose stored form differs, in one pass: a str-valued
    enum member (an engine's ``Status.DONE``) as the plain string it stands for (an index
    value stores words, not Python types), a kept type as an extension value (user
    values inside fields are still refused an enum by ``to_wire``). Plain scalars, most
    of a run head's fields, are skipped at once: a head is packed at every commit."""
    changes = {}
    for name, value in zip(struct.__struct_fields__, msgspec.structs.astuple(struct), strict=True):
        if type(value) in _PLAIN:
            continue
        if isinstance(value, str) and isinstance(value, Enum):
            changes[name] = str.__str__(value)
        elif (wire := to_wire(value)) is not value:
            changes[name] = wire
    return changes


def pack_value(value: Any) -> bytes:
    """A derived index value (a struct or list): kept types faithfully, and a checksum."""
    if isinstance(value, msgspec.Struct):
        changes = _index_fields(value)
        value = msgspec.structs.replace(value, **changes) if changes else value
    else:
        value = to_wire(value)
    return pack_plain(value)


def pack_plain(value: Any) -> bytes:
    """:func:`pack_value` of a value the caller knows holds msgpack's own types only (no
    kept type, no enum member): the same bytes, without walking it first."""
    return frame_index(_encoder.encode(value))


def unpack_value(data: bytes, type: Any = Any, *, table: str, key: bytes) -> Any:  # noqa: A002
    """Inverse of :func:`pack_value`; also reads values written before index checksums.

    Raises:
        CorruptIndex: the checksum does not match or the value does not decode
            (names ``table`` and ``key``).
    """
    try:
        body = unframe_index(data)
        return _decoder(type).decode(data if body is None else body)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise CorruptIndex(table, key, str(exc)) from None


def check_serializable(value: Any, what: str) -> bytes:
    """Encode ``value`` as it will be stored, or raise :class:`NotSerializable` naming ``what``.

    Refuses every type bide would not read back as the same type (formats/values.py).
    """
    try:
        return _encoder.encode(to_wire(value))
    except NotSerializable as exc:
        where = exc.where()
        raise NotSerializable(what + (f" at {where}" if where else ""), exc.why,
                              type_name=exc.type_name, trail=exc.trail) from None
    except _ENCODE_ERRORS as exc:
        raise NotSerializable(what, str(exc)) from exc


__all__ = [
    "CorruptIndex",
    "CorruptRecord",
    "check_serializable",
    "decode",
    "digest_bytes",
    "encode",
    "pack",
    "pack_value",
    "record_type",
    "unpack",
    "unpack_value",
]
