"""Shared fixtures: a fresh home per test, and a helper to run worker subprocesses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import bide
import pytest
from bide.bench.crashkit import count_effects, run_worker

APPS = Path(__file__).parent / "apps"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store", choices=("lmdb", "memory", "postgres"), default="lmdb",
                     help="the backend the `engine` fixture keeps its records in")


@pytest.fixture
def engine(home: Path, request: pytest.FixtureRequest):
    store = None
    if request.config.getoption("--store") == "memory":
        from bide.engine.memory_store import SCHEME, MemoryStore
        store = MemoryStore(f"{SCHEME}{home}", durability="fast")
    elif request.config.getoption("--store") == "postgres":  # tests/pg_cluster.py's server
        from bide.engine.pg_store import PostgresStore
        store = PostgresStore(request.getfixturevalue("pg_url"), durability="fast")
    with bide.open(home, durability="fast", store=store) as eng:
        yield eng
    if store is not None:  # the run really lived elsewhere: no LMDB file was made
        assert not (home / "store").exists()


def open_on(kind: str, request: pytest.FixtureRequest, home: Path, clock) -> bide.Engine:
    """An engine on a home of this kind (lmdb, memory, postgres) with this clock; request
    files and the inbox in ``home`` whatever the store."""
    opts = {"durability": "fast", "clock": clock}
    if kind == "postgres":
        pytest.importorskip("psycopg")
        return bide.open(request.getfixturevalue("pg_url"), local=home, **opts)
    if kind == "memory":
        from bide.engine.memory_store import SCHEME, MemoryStore
        store = MemoryStore(f"{SCHEME}{home}", durability="fast", clock=clock)
        return bide.open(home, store=store, **opts)
    return bide.open(home, **opts)


def run_app(script: str, *args: str, fault: str | None = None, env: dict | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``tests/apps/<script>`` in a fresh interpreter, optionally with a fault armed."""
    return run_worker(str(APPS / script), *args, fault=fault, env=env, timeout=timeout)


def count_lines(path: Path) -> dict[str, int]:
    """Side-effect counters: one line appended per execution, outside the store."""
    return dict(count_effects(path))
