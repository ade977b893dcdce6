"""``bide bench map``: the map workload's rows are produced, against a chain in the same run."""

from __future__ import annotations

import json

from bide.bench.command import bench
from click.testing import CliRunner


def test_bench_map_quick_prints_each_row_with_its_ratios(tmp_path):
    out = tmp_path / "map.json"
    result = CliRunner().invoke(bench, ["map", "--quick", "--json", str(out),
                                        "--home", str(tmp_path / "homes")])
    assert result.exit_code == 0, result.output
    assert "Map of N items (bide.Send, 8 at once) against a chain of N steps" in result.output
    rows = json.loads(out.read_text())["rows"]
    assert [(r["items"], r["durability"]) for r in rows] == [(20, "durable"), (20, "fast"),
                                                             (20, "durable")]
    for r in rows:
        assert r["map"]["bytes_per_item"] > 0 and r["chain"]["bytes_per_item"] > 0
        assert r["time_ratio"] > 0 and r["bytes_ratio"] > 0
        assert r["bytes_ratio"] < 2  # each item's output is stored once, as in a chain
    assert "that each pause once for an approval" in result.output
    small, big = json.loads(out.read_text())["paused"]
    assert (small["items"], big["items"]) == (20, 60) and big["resumes"] == 60
    # flat per item (seen 975 -> 956 B): the pauses refer to the planned Sends
    # (each re-storing them all: 1177 -> 1558 B, 1.32x)
    assert big["bytes_per_item"] < 1.15 * small["bytes_per_item"], (small, big)
    # each item's body runs twice (it pauses, then is approved), whatever N: a resume
    # runs the approved item alone (before, all still paused: 11.5 and 31.5 runs per item)
    assert small["runs_per_item"] == big["runs_per_item"] == 2.0, (small, big)
