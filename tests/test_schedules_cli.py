"""``bide schedule``, ``bide schedules`` and ``bide unschedule`` through click's CliRunner:
what they print, their exit codes (2 for a bad spec, 3 for an unknown schedule), and
that what they record is what the engine reads."""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

import bide
import pytest
from bide.cli import main
from click.testing import CliRunner, Result
from conftest import APPS

sys.path.insert(0, str(APPS))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    bide.open(tmp_path / "h").close()
    return tmp_path / "h"


def cli(home: Path, *argv: str) -> Result:
    return CliRunner().invoke(main, [*argv, "--home", str(home)], catch_exceptions=False)


def test_schedule_list_and_unschedule(home):
    made = cli(home, "schedule", "beat", "tick", "--every", "5", "--input", '{"n": 2}')
    assert made.exit_code == 0, made.output
    assert made.stdout.startswith("schedule beat: tick every 5s, next ")
    assert "(in " in made.stdout
    cron = cli(home, "schedule", "nightly", "tick", "--cron", "0 3 * * *", "--tz", "UTC",
               "--catch-up", "--app", "schedule_app:flow", "--json")
    assert cron.exit_code == 0, cron.output
    assert json.loads(cron.stdout)["spec"] == "0 3 * * * (UTC)"
    table = cli(home, "schedules")
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["name", "flow", "spec", "next", "last", "run"]
    assert lines[1].startswith("beat") and "every 5s" in lines[1] and "(in " in lines[1]
    assert "0 3 * * * (UTC) +catch-up" in lines[2]
    rows = json.loads(cli(home, "schedules", "--json").stdout)
    assert [(r["name"], r["input"], r["catch_up"]) for r in rows] == [
        ("beat", {"n": 2}, False), ("nightly", {}, True)]
    next_due = datetime.datetime.fromisoformat(rows[0]["next_due"])  # ISO-8601, UTC offset
    assert next_due.utcoffset() == datetime.timedelta(0)
    assert next_due.timestamp() % 5 == 0 and next_due.timestamp() > time.time() - 5
    assert cli(home, "unschedule", "beat").stdout == "schedule beat removed\n"
    gone = cli(home, "unschedule", "beat")
    assert gone.exit_code == 3 and "no schedule named 'beat'" in gone.stderr
    with bide.open(home) as eng:
        assert [s.name for s in eng.schedules()] == ["nightly"]


@pytest.mark.parametrize("argv, says", [
    (["--cron", "61 * * * *"], "bad cron expression '61 * * * *'"),
    ([], "give exactly one of every="),
    (["--every", "5", "--cron", "* * * * *"], "give exactly one of every="),
    (["--every", "0"], "0 is not in the range x>=1"),
    (["--cron", "* * * * *", "--tz", "Nowhere/X"], "unknown time zone 'Nowhere/X'"),
    (["--every", "5", "--input", "[1]"], "must be a JSON object"),
    (["--every", "5", "--input", "{"], "not JSON"),
])
def test_a_bad_spec_is_a_usage_error_and_records_nothing(home, argv, says):
    result = cli(home, "schedule", "x", "tick", *argv)
    assert result.exit_code == 2 and says in result.stderr, result.output
    assert json.loads(cli(home, "schedules", "--json").stdout) == []


def test_app_checks_the_flow(home):
    result = cli(home, "schedule", "x", "nope", "--every", "5", "--app", "schedule_app:flow")
    assert result.exit_code == 3 and "unknown flow 'nope'" in result.stderr  # not found
    assert cli(home, "schedules").stdout == "no schedules\n"
