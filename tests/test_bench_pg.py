"""``bide bench peers`` on PostgreSQL: the rows run on a real server and say what they measured.

Everything runs on the session's throwaway server (``tests/pg_cluster.py``) at
tiny sizes; a peer that is not installed (LangGraph's PostgresSaver, DBOS) is
skipped by the bench with the pip command, and the test checks that instead.
"""

from __future__ import annotations

import json

import bide
import pytest
from bide.bench import pg_throughput, suite, tool_calls
from bide.bench import postgres as pg_peers
from bide.bench.command import bench
from bide.bench.kit.pg_databases import Databases
from bide.engine.base.vocabulary import Status
from bide.engine.run import held
from click.testing import CliRunner
from extras import need

psycopg = need("psycopg")
K = 4


@pytest.fixture
def dbs(pg_cluster):
    made = Databases(pg_cluster.url(), "the test server")
    yield made
    made.drop_all()


def _databases(pg_cluster) -> set[str]:
    with psycopg.connect(pg_cluster.url(), connect_timeout=10) as conn:
        return {name for (name,) in conn.execute("SELECT datname FROM pg_database")}


def test_every_system_runs_the_same_steps_in_a_database_of_its_own(dbs, pg_cluster, tmp_path,
                                                                  monkeypatch):
    # a loaded machine may hold a step past 2 ms (its outcome then commits alone): not here
    monkeypatch.setattr(held, "HOLD_BOUND", 60.0)
    before = _databases(pg_cluster)
    out = pg_peers.run(dbs, True, directory=str(tmp_path), k=K, repeat=1)
    rows = {r["system"]: r for r in out["rows"]}
    bide_pg = rows[pg_peers.BASE]
    assert {pg_peers.BASE, "bide postgres fast", "bide lmdb durable"} <= rows.keys()
    # a tool step's records hold its 100 B of arguments and its 100 B result at least,
    # and every byte of a row reached the WAL first
    assert bide_pg["row_bytes_per_step"] > tool_calls.ARG + tool_calls.RESULT
    assert bide_pg["record_bytes_per_step"] > tool_calls.ARG + tool_calls.RESULT
    assert bide_pg["wal_bytes_per_step"] > bide_pg["row_bytes_per_step"]
    # two commits per tool step (its prepare, carrying the previous step's checkpoint, and
    # its outcome, durable at return), plus the run's first and last: 2 + 2/K as on LMDB
    # (test_bench_tool_calls)
    assert bide_pg["commits_per_step"] == pytest.approx(2 + 2 / K)
    # tables grow by whole 8 KB pages: at K = 4 they may not grow at all (no ratio then)
    assert all(bide_pg[f"x_{key}"] == (1.0 if bide_pg[key] else None) for key in pg_peers.RATIOS)
    assert rows["bide lmdb durable"]["wal_bytes_per_step"] is None  # LMDB has no WAL
    for peer, skip in ((pg_peers.LANGGRAPH, pg_peers.langgraph_skip()),
                       (pg_peers.DBOS, tool_calls.dbos_skip())):
        if skip:
            assert peer not in rows and skip in out["skipped"] and "pip install" in skip
        else:
            assert rows[peer]["steps"] == K and rows[peer]["wal_bytes_per_step"] > 0
            assert rows[peer]["x_wal_bytes_per_step"] == pytest.approx(
                rows[peer]["wal_bytes_per_step"] / bide_pg["wal_bytes_per_step"])
    assert out["server"]["fsync"] == "on" and out["server"]["synchronous_commit"] == "on"
    text = pg_peers.render(out)
    assert pg_peers.BASE in text and "WAL B" in text
    dbs.drop_all()
    assert _databases(pg_cluster) == before  # every database the bench made is gone


def test_worker_processes_finish_every_run_once_on_one_home(dbs, tmp_path):
    url = dbs.fresh("workers")
    case = pg_throughput.workers_case(url, 4, runs=6, steps=3)
    assert case["supersteps"] == 18 and case["steps_per_s"] > 0
    assert case["commits"] >= 6 * 3  # at least a commit per superstep, counted by the workers
    with bide.open(url, local=tmp_path / "local") as engine:
        rows = engine.run_rows()
        assert engine.doctor().ok
    done = sorted(r["run_id"] for r in rows if r["status"] == Status.DONE)
    # 4 warm-up runs, and the 6 runs split 2/2/1/1 among the workers
    assert len(rows) == len(done) == 10
    assert [r for r in done if "warmup" not in r] == ["w0-0", "w0-1", "w1-0", "w1-1", "w2-0",
                                                      "w3-0"]


def test_targets_follow_the_numbers() -> None:
    def row(system: str, ms: float, table: float, wal: float) -> dict:
        return {"system": system, "durable_ms_per_step": ms, "table_bytes_per_step": table,
                "wal_bytes_per_step": wal}

    met = pg_peers.targets([row(pg_peers.BASE, 1.0, 500, 900), row(pg_peers.LANGGRAPH, 2.0, 900,
                                                                   1000),
                            row(pg_peers.DBOS, 1.5, 600, 1000)])
    assert [t["met"] for t in met] == [True, True, True, True]
    missed = pg_peers.targets([row(pg_peers.BASE, 3.0, 700, 4000),
                               row(pg_peers.LANGGRAPH, 2.0, 900, 3000),
                               row(pg_peers.DBOS, 2.5, 600, 900)])
    assert [t["met"] for t in missed] == [False, False, False, False]
    alone = pg_peers.targets([row(pg_peers.BASE, 1.0, 500, 900)])
    assert [t["met"] for t in alone] == [None, None, None, None]  # not measured, not met
    scaled = pg_throughput.targets([{"workers": n, "steps_per_s": 100.0 * r, "ratio": r}
                                    for n, r in ((1, 1.0), (2, 1.9), (4, 2.5))])
    flat = pg_throughput.targets([{"workers": n, "steps_per_s": 100.0, "ratio": 1.0}
                                  for n in (1, 2, 4)])
    assert [t["met"] for t in scaled + flat] == [True, False]


def test_pg_options_are_checked() -> None:
    both = CliRunner().invoke(bench, ["peers", "--pg", "postgresql://x@/y", "--no-pg"])
    assert both.exit_code == 2 and "exclude each other" in both.output
    bad = CliRunner().invoke(bench, ["peers", "--pg", "/tmp/not-a-url"])
    assert bad.exit_code == 2 and "not a postgresql:// URL" in bad.output


def test_peers_and_all_include_postgres_unless_told_not_to(pg_cluster) -> None:
    url = pg_cluster.url()
    assert suite.Plan("peers", True, pg=url).does_postgres
    assert suite.Plan("all", True, pg=url).does_postgres
    assert not suite.Plan("peers", True, no_pg=True).does_postgres
    assert not suite.Plan("granularity", True, pg=url).does_postgres
    alone = suite.Plan("postgres", True, pg=url)
    assert alone.units == 2 and not alone.does_tool_calls and not alone.does_peers


@pytest.mark.slow
def test_bench_postgres_on_a_given_server_reports_its_rows(pg_cluster, tmp_path):
    out = tmp_path / "pg.json"
    result = CliRunner().invoke(bench, ["postgres", "--quick", "--pg", pg_cluster.url(),
                                        "--json", str(out)])
    assert result.exit_code == 0, result.output
    got = json.loads(out.read_text())
    assert [r["workers"] for r in got["pg_throughput"]["rows"]] == [1, 2, 4]
    assert got["pg_throughput"]["rows"][0]["ratio"] == 1.0
    assert got["postgres"]["rows"][0]["system"] == pg_peers.BASE
    names = [t["target"] for t in got["targets"]]
    # only the PostgreSQL targets: the LMDB ones were not measured by this WHAT
    assert len(names) == 5 and all("PostgreSQL" in n for n in names)
    assert "On PostgreSQL" in result.output and "Worker processes" in result.output
