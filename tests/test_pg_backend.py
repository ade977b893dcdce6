"""The engine on the PostgreSQL store: ``bide.open(url)``, the runtime suites, upkeep.

Every test runs against the real server of ``tests/pg_cluster.py``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import bide
import pytest
from bide.engine.base.errors import NotAHome
from bide.engine.upkeep import maintenance
from extras import need

need("psycopg")

TESTS = Path(__file__).parent
SUITES = ("test_runtime.py", "test_intents.py", "test_approvals.py")


def two_steps() -> bide.Flow:
    flow = bide.Flow("steps")

    @flow.node(start=True)
    def one(state, ctx):
        return {"n": 1}

    @flow.node(after=["one"])
    def two(state, ctx):
        return {"n": state["n"] + 1}

    return flow


def test_runtime_intent_and_approval_tests_pass_on_postgres(pg_cluster) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         "--store", "postgres", *(str(TESTS / s) for s in SUITES)],
        capture_output=True, text=True, timeout=600, cwd=TESTS.parent)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
    assert "skipped" not in out.stdout  # the inner session's server started too


def test_bide_open_with_a_url_runs_and_reopens(pg_url: str, tmp_path: Path) -> None:
    local = tmp_path / "local"
    with bide.open(pg_url, local=local) as eng:
        eng.register(two_steps())
        assert eng.start("steps", run_id="r1").state == {"n": 2}
        assert eng.store.home == pg_url and (local / "inbox").is_dir()
    with bide.open(pg_url, local=local, create=False) as eng:
        assert eng.get("r1").status == bide.Status.DONE
    assert not (local / "store").exists()  # the records are in the database only


def test_a_database_without_a_store_is_not_a_home_when_not_creating(pg_url: str,
                                                                     tmp_path: Path) -> None:
    with pytest.raises(NotAHome, match="no bide store"):
        bide.open(pg_url, local=tmp_path / "l", create=False)


def test_doctor_prune_and_stats_work_on_postgres(pg_url: str, tmp_path: Path) -> None:
    with bide.open(pg_url, local=tmp_path / "l", durability="fast") as eng:
        eng.register(two_steps())
        eng.start("steps", run_id="r", policy=bide.Policy(snapshot="full"))
        store = eng.store
        assert maintenance.doctor(store).ok
        assert maintenance.doctor(store, rebuild=True).ok
        before = maintenance.stats(store)["total_records"]
        pruned = maintenance.prune(store, keep=1)
        assert pruned.records > 0 and pruned.runs_trimmed == {"r": pruned.records}
        assert maintenance.stats(store)["total_records"] == before - pruned.records
        assert maintenance.doctor(store).ok
        assert eng.state("r") == {"n": 2}


def test_the_cli_reads_and_keeps_a_postgresql_home(pg_url: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from bide.cli import main
    from click.testing import CliRunner

    with bide.open(pg_url, local=tmp_path / "l", durability="fast") as eng:
        eng.register(two_steps())
        eng.start("steps", run_id="r", policy=bide.Policy(snapshot="full"))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    shown = runner.invoke(main, ["show", "r", "--home", pg_url, "--json"])
    assert shown.exit_code == 0, shown.output
    assert '"status": "DONE"' in shown.output
    monkeypatch.setenv("BIDE_HOME", pg_url)
    listed = runner.invoke(main, ["runs", "--json"])
    assert listed.exit_code == 0 and '"r"' in listed.output, listed.output
    assert runner.invoke(main, ["doctor"]).exit_code == 0
    pruned = runner.invoke(main, ["prune", "--keep", "1"])
    assert pruned.exit_code == 0, pruned.output
    assert runner.invoke(main, ["doctor"]).exit_code == 0
    missing = runner.invoke(main, ["show", "nope"])
    assert missing.exit_code == 3 and "nope" in missing.output
    assert not (tmp_path / ".bide").exists()  # reading commands made no local directory


def test_bad_urls_and_an_unreachable_server_are_clear_errors(tmp_path: Path) -> None:
    from bide.engine.base.errors import StoreError
    from bide.engine.postgres.home import redacted
    from bide.engine.postgres.store import PostgresStore

    with pytest.raises(ValueError, match="postgresql:// URL"):
        PostgresStore("mysql://x/db")
    with pytest.raises(ValueError, match="durability"):
        PostgresStore("postgresql://x/db", durability="sometimes")
    nowhere = f"postgresql://bob:s3cret@/db?host={tmp_path}"  # no server listens there
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot reach PostgreSQL") as caught:
        PostgresStore(nowhere, reconnect_timeout=0.5)
    assert time.monotonic() - started < 5
    assert "s3cret" not in str(caught.value) and "bob:***@" in str(caught.value)
    assert redacted("postgresql://u@h/db") == "postgresql://u@h/db"


def test_durability_maps_to_synchronous_commit(pg_url: str) -> None:
    from bide.engine.postgres.store import PostgresStore

    for durability, setting in (("durable", "on"), ("fast", "off")):
        store = PostgresStore(pg_url, durability=durability)
        try:
            with store.reader() as r:
                assert r.conn.execute("SHOW synchronous_commit").fetchone() == (setting,)
            assert store.info()["durability"] == durability
        finally:
            store.close()
