"""``bide --help`` is the map: every command once, under what a person does with it."""

from __future__ import annotations

from bide.cli import COMMAND_MAP, main
from click.testing import CliRunner


def test_every_command_is_on_the_map_once() -> None:
    mapped = [name for _, rows in COMMAND_MAP for name, _ in rows]
    assert sorted(mapped) == sorted(set(mapped)), "a command is on the map twice"
    assert set(mapped) == set(main.commands), (set(main.commands) ^ set(mapped))


def test_the_help_groups_commands_by_what_one_does() -> None:
    result = CliRunner().invoke(main, ["--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    titles = [line for line in result.output.splitlines() if line.endswith(" commands:")]
    assert titles == [f"{t} commands:" for t in ("Run", "Decide", "Inspect", "Operate", "Serve",
                                                 "Measure")]
    assert "Other commands:" not in result.output
    for _, rows in COMMAND_MAP:
        for name, summary in rows:
            lines = result.output.splitlines()
            line = next(ln for ln in lines if ln.strip().startswith(name + " "))
            assert summary in line, line  # one line each, at a common width
