"""The throwaway PostgreSQL cluster the tests start: real, durable, private, fresh per test."""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg")


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
