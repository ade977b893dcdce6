"""``bide bench timers`` (issue 16.1): an idle watcher resumes sleeping runs at their due
time, not at its next rescan. The bound is a ratio to the rescan the watcher would
otherwise have waited for (30 s), never an absolute time; the bench prints the numbers.
"""

from __future__ import annotations

import pytest
from bide.bench import timers
from bide.cli import main
from click.testing import CliRunner
from extras import need


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_timers_are_served_at_their_due_time_not_at_a_rescan(kind, request, tmp_path):
    if kind == "postgres":
        need("psycopg")
        out = timers.measure(request.getfixturevalue("pg_url"), 8, local=tmp_path / "local")
    else:
        out = timers.measure(tmp_path / "home", 8)
    print(kind, timers.render({kind: out}))
    assert out["n"] == 8 and min(out["late"]) >= 0  # never before the due time
    assert out["max"] < out["rescan"] / 20, out  # 1.5 s: a rescan would be up to 30 s
    assert out["p50"] < out["rescan"] / 200, out  # 150 ms: whole-second wake-ups miss it


def test_bide_bench_timers_prints_its_table(tmp_path):
    result = CliRunner().invoke(main, ["bench", "timers", "--quick", "--home", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "lmdb      n=10  p50" in result.output and "(its rescan: 30 s)" in result.output
