"""``bide torture`` is a thin entry: it reaches the harness lazily, and says where it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bide.bench import torture as entry
from bide.cli import main
from click.testing import CliRunner


def test_bide_starts_without_importing_the_torture_harness():
    code = ("import sys, bide.cli; "
            "print(any(m.startswith('bide.tests') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_torture_without_the_tests_folder_says_it_runs_from_a_checkout(monkeypatch):
    for name in [m for m in sys.modules if m.startswith("bide.tests")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "bide.tests", None)  # as in a wheel: no tests/ folder
    result = CliRunner().invoke(main, ["torture", "--trials", "0"])
    assert result.exit_code == 1
    assert "runs from a source checkout" in result.output


def test_the_entry_loads_the_harness_from_a_checkout():
    harness = entry.load_harness()
    assert harness.__name__ == "bide.tests.torture.harness.torture"
    assert callable(harness.main)


def test_trials_run_on_a_writable_scratch_dir_or_the_default_temp():
    from bide.tests.torture.harness.torture import scratch_dir

    where = scratch_dir()
    assert where is None or (where.is_dir() and where == Path("/dev/shm"))
