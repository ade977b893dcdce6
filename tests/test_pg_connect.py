"""Every PostgreSQL connection bide opens asks for TCP liveness checks (engine/postgres/connect.py),
so a server host that vanishes fails a commit, a follow or the listener within about a
minute instead of the kernel's ~15; a URL's own values win.

What cannot be shown here: a peer that vanishes without a reset (it needs control of the
network). These tests show what each connection is opened with."""

from __future__ import annotations

from extras import need

need("psycopg")

from bide.engine.postgres import connect as pg_connect  # noqa: E402
from bide.engine.postgres.follow import PgFollowFeed  # noqa: E402
from bide.engine.postgres.store import PostgresStore  # noqa: E402


def _options(conn) -> dict[str, str]:
    return conn.info.get_parameters()


def test_a_connection_has_the_liveness_options(pg_url: str) -> None:
    with pg_connect.connect(pg_url, application_name="bide-test") as conn:
        got = _options(conn)
    assert {k: got.get(k) for k in pg_connect.LIVENESS} == {
        k: str(v) for k, v in pg_connect.LIVENESS.items()}


def test_the_url_s_own_values_win(pg_url: str) -> None:
    url = f"{pg_url}&keepalives_idle=5&tcp_user_timeout=7000"
    with pg_connect.connect(url, application_name="bide-test") as conn:
        got = _options(conn)
    assert got["keepalives_idle"] == "5" and got["tcp_user_timeout"] == "7000"
    assert got["keepalives_count"] == "3"  # the ones it does not set still come


def test_the_store_and_the_follower_connect_through_it(pg_url: str) -> None:
    store = PostgresStore(pg_url, durability="fast")
    try:
        pooled = store._pool.connect()
        try:
            assert _options(pooled.conn)["tcp_user_timeout"] == "60000"
        finally:
            pooled.conn.close()
        feed = PgFollowFeed(pg_url, store.home, "r1", timeout=5)
        try:
            assert feed._conn is not None
            assert _options(feed._conn)["keepalives_idle"] == "30"
        finally:
            feed.close()
    finally:
        store.close()


def test_keepalives_0_in_the_url_gets_none_of_ours(pg_url: str) -> None:
    with pg_connect.connect(f"{pg_url}&keepalives=0", application_name="bide-test") as conn:
        got = _options(conn)
    assert got.get("keepalives") == "0"
    assert got.get("tcp_user_timeout") in (None, "", "0")


def test_a_service_file_s_own_options_win(pg_url: str, tmp_path, monkeypatch) -> None:
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(pg_url)
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[bidetest]\nhost={given['host']}\ndbname={given['dbname']}\n"
                        f"user={given.get('user', 'postgres')}\nkeepalives_idle=5\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    with pg_connect.connect("service=bidetest", application_name="bide-test") as conn:
        got = _options(conn)
    assert got["keepalives_idle"] == "5"
    assert got.get("tcp_user_timeout") in (None, "", "0")
