"""Text for people: aligned tables, relative ages, byte sizes, short previews.

Pure functions of their arguments (time is passed in as ``now``), so the CLI's
human output is testable without a store.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import os
import unicodedata
import uuid
from collections.abc import Sequence
from typing import Any

WIDTH = 100
ELLIPSIS = "…"


def size(n: int | float) -> str:
    """``512 B``, ``1.5 KiB``, ``12.0 MiB``, ``2.00 GiB``."""
    n = float(n)
    if abs(n) < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB"):
        n /= 1024
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.2f} GiB"


def plural(n: int, word: str) -> str:
    """``1 run``, ``3 runs``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def ago(ts: float | None, now: float) -> str:
    """How long before ``now`` ``ts`` was: ``just now``, ``42s ago``, ``3m ago``, ``in 5m``."""
    if not ts:
        return "-"
    delta = now - ts
    if abs(delta) < 1:
        return "just now"
    text = span(abs(delta))
    return f"{text} ago" if delta > 0 else f"in {text}"


def due_text(until: float | None, now: float) -> str:
    """When a timer falls due, absolute and relative: ``until 2026-12-01T05:30:00+00:00
    (in 3s)``, or ``(overdue 2m)`` once it has passed and nobody resumed the run yet."""
    if until is None:
        return "-"
    when = datetime.datetime.fromtimestamp(until).astimezone().isoformat(timespec="seconds")
    delta = until - now
    if delta <= 0:
        return f"until {when} (overdue {span(-delta)})"
    return f"until {when} (in {span(delta)})"


def expiry_text(expires_at: float | None, now: float) -> str:
    """When a request expires, absolute and relative: ``2026-12-01T05:30:00+00:00 (in 5m)``;
    ``... (EXPIRED 2m ago)`` once past (a decision for it is refused); ``never``."""
    if expires_at is None:
        return "never"
    when = datetime.datetime.fromtimestamp(expires_at).astimezone().isoformat(timespec="seconds")
    if expires_at <= now:
        return f"{when} (EXPIRED {span(now - expires_at)} ago)"
    return f"{when} (in {span(expires_at - now)})"


def span(seconds: float) -> str:
    """A duration in its largest sensible unit: ``42s``, ``3m``, ``5h``, ``2d``."""
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{int(seconds // length)}{unit}"
    return f"{int(seconds)}s"


def parse_age(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` → seconds.

    Raises:
        ValueError: not a number with an optional unit.
    """
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    factor = units.get(text[-1:], None)
    number = text[:-1] if factor else text
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not an age like 90s, 15m, 12h, 7d or 2w") from None
    if value < 0:
        raise ValueError(f"an age cannot be negative: {text!r}")
    return value * (factor or 1)


def preview(value: Any, limit: int = 60) -> str:
    """A one-line JSON-ish view of a value, cut at ``limit`` characters."""
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
        except (TypeError, ValueError):
            text = repr(value)
    return clip(text.replace("\n", " "), limit)


def clip(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` terminal columns (see ``width``), marking the cut."""
    if limit <= 0:
        return ""
    if display_width(text) <= limit:
        return text
    kept, used = [], 0
    for char in text:
        used += _char_width(char)
        if used > limit - 1:  # one column for the ellipsis
            break
        kept.append(char)
    return "".join(kept) + ELLIPSIS


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: 2 for wide and full-width characters (CJK, most
    emoji), 0 for combining marks, joiners and variation selectors, else 1. ``len`` counts
    code points, which misaligns a table as soon as a cell holds ``日本`` or ``🚀``."""
    if text.isascii():
        return len(text)
    return sum(_char_width(c) for c in text)


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0  # accents, U+FE0F (emoji presentation), U+200D (joiner)
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _pad(text: str, columns: int, *, right: bool) -> str:
    """``text`` padded with spaces to ``columns`` terminal columns (``str.ljust`` by width)."""
    fill = " " * max(columns - display_width(text), 0)
    return fill + text if right else text + fill


def first_line(text: str | None, limit: int = 80) -> str:
    """The last non-empty line of a traceback (the error itself), or the first line of text."""
    if not text:
        return ""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[-1] if text.startswith("Traceback") else lines[0]
    return clip(line, limit)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int = WIDTH) -> str:
    """Columns aligned on two spaces, cut (with ``…``) until the table fits ``width``.

    A header ending in ``>`` right-aligns its column; one ending in ``~`` marks a
    column of free text that is cut first (the markers are not printed). Then the
    widest column is cut, never below its header or 8 characters.
    """
    right = [h.endswith(">") for h in headers]
    loose = [h.endswith("~") for h in headers]
    names = [h.rstrip(">~") for h in headers]
    cells = [[str(c) if c is not None else "-" for c in row] for row in rows]
    widths = [max([display_width(n)] + [display_width(r[i]) for r in cells])
              for i, n in enumerate(names)]
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    for first in (True, False):
        while excess > 0:
            cuttable = [i for i in range(len(widths)) if (loose[i] or not first)
                        and widths[i] > max(len(names[i]), 8)]
            if not cuttable:
                break
            i = max(cuttable, key=lambda k: widths[k])
            cut = min(excess, widths[i] - max(len(names[i]), 8))
            widths[i] -= cut
            excess -= cut
    lines = []
    for row in [names, *cells]:
        parts = []
        for i, cell in enumerate(row):
            parts.append(_pad(clip(cell, widths[i]), widths[i], right=right[i]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """``name: value`` lines with the values aligned; a multi-line value stays indented."""
    pad = max((display_width(k) for k, _ in pairs), default=0) + 1
    indent = "\n" + " " * (pad + 1)
    return "\n".join(_pad(k + ":", pad, right=False) + " "
                     + ("-" if v is None else str(v)).replace("\n", indent) for k, v in pairs)


def to_json(value: Any, *, indent: int | None = 2) -> str:
    """JSON for ``--json`` output: stable key order as given, non-ASCII kept.

    Strict JSON, always: a float that is not finite (which ``json.dumps`` would
    print as a bare ``NaN``/``Infinity`` that strict parsers refuse) becomes the
    string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, in values and keys alike.
    """
    return json.dumps(_finite(value), indent=indent, ensure_ascii=False, allow_nan=False,
                      default=_fallback)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its name (see ``to_json``)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {_key(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _key(key: Any) -> Any:
    """A dict key JSON can hold: tuple and bytes keys (kept state types) become text."""
    if isinstance(key, tuple):
        return json.dumps(_finite(key), ensure_ascii=False, allow_nan=False, default=_fallback)
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).hex()
    return _finite(key)


def _fallback(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset)):
        return _finite(list(value))
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID, datetime.timedelta)):
        return str(value)
    return repr(value)
