"""How a bench section prints its targets: one wording for met, not met and not measured."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_WORDS = {True: "met", False: "NOT met", None: "not measured"}


def verdict(met: bool | None) -> str:
    return _WORDS[met]


def target_line(t: dict[str, Any], *, detail: bool = False) -> str:
    """``  target (limit): measured -> verdict`` for a target dict of ``report._target``'s shape."""
    measured = "-" if t["measured"] is None else f"{t['measured']:.2f}"
    line = f"  {t['target']} ({t['limit']}): {measured} -> {verdict(t['met'])}"
    return line + (f" ({t['detail']})" if detail else "")


def named_lines(targets: Iterable[dict[str, Any]]) -> list[str]:
    """A ``Targets`` block for target dicts with ``name``/``limit``/``measured``/``met``; a
    target missed with a ``bound`` (what stops it) gets it on the next line."""
    lines = ["", "Targets"]
    for t in targets:
        lines.append(f"  {verdict(t['met'])}: {t['name']} {t['limit']} "
                     f"(measured {t['measured']})")
        if t.get("bound"):
            lines.append(f"    {t['bound']}")
    return lines
