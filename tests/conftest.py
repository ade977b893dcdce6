"""Shared fixtures: a fresh home per test, and a helper to run worker subprocesses."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bide
import pytest
from bide.bench.kit.crashkit import count_effects, run_worker
from bide.engine.storage.lmdb_store import LMDBStore
from extras import need

APPS = Path(__file__).parent / "apps"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def store(home: Path) -> Iterator[LMDBStore]:
    """An LMDB store in a fresh home, whatever ``--store`` says (for the tests of LMDB's
    own machinery: its hot cache, its group commit)."""
    s = LMDBStore(home, durability="fast")
    yield s
    s.close()


def pytest_configure(config: pytest.Config) -> None:
    """A shell that starts pytest in the background (``cmd &`` without job control) hands
    it SIGINT ignored, and every child process inherits that: the Ctrl-C tests (in this
    process and in the workers they start) would fail for want of a Ctrl-C. Tests send
    SIGINT on purpose, so it is Python's KeyboardInterrupt again, here and in children."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store", choices=("lmdb", "memory", "postgres"), default="lmdb",
                     help="the backend the `engine` fixture keeps its records in")


@pytest.fixture
def engine(home: Path, request: pytest.FixtureRequest):
    store = None
    if request.config.getoption("--store") == "memory":
        from bide.engine.storage.memory_store import SCHEME, MemoryStore
        store = MemoryStore(f"{SCHEME}{home}", durability="fast")
    elif request.config.getoption("--store") == "postgres":  # tests/pg_cluster.py's server
        from bide.engine.postgres.store import PostgresStore
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
        need("psycopg")
        return bide.open(request.getfixturevalue("pg_url"), local=home, **opts)
    if kind == "memory":
        from bide.engine.storage.memory_store import SCHEME, MemoryStore
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


@dataclass(frozen=True)
class World:
    """One crash test's home (a directory or a PostgreSQL URL), its local directory (a
    PostgreSQL home's inbox and requests), the effects file its workers append to outside
    the store, and the variable its app reads that local directory from."""

    home: str
    local: Path
    effects: Path
    app_local: str = ""

    def engine(self) -> bide.Engine:
        local = self.local if self.home.startswith("postgresql://") else None
        return bide.open(self.home, local=local, durability="fast")

    def env(self, **extra: str) -> dict[str, str]:
        """What a worker process of this world needs: its effects file, its local
        directory, the test apps on its path."""
        env = {"BIDE_TEST_EFFECTS": str(self.effects), "PYTHONPATH": str(APPS), **extra}
        if self.app_local:
            env[self.app_local] = str(self.local)
        return env

    def doors(self) -> list[str]:
        """A watcher on a PostgreSQL home serves this test's local inbox and requests."""
        if not self.home.startswith("postgresql://"):
            return []
        return ["--inbox", str(self.local / "inbox"), "--requests", str(self.local / "requests")]


def world_on(request: pytest.FixtureRequest, tmp_path: Path, app_local: str = "") -> World:
    """The body of a crash test's ``world`` fixture, parametrized lmdb / postgres."""
    home = str(tmp_path / "home")
    if request.param == "postgres":
        need("psycopg")
        home = request.getfixturevalue("pg_url")
    return World(home, tmp_path / "home", tmp_path / "effects.log", app_local)


def app_json(proc: subprocess.CompletedProcess, fault: str | None) -> Any:
    """A test app's last JSON line, or None if the fault it was armed with killed it."""
    if fault is not None and proc.returncode == -signal.SIGKILL:
        return None
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@contextmanager
def watched(request: pytest.FixtureRequest, home: Path, *flows: bide.Flow,
            deadline: float = 30.0) -> Iterator[tuple[bide.Engine, bide.Engine]]:
    """A watcher serving one engine in a thread, and a second engine (another client) on
    the same home: a directory (one engine serves as both) or, for a ``request.param`` of
    "postgres", the test server (two engines, each with its own local directory)."""
    from bide.engine.ops.watcher import Watcher

    if request.param == "postgres":
        need("psycopg")
        url = request.getfixturevalue("pg_url")
        opened = [bide.open(url, local=home / "a", durability="fast"),
                  bide.open(url, local=home / "b", durability="fast")]
    else:
        opened = [bide.open(home, durability="fast")]
        opened.append(opened[0])
    for e in opened:
        e.register(*flows)
    watcher = Watcher(opened[0], log=lambda _line: None)
    thread = threading.Thread(target=watcher.serve, name="test-watch")
    thread.start()
    try:
        yield opened[0], opened[1]
    finally:
        watcher.stop.set()  # the engine's own stopping event
        thread.join(deadline)
        assert not thread.is_alive(), "the watcher did not stop"
        for e in dict.fromkeys(opened):
            e.close()
