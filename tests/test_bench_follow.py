"""``bide bench follow``: its rows, and the 50 ms target stated met or not."""

from __future__ import annotations

import pytest
from bide.bench import follow as following
from bide.bench.command import bench
from click.testing import CliRunner


def test_the_target_is_stated_met_or_not_per_store():
    out = {"latency": [{"store": "lmdb", "commits": 99, "gap_ms": 20.0, "p50_ms": 1.3,
                        "max_ms": 4.0, "events": 300},
                       {"store": "postgres", "commits": 99, "gap_ms": 20.0, "p50_ms": 51.0,
                        "max_ms": 90.0, "events": 300}],
           "idle": [{"store": "lmdb", "seconds": 5.0, "cpu_ms": 0.0, "idle_cpu_pct": 0.0}]}
    out["targets"] = following.targets(out)
    assert [t["met"] for t in out["targets"]] == [True, False]
    text = following.render(out)
    assert "NOT met: commit -> follow p50, postgres <= 50.0 ms (measured 51.0)" in text
    assert "Idle follower" in text


@pytest.mark.slow
def test_bench_follow_quick_runs_every_row(tmp_path):
    out = tmp_path / "follow.json"
    result = CliRunner().invoke(bench, ["follow", "--quick", "--no-pg", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Commit in process A -> event in process B's follow" in result.output
    assert "commit -> follow p50, lmdb" in result.output and out.exists()
