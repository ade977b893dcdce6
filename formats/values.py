"""The Python values bide keeps: each reads back as the same type, or is refused when written.

A node must see the same state whether or not the process restarted in between,
so a value is either restored exactly or refused at write time. msgpack itself
carries ``None``, ``bool``, ``int`` (64-bit), ``float`` (nan and inf too),
``str``, ``bytes``, ``list`` and ``dict``; the types below travel as msgpack
extension values, so nothing stored by an older bide (which had none) changes
meaning. Dict keys are scalars (``str``, ``int``, ``float``, ``bool``, ``None``,
``bytes``) or tuples of them: msgpack restores those keys as they were.

Refused on purpose: subclasses (``IntEnum``, ``namedtuple``, ``OrderedDict``...),
``Enum`` and dataclasses. Restoring them means importing user classes by name
while decoding, which ties stored runs to a module layout and makes ``bide
show`` run user code; store ``member.value`` or ``dataclasses.asdict(obj)``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import msgspec

from .errors import NotSerializable

Ext = msgspec.msgpack.Ext

# Extension codes: never reuse or renumber one (stored values carry them).
TUPLE, SET, FROZENSET, DATETIME, DATE, TIME, TIMEDELTA, DECIMAL, UUID = range(1, 10)

_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
_KEY_SCALARS = _SCALARS
_STR = frozenset({str})
_body = msgspec.msgpack.Encoder()

SUPPORTED = ("None", "bool", "int (64-bit)", "float", "str", "bytes", "list", "dict", "tuple",
             "set", "frozenset", "datetime", "date", "time", "timedelta", "Decimal", "UUID")


def refuse(value: Any, trail: list[Any], hint: str = "") -> NotSerializable:
    """The error for a value bide does not keep, naming its type and where it sits."""
    name = type(value).__qualname__
    module = type(value).__module__
    if module not in ("builtins", None):
        name = f"{module}.{name}"
    why = f"type {name} is not kept by bide{hint}; supported: {', '.join(SUPPORTED)}"
    return NotSerializable("a value", why, type_name=name, trail=trail)


def to_wire(value: Any) -> Any:
    """``value`` with every kept non-msgpack type as an extension value.

    Raises:
        NotSerializable: a value (at any depth) has a type bide does not keep;
            ``type_name`` names it and ``trail`` says where it is (outermost first).
    """
    t = type(value)
    if t in _SCALARS:
        return value
    if t is list:
        return _list(value)
    if t is dict:
        return _dict(value)
    encode = _EXT_ENCODERS.get(t)
    if encode is None:
        raise refuse(value, [], _hint(value))
    return encode(value)


def _list(items: list[Any]) -> list[Any]:
    if _SCALARS.issuperset(map(type, items)):  # the common case, at C speed
        return items
    try:
        return [v if type(v) in _SCALARS else _dict(v) if type(v) is dict else to_wire(v)
                for v in items]
    except NotSerializable as exc:
        exc.trail.insert(0, _failing(enumerate(items)))
        raise


def _dict(d: dict[Any, Any]) -> dict[Any, Any]:
    if not _STR.issuperset(map(type, d)):
        for k in d:
            _check_key(k)
    if _SCALARS.issuperset(map(type, d.values())):
        return d
    try:
        return {k: v if type(v) in _SCALARS else to_wire(v) for k, v in d.items()}
    except NotSerializable as exc:
        exc.trail.insert(0, _failing(d.items()))
        raise


def _failing(pairs: Any) -> Any:
    """The index or key of the first refused item (only walked when one was refused)."""
    for where, v in pairs:
        try:
            to_wire(v)
        except NotSerializable:
            return where
    return None


def _check_key(key: Any) -> None:
    if type(key) in _KEY_SCALARS:
        return
    if type(key) is tuple:
        for part in key:
            _check_key(part)
        return
    raise refuse(key, [], " as a dict key (keys are str, int, float, bool, None, bytes "
                          "or tuples of them)")


def _hint(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return " (an Enum: store member.value)"
    if dataclasses.is_dataclass(value):
        return " (a dataclass: store dataclasses.asdict(obj))"
    if isinstance(value, (tuple, list, dict, set, frozenset, str, int, float, bytes)):
        return " (a subclass of a kept type: convert it to the plain type)"
    return ""


def _items(kind: int, items: Any) -> Ext:
    return Ext(kind, _body.encode(_list(list(items))))


def _tz(tz: dt.tzinfo | None, value: Any) -> Any:
    if tz is None:
        return None
    if type(tz) is ZoneInfo and tz.key is not None:
        return tz.key
    if type(tz) is dt.timezone:
        offset = tz.utcoffset(None)
        name = tz.tzname(None)
        plain = dt.timezone(offset).tzname(None)
        return [offset.days, offset.seconds, offset.microseconds, None if name == plain else name]
    raise refuse(value, [], f" with tzinfo {type(tz).__name__} (use datetime.timezone or "
                            "zoneinfo.ZoneInfo)")


def _datetime(v: dt.datetime) -> Ext:
    body = [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.fold,
            _tz(v.tzinfo, v)]
    return Ext(DATETIME, _body.encode(body))


def _time(v: dt.time) -> Ext:
    return Ext(TIME, _body.encode([v.hour, v.minute, v.second, v.microsecond, v.fold,
                                   _tz(v.tzinfo, v)]))


_EXT_ENCODERS: dict[type, Any] = {
    tuple: lambda v: _items(TUPLE, v),
    set: lambda v: _items(SET, v),
    frozenset: lambda v: _items(FROZENSET, v),
    dt.datetime: _datetime,
    dt.date: lambda v: Ext(DATE, _body.encode([v.year, v.month, v.day])),
    dt.time: _time,
    dt.timedelta: lambda v: Ext(TIMEDELTA, _body.encode([v.days, v.seconds, v.microseconds])),
    Decimal: lambda v: Ext(DECIMAL, str(v).encode()),
    uuid.UUID: lambda v: Ext(UUID, v.bytes),
}


# -- decoding -----------------------------------------------------------------

def _untz(spec: Any) -> dt.tzinfo | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        return ZoneInfo(spec)
    days, seconds, micros, name = spec
    offset = dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    return dt.timezone(offset) if name is None else dt.timezone(offset, name)


def _from_datetime(b: Any) -> dt.datetime:
    y, mo, d, h, mi, s, us, fold, tz = b
    return dt.datetime(y, mo, d, h, mi, s, us, tzinfo=_untz(tz), fold=fold)


def _from_time(b: Any) -> dt.time:
    h, mi, s, us, fold, tz = b
    return dt.time(h, mi, s, us, tzinfo=_untz(tz), fold=fold)


_FROM_BODY: dict[int, Any] = {
    TUPLE: tuple,
    SET: set,
    FROZENSET: frozenset,
    DATETIME: _from_datetime,
    DATE: lambda b: dt.date(*b),
    TIME: _from_time,
    TIMEDELTA: lambda b: dt.timedelta(days=b[0], seconds=b[1], microseconds=b[2]),
}


def ext_hook(code: int, data: memoryview) -> Any:
    """Turn an extension value back into the Python value it was made from."""
    if code == DECIMAL:
        return Decimal(bytes(data).decode())
    if code == UUID:
        return uuid.UUID(bytes=bytes(data))
    make = _FROM_BODY.get(code)
    if make is None:
        raise ValueError(f"unknown bide extension code {code} (written by a newer bide?)")
    return make(_inner.decode(data))


_inner = msgspec.msgpack.Decoder(ext_hook=ext_hook)

__all__ = ["SUPPORTED", "ext_hook", "refuse", "to_wire"]
