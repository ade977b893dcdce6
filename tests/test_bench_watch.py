"""``bide bench watch``: its rows, and the targets it states met or not."""

from __future__ import annotations

import pytest
from bide.bench import watch as watching
from bide.bench.command import bench
from click.testing import CliRunner


def test_a_rescan_reads_only_runs_not_finished_and_the_rows_say_so(tmp_path):
    watching.finished_home(tmp_path / "home", 3000, batch=1000)
    scans = watching.rescan_ms(tmp_path / "home", repeat=3)
    assert scans["rescan_ms"] * 20 < scans["full_scan_ms"]  # O(unfinished) vs O(all)


def test_targets_are_stated_met_or_not_for_the_default_watcher_only():
    out = {"latency": [{"workers": 1, "burst": 200, "burst_p50_ms": 400.0,
                        "burst_last_ms": 900.0, "single_p50_ms": 9.0, "single_max_ms": 12.0},
                       {"workers": 4, "burst": 200, "burst_p50_ms": 120.0,
                        "burst_last_ms": 310.0, "single_p50_ms": 9.0, "single_max_ms": 12.0}],
           "while_busy": [{"busy_runs": 4, "node_s": 3.0, "workers": 8,
                           "decision_to_running_ms": 20.0, "busy_still_running": 4}],
           "idle": [{"finished_runs": 100000, "idle_cpu_pct": 0.6, "rescan_ms": 0.01,
                     "full_scan_ms": 300.0, "full_scan_cpu_pct": 30.0}]}
    got = {t["name"]: t["met"] for t in watching.targets(out)}
    assert got == {"burst p50, 200 files, 4 workers": True,
                   "burst last, 200 files, 4 workers": False,
                   "burst last, 200 files, 4 workers, against 1 worker's": True,
                   "a decision for an idle run while others are busy": True,
                   "idle CPU over 100000 finished runs": False}
    text = watching.render(out)
    assert "NOT met: burst last, 200 files, 4 workers <= 300 ms (measured 310.0)" in text
    assert "bound:" not in text  # a row without the watcher's CPU gets no bound line
    out["latency"][1]["overlap_after"] = 0.0  # all at once: a row to compare, no target
    assert not any("4 workers" in t["name"] for t in watching.targets(out))
    out["latency"][0]["burst_last_ms"] = 250.0
    out["latency"][1]["overlap_after"] = None
    assert {t["name"]: t["met"] for t in watching.targets(out)}[
        "burst last, 200 files, 4 workers, against 1 worker's"] is False


def test_a_missed_burst_target_prints_the_cpu_bound_that_stops_it():
    row = {"workers": 4, "burst": 200, "burst_p50_ms": 200.0, "burst_last_ms": 410.0,
           "single_p50_ms": 9.0, "single_max_ms": 12.0, "burst_cpu_ms": 440.0}
    text = watching.render({"latency": [row], "while_busy": [], "idle": []})
    assert "bound: the watcher spent 440 ms of CPU on the burst (2.20 ms a decision" in text
    assert text.count("bound:") == 2  # under both missed targets, p50 and last


@pytest.mark.slow
def test_bench_watch_quick_runs_every_row(tmp_path):
    out = tmp_path / "watch.json"
    result = CliRunner().invoke(bench, ["watch", "--quick", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Idle watcher over finished runs" in result.output and out.exists()
