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


@pytest.fixture
def engine(home: Path):
    with bide.open(home, durability="fast") as eng:
        yield eng


def run_app(script: str, *args: str, fault: str | None = None, env: dict | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``tests/apps/<script>`` in a fresh interpreter, optionally with a fault armed."""
    return run_worker(str(APPS / script), *args, fault=fault, env=env, timeout=timeout)


def count_lines(path: Path) -> dict[str, int]:
    """Side-effect counters: one line appended per execution, outside the store."""
    return dict(count_effects(path))
