"""Schemas of the values a question (``ctx.ask``) takes, as JSON Schema.

An answer is checked when it is recorded — by a watcher, ``bide answer`` or the
API — often in a process that does not have the app's Python types (the CLI
without ``--app``). So the question stores its type as the JSON Schema msgspec
emits for it, and this module checks a JSON value against that stored schema;
the node, which has the type, converts the value with msgspec when it runs again.

The checker covers exactly the keywords ``msgspec.json.schema`` emits (types,
``enum``/``const``, ``anyOf``, ``$ref`` into ``$defs``, object properties,
``required`` and ``additionalProperties``, arrays with ``items``/``prefixItems``
and their bounds, string length and ``pattern``, number bounds and
``multipleOf``, and the string formats msgspec names: date, duration, uuid,
decimal, base64); annotations (``title``, ``default``...) check nothing. A
schema with any other keyword is refused when the question is asked, so an
answer is never waved through by a keyword nobody checks.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import uuid
from typing import Any

import msgspec

_ANNOTATIONS = {"title", "description", "default", "examples", "format", "contentEncoding",
                "contentMediaType", "discriminator", "$comment", "deprecated", "readOnly",
                "writeOnly", "$defs"}
_CHECKED = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties",
            "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
            "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
            "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties",
            "maxProperties"}
# string formats msgspec's schemas name, checked by converting as the node will
# (msgspec 0.23 names none for datetime and time: those answers are checked as strings
# when recorded, and a malformed one raises InvalidAnswer in the node)
_FORMATS: dict[str, type] = {"date": datetime.date, "duration": datetime.timedelta,
                             "uuid": uuid.UUID, "decimal": decimal.Decimal, "base64": bytes}
_JSON_TYPES = {"string": str, "boolean": bool, "null": type(None), "array": list,
               "object": dict}


class SchemaProblem(ValueError):
    """A value does not match a schema, or a schema uses what this checker cannot check."""


def schema_of(tp: Any) -> dict[str, Any] | None:
    """The JSON Schema of a type msgspec converts (None: any JSON value).

    Raises:
        SchemaProblem: msgspec cannot describe the type, or the schema uses a keyword
            this module does not check.
    """
    if tp is None:
        return None
    try:
        schema = msgspec.json.schema(tp)
    except (TypeError, ValueError) as exc:
        raise SchemaProblem(f"{tp!r} is not a type msgspec can describe: {exc}") from None
    _check_keywords(schema)
    return schema


def _check_keywords(schema: Any) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaProblem(f"a schema is an object, not {type(schema).__name__}")
    unknown = set(schema) - _CHECKED - _ANNOTATIONS
    if unknown:
        raise SchemaProblem(f"schema keyword(s) {', '.join(sorted(unknown))} cannot be checked")
    for sub in schema.get("$defs", {}).values():
        _check_keywords(sub)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for sub in schema.get(key, []):
            _check_keywords(sub)
    for sub in schema.get("properties", {}).values():
        _check_keywords(sub)
    for key in ("items", "additionalProperties"):
        if key in schema:
            _check_keywords(schema[key])


def problem(value: Any, schema: dict[str, Any] | None) -> str | None:
    """Why ``value`` does not match ``schema`` (``$.path: what``), or None if it does."""
    if schema is None:
        return None
    try:
        _Checker(schema).check(value, schema, "$")
    except SchemaProblem as exc:
        return str(exc)
    return None


class _Checker:
    """Walks a value and a schema together; the first mismatch raises, with its path."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = root.get("$defs", {})

    def check(self, value: Any, schema: Any, path: str) -> None:
        if schema is True:
            return
        if schema is False:
            raise SchemaProblem(f"{path}: no value is allowed here")
        if "$ref" in schema:
            self.check(value, self._resolve(schema["$ref"]), path)
        if "type" in schema:
            self._type(value, schema["type"], path)
        if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
            raise SchemaProblem(f"{path}: {_show(value)} is not one of "
                                f"{', '.join(_show(v) for v in schema['enum'])}")
        if "const" in schema and not _same(value, schema["const"]):
            raise SchemaProblem(f"{path}: {_show(value)} is not {_show(schema['const'])}")
        self._combinators(value, schema, path)
        if isinstance(value, str):
            self._string(value, schema, path)
        elif _is_number(value):
            self._number(value, schema, path)
        elif isinstance(value, list):
            self._array(value, schema, path)
        elif isinstance(value, dict):
            self._object(value, schema, path)

    def _resolve(self, ref: str) -> Any:
        name = ref.removeprefix("#/$defs/")
        if name == ref or name not in self.defs:
            raise SchemaProblem(f"the schema refers to {ref!r}, which it does not define")
        return self.defs[name]

    def _type(self, value: Any, want: str | list[str], path: str) -> None:
        wanted = [want] if isinstance(want, str) else want
        if not any(_is_type(value, t) for t in wanted):
            raise SchemaProblem(f"{path}: expected {' or '.join(wanted)}, got {_kind(value)} "
                                f"{_show(value)}")

    def _combinators(self, value: Any, schema: dict[str, Any], path: str) -> None:
        for sub in schema.get("allOf", []):
            self.check(value, sub, path)
        for key in ("anyOf", "oneOf"):
            if key not in schema:
                continue
            why = []
            for sub in schema[key]:
                try:
                    self.check(value, sub, path)
                    break
                except SchemaProblem as exc:
                    text = str(exc).removeprefix(f"{path}: ")
                    if text not in why:  # forms that fail alike are said once
                        why.append(text)
            else:
                raise SchemaProblem(f"{path}: matches none of the allowed forms ("
                                    + "; ".join(why) + ")")

    def _string(self, value: str, schema: dict[str, Any], path: str) -> None:
        kind = _FORMATS.get(schema.get("format") or schema.get("contentEncoding", ""))
        if kind is not None:
            try:
                msgspec.convert(value, kind)
            except msgspec.ValidationError as exc:
                raise SchemaProblem(f"{path}: {_show(value)} is not a valid "
                                    f"{kind.__name__}: {exc}") from None
        if len(value) < schema.get("minLength", 0):
            raise SchemaProblem(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise SchemaProblem(f"{path}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise SchemaProblem(f"{path}: {_show(value)} does not match the pattern "
                                f"{schema['pattern']!r}")

    def _number(self, value: float, schema: dict[str, Any], path: str) -> None:
        bounds = (("minimum", lambda b: value >= b, ">="), ("maximum", lambda b: value <= b, "<="),
                  ("exclusiveMinimum", lambda b: value > b, ">"),
                  ("exclusiveMaximum", lambda b: value < b, "<"))
        for key, ok, sign in bounds:
            if key in schema and not ok(schema[key]):
                raise SchemaProblem(f"{path}: {value} is not {sign} {schema[key]}")
        step = schema.get("multipleOf")
        if step is not None and not _multiple(value, step):
            raise SchemaProblem(f"{path}: {value} is not a multiple of {step}")

    def _array(self, value: list[Any], schema: dict[str, Any], path: str) -> None:
        if len(value) < schema.get("minItems", 0):
            raise SchemaProblem(f"{path}: {len(value)} items, fewer than {schema['minItems']}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaProblem(f"{path}: {len(value)} items, more than {schema['maxItems']}")
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items", True)
            self.check(item, sub, f"{path}[{i}]")
        if schema.get("uniqueItems"):
            for i, item in enumerate(value):
                if any(_same(item, other) for other in value[:i]):
                    raise SchemaProblem(f"{path}[{i}]: {_show(item)} appears twice")

    def _object(self, value: dict[str, Any], schema: dict[str, Any], path: str) -> None:
        for name in schema.get("required", []):
            if name not in value:
                raise SchemaProblem(f"{path}: the field {name!r} is required")
        if len(value) < schema.get("minProperties", 0):
            raise SchemaProblem(f"{path}: fewer than {schema['minProperties']} fields")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            raise SchemaProblem(f"{path}: more than {schema['maxProperties']} fields")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            where = f"{path}.{name}"
            if name in props:
                self.check(item, props[name], where)
            elif extra is False:
                raise SchemaProblem(f"{path}: unknown field {name!r} (allowed: "
                                    f"{', '.join(props) or 'none'})")
            else:
                self.check(item, extra, where)


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":  # as msgspec converts: 1.0 is a number, not an integer
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return _is_number(value)
    py = _JSON_TYPES.get(name)
    if py is None:
        raise SchemaProblem(f"unknown JSON type {name!r} in the schema")
    return isinstance(value, py)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (
        not isinstance(value, float) or math.isfinite(value))


def _multiple(value: float, step: float) -> bool:
    quotient = value / step
    return math.isclose(quotient, round(quotient), rel_tol=1e-9, abs_tol=1e-9)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b) and (_is_number(a) == _is_number(b))


def _kind(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_type(value, name):
            return name
    return type(value).__name__


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= limit else text[: limit - 1] + "…"


def example(schema: dict[str, Any] | None) -> Any:
    """A value of the schema's shape to copy and fill in (a request file's answer file)."""
    if schema is None:
        return "VALUE"
    return _Example(schema.get("$defs", {})).of(schema, depth=0)


class _Example:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def of(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict) or depth > 8:
            return None
        if "$ref" in schema:
            return self.of(self.defs.get(schema["$ref"].removeprefix("#/$defs/")), depth + 1)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self.of(schema[key][0], depth + 1)
        want = schema.get("type")
        kind = want[0] if isinstance(want, list) and want else want
        if kind == "object":
            props = schema.get("properties", {})
            return {k: self.of(props[k], depth + 1) for k in schema.get("required", [])
                    if k in props}
        if kind == "array":
            return [self.of(s, depth + 1) for s in schema.get("prefixItems", [])]
        if kind == "string" and schema.get("format") in _FORMAT_EXAMPLES:
            return _FORMAT_EXAMPLES[schema["format"]]
        return {"string": "TEXT", "integer": 0, "number": 0.0, "boolean": False}.get(
            kind or "", None)


_FORMAT_EXAMPLES = {"date": "2026-01-31", "duration": "PT1H", "decimal": "0.00",
                    "uuid": "00000000-0000-0000-0000-000000000000"}
