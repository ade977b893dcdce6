"""``bide bench pg-wake``: its latency row on the test server, its targets and its text."""

from __future__ import annotations

from bide.bench.command import bench
from click.testing import CliRunner
from extras import need

need("psycopg")
from bide.bench import pg_wake  # noqa: E402


def test_decisions_from_this_process_are_timed_to_the_watchers_resume(tmp_path, pg_url):
    row = pg_wake.decision_latency(tmp_path, pg_url, decisions=3)
    assert row["decisions"] == 3 and 0 < row["p50_ms"] <= row["max_ms"]


def test_targets_and_text_say_what_was_met():
    out = {"pg": [{"decisions": 20, "p50_ms": 14.0, "max_ms": 60.0}],
           "lmdb": [{"drops": 20, "p50_ms": 9.0, "max_ms": 30.0}],
           "idle": [{"finished_runs": 1000, "rescan": "default (30)", "seconds": 41.0,
                     "xacts_per_s": 0.5, "idle_cpu_pct": 0.0},
                    {"finished_runs": 1000, "rescan": "1", "seconds": 41.0,
                     "xacts_per_s": 2.0, "idle_cpu_pct": 0.2}]}
    assert {t["name"]: t["met"] for t in pg_wake.targets(out)} == {
        "a decision from another process, p50": True,
        "idle server load, 1000 finished runs": False}
    text = pg_wake.render(out)
    assert "PostgreSQL, decide() + NOTIFY" in text and "LMDB, a file renamed" in text
    assert "NOT met: idle server load, 1000 finished runs" in text


def test_without_a_server_url_the_command_says_what_it_needs(monkeypatch):
    monkeypatch.delenv("BIDE_BENCH_PG", raising=False)
    result = CliRunner().invoke(bench, ["pg-wake", "--quick"])
    assert result.exit_code == 2 and "BIDE_BENCH_PG" in result.output
