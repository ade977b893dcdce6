"""The CLI's text helpers: sizes, ages, tables that fit, JSON that always prints."""

from __future__ import annotations

import json

import pytest
from bide.engine.base.render import (
    ago,
    fields,
    first_line,
    parse_age,
    preview,
    size,
    table,
    to_json,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (5 << 20, "5.0 MiB"), (3 << 30, "3.00 GiB"),
])
def test_size(n: int, text: str) -> None:
    assert size(n) == text


@pytest.mark.parametrize(("delta", "text"), [
    (0.2, "just now"), (42, "42s ago"), (125, "2m ago"), (7200, "2h ago"),
    (3 * 86400, "3d ago"), (-300, "in 5m"),
])
def test_ago(delta: float, text: str) -> None:
    assert ago(1000.0 - delta, 1000.0) == text
    assert ago(None, 1000.0) == ago(0.0, 1000.0) == "-"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800), ("2w", 1209600),
    ("0.5h", 1800),
])
def test_parse_age(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-1d", "1y"])
def test_parse_age_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_age(text)


def test_table_aligns_and_cuts_free_text_first() -> None:
    rows = [["r-1", 12, "x" * 300], ["r-22", 3, "short"]]
    text = table(["RUN", "N>", "NOTE~"], rows, width=40)
    lines = text.splitlines()
    assert lines[0].startswith("RUN    N  NOTE")
    assert lines[1].startswith("r-1   12  ") and lines[1].endswith("…")
    assert all(len(line) <= 40 for line in lines)
    assert lines[2].split() == ["r-22", "3", "short"]


@given(st.lists(st.lists(st.text(max_size=80), min_size=3, max_size=3), max_size=6))
def test_tables_fit_100_columns(rows: list[list[str]]) -> None:
    rows = [[c.replace("\n", " ").replace("\r", " ") for c in row] for row in rows]
    text = table(["A", "BB~", "CCC"], rows)
    assert all(len(line) <= 100 for line in text.split("\n"))


def test_fields_and_previews() -> None:
    assert fields([("a", 1), ("long name", None), ("multi", "x\ny")]) == \
        "a:         1\nlong name: -\nmulti:     x\n           y"
    assert preview({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert preview("x" * 100, 10) == '"xxxxxxxx…'
    assert first_line("Traceback (most recent call last):\n  ...\nValueError: bad\n") == \
        "ValueError: bad"
    assert json.loads(to_json({"b": b"\x01", "s": {1}})) == {"b": "01", "s": [1]}
