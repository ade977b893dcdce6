"""A throwaway PostgreSQL cluster for the tests, started from the machine's binaries.

A pytest plugin (``-p pg_cluster`` in pyproject): the session-scoped
``pg_cluster`` fixture runs ``initdb`` and ``pg_ctl start`` once per test
session in a temporary directory — a Unix socket only (no TCP port to collide
on), fsync on, as the ``postgres`` user when we run as root (PostgreSQL refuses
to run as root) — and stops it at the end with a deadline. ``pg_url`` gives
each test a fresh database of its own. No mocks: a real server or nothing. The
server itself is ``bide.bench.kit.pg_server`` (the bench starts the same one).

Without the binaries the PostgreSQL tests skip with the reason; on CI
(``CI=true``) a server that cannot start FAILS the tests instead, so a broken
setup is never reported as green.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from bide.bench.kit.pg_server import (  # the server itself: shared with `bide bench peers`
    Cluster,
    bin_dir,
    missing_binaries,
    start_cluster,
    stop_cluster,
)
from extras import need, unavailable


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One PostgreSQL cluster for the test session (see the module docstring)."""
    found = bin_dir()
    if found is None:
        unavailable(missing_binaries())
    need("psycopg")
    started = time.monotonic()
    try:
        cluster = start_cluster(found)
    except (RuntimeError, OSError, KeyError, subprocess.TimeoutExpired) as exc:
        unavailable(f"the PostgreSQL test server did not start: {exc}")
    cluster.started_in = time.monotonic() - started  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """A URL to a fresh, empty database of this test's own."""
    name = pg_cluster.create_database()
    try:
        yield pg_cluster.url(name)
    finally:
        pg_cluster.drop_database(name)
