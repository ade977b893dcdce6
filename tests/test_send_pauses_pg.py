"""On PostgreSQL: a map whose items pause one by one stores bytes linear in its items.

The same flow and measure as tests/test_send_pauses.py (which runs every test there
on PostgreSQL too with ``--store postgres``), smaller: each resume reads the superstep's
records and runs the approved item, a few round trips.
"""

from __future__ import annotations

import bide
import pytest
from bide.engine.postgres.store import PostgresStore
from extras import need
from test_send_pauses import bytes_ratio, pausing_flow

need("psycopg")


@pytest.mark.slow  # 200 resumes on a server (~10 s)
def test_a_paused_map_stores_bytes_linear_in_its_items_on_postgres(pg_url, tmp_path):
    store = PostgresStore(pg_url, durability="fast")
    with bide.open(tmp_path, durability="fast", store=store) as engine:
        engine.register(pausing_flow())
        assert bytes_ratio(engine, 50, 150) < 3.5  # every pause storing every Send: ~5.5x
