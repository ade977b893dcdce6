"""``bide log --follow`` keeps following through a PostgreSQL outage.

``engine.follow`` raises ``StoreError`` when the server is away longer than the
store's reconnect time (a library caller decides what an outage means to it, and
resumes with ``since=``: no gap, no repeat). The CLI's follower used to die with
that error; now it says so on stderr once and follows again from its cursor.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from bide import Status
from bide.cli import main
from bide.engine.postgres import home as pg_home
from bide.formats import RunCreated, StatusChanged
from click.testing import CliRunner
from extras import need
from pg_outage_helpers import commit_elsewhere, give_up_within, server_away

need("psycopg")
from bide.engine.postgres.store import PostgresStore  # noqa: E402  (needs psycopg)

DEADLINE = 30.0
OUTAGE = 2.5  # longer than a follow's fallback re-read (2 s): a read meets it


def test_log_follow_follows_on_after_the_server_was_away(pg_cluster, pg_url, monkeypatch):
    commit_elsewhere(pg_url, [RunCreated(run_id="r", flow="job", at=1.0)])
    real, opened = pg_home.open_store, threading.Event()

    def short_reconnect(*args: Any, **kwargs: Any) -> PostgresStore:
        store = real(*args, **kwargs)
        give_up_within(store, 0.2)  # away longer than this
        opened.set()
        return store

    monkeypatch.setattr(pg_home, "open_store", short_reconnect)

    def outage_then_done() -> None:
        assert opened.wait(DEADLINE)
        time.sleep(0.5)  # the follower reads the run's first record meanwhile
        with server_away(pg_cluster):
            time.sleep(OUTAGE)
        commit_elsewhere(pg_url, [StatusChanged(run_id="r", status=Status.DONE)])

    later = threading.Thread(target=outage_then_done, name="test-outage", daemon=True)
    later.start()
    try:
        result = CliRunner().invoke(main, ["log", "--follow", "--json", "r", "--home", pg_url])
    finally:
        later.join(DEADLINE)
    assert not later.is_alive()
    assert result.exit_code == 0, (result.output, result.stderr)
    kinds = [json.loads(line)["type"] for line in result.stdout.splitlines()]
    assert kinds == ["run_created", "status_changed"], result.stdout  # on, with no repeat
    said = [x for x in result.stderr.splitlines() if x.startswith("log: cannot read")]
    assert len(said) == 1, result.stderr  # once per outage
