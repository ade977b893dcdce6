"""Tables stay aligned when cells hold wide characters (CJK, emoji) or combining marks."""

from __future__ import annotations

import pytest
from bide.engine.base.render import clip, display_width, fields, table


@pytest.mark.parametrize(("text", "columns"), [
    ("abc", 3), ("日本語", 6), ("🚀", 2), ("e\u0301", 1), ("a\u200db", 2), ("", 0),
])
def test_display_width(text: str, columns: int) -> None:
    assert display_width(text) == columns


def test_columns_line_up_with_wide_cells() -> None:
    text = table(["NAME", "NOTE", "N>"], [["日本語の名前", "ok", 1], ["plain", "🚀🚀 launch", 22],
                                         ["cafe\u0301", "x", 333]])
    lines = text.splitlines()
    # every column starts at the same terminal column on every line
    shown = [["NAME", "NOTE", "N"], ["日本語の名前", "ok", "1"], ["plain", "🚀🚀", "22"],
             ["cafe\u0301", "x", "333"]]
    starts = [[display_width(line[:line.index(cell)]) for cell in cells]
              for line, cells in zip(lines, shown, strict=True)]
    assert all(s[1] == starts[0][1] for s in starts), text
    assert {display_width(line) for line in lines} == {display_width(lines[0])}, text


def test_wide_text_is_cut_by_columns_and_fits() -> None:
    assert clip("日本語テキスト", 5) == "日本…"
    assert display_width(clip("日本語テキスト", 6)) <= 6
    text = table(["ID", "WHAT~"], [["r-1", "説明" * 80]], width=40)
    assert max(display_width(line) for line in text.splitlines()) <= 40


def test_fields_align_wide_names() -> None:
    text = fields([("名前", 1), ("run", 2)])
    assert [display_width(line.split(" ")[0]) for line in text.splitlines()] == [5, 4]
    assert [display_width(line[:line.rindex(" ")]) for line in text.splitlines()] == [5, 5]
