"""A PostgreSQL home says which bide can read it: records written now may be short frames
a bide of store format 1 reads as corrupt, so a format-1 home is marked 2 when this bide
first opens it writable, and a home of a newer bide is refused with "upgrade bide"."""

from __future__ import annotations

from pathlib import Path

import bide
import pytest
from bide.engine.base.errors import NewerStore
from extras import need

psycopg = need("psycopg")


def _format(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT value FROM bide.meta WHERE key = 'format'").fetchone()
    return row[0]


def _set_format(url: str, value: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE bide.meta SET value = %s WHERE key = 'format'", (value,))


def _flow() -> bide.Flow:
    flow = bide.Flow("one")

    @flow.node(start=True)
    def only(state, ctx):
        return {"ok": True}

    return flow


def _started(url: str, local: Path) -> None:
    with bide.open(url, local=local) as eng:
        eng.register(_flow())
        eng.start("one", run_id="r1")


def test_a_format_1_home_is_marked_2_when_opened_writable(pg_url: str, tmp_path: Path) -> None:
    _started(pg_url, tmp_path / "local")
    _set_format(pg_url, "1")  # as a bide before short frames left it
    with bide.open(pg_url, local=tmp_path / "local") as eng:
        assert eng.get("r1").state["ok"] is True
    assert _format(pg_url) == "2"


def test_a_home_of_a_newer_bide_is_refused_and_left_as_it_is(
        pg_url: str, tmp_path: Path) -> None:
    _started(pg_url, tmp_path / "local")
    _set_format(pg_url, "99")
    with pytest.raises(NewerStore, match="upgrade bide"):
        bide.open(pg_url, local=tmp_path / "local")
    assert _format(pg_url) == "99"
