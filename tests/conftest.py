"""Shared fixtures: a fresh home per test, and a helper to run worker subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import bide
import pytest

APPS = Path(__file__).parent / "apps"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store", choices=("lmdb", "memory"), default="lmdb",
                     help="the backend the `engine` fixture keeps its records in")


@pytest.fixture
def engine(home: Path, request: pytest.FixtureRequest):
    store = None
    if request.config.getoption("--store") == "memory":
        from bide.engine.memory_store import SCHEME, MemoryStore
        store = MemoryStore(f"{SCHEME}{home}", durability="fast")
    with bide.open(home, durability="fast", store=store) as eng:
        yield eng
    if store is not None:  # the run really lived in memory: no LMDB file was made
        assert not (home / "store").exists()


def run_app(script: str, *args: str, fault: str | None = None, env: dict | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``tests/apps/<script>`` in a fresh interpreter, optionally with a fault armed."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    if fault:
        full_env["BIDE_FAULT"] = fault
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(APPS / script), *args], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def count_lines(path: Path) -> dict[str, int]:
    """Side-effect counters: one line appended per execution, outside the store."""
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            counts[line] = counts.get(line, 0) + 1
    return counts
