"""The throwaway PostgreSQL cluster the tests start: real, durable, private, fresh per test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from extras import need

psycopg = need("psycopg")


def test_the_server_is_real_durable_and_reachable_only_by_socket(pg_cluster, pg_url):
    with psycopg.connect(pg_url, connect_timeout=10) as conn:
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
            (["fsync", "synchronous_commit", "listen_addresses", "server_version_num"],),
        ).fetchall())
        assert settings["fsync"] == "on" and settings["synchronous_commit"] == "on"
        assert settings["listen_addresses"] == ""  # no TCP port
        assert int(settings["server_version_num"]) >= 140000
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    assert str(pg_cluster.socket) in pg_url


def test_each_test_gets_a_fresh_empty_database(pg_cluster, pg_url):
    with psycopg.connect(pg_url, connect_timeout=10) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname NOT IN "
                              "('pg_catalog', 'information_schema')").fetchone()[0]
        conn.execute("CREATE TABLE mine (x int)")
        conn.commit()
    assert tables == 0 and name != "postgres"
    other = pg_cluster.create_database()
    try:
        with psycopg.connect(pg_cluster.url(other), connect_timeout=10) as conn:
            assert conn.execute("SELECT to_regclass('mine')").fetchone() == (None,)
    finally:
        pg_cluster.drop_database(other)


def _inner_session(ci: bool):
    """This file's first test in a new pytest session whose server cannot start."""
    broken = Path(tempfile.mkdtemp(dir="/tmp"))  # reachable by the postgres user
    broken.chmod(0o755)
    for name in ("initdb", "pg_ctl"):  # present, but failing as a broken install would
        (broken / name).write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n")
        (broken / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(BIDE_PG_BIN=str(broken), COLUMNS="1000", **({"CI": "true"} if ci else {}))
    here = Path(__file__)
    try:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
             f"{here}::test_the_server_is_real_durable_and_reachable_only_by_socket"],
            capture_output=True, text=True, timeout=120, cwd=here.parent.parent, env=env)
    finally:
        shutil.rmtree(broken)


def test_on_ci_a_server_that_cannot_start_fails_the_tests():
    out = _inner_session(ci=True)
    assert out.returncode != 0 and "did not start" in out.stdout, out.stdout[-2000:]
    assert "skipped" not in out.stdout


def test_locally_a_server_that_cannot_start_skips_with_the_reason():
    out = _inner_session(ci=False)
    assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout[-2000:]
    assert "did not start" in out.stdout and "cannot start" in out.stdout
