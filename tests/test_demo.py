"""`bide demo` — the first thing a new user runs — works and proves its claim."""

import subprocess
import sys


def test_demo_exits_zero_and_nothing_ran_twice(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bide.cli", "demo", "--home",
                          str(tmp_path / "home")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "outcome unknown → reconciled" in out.stdout
    assert "nothing ran twice" in out.stdout
    assert "run status: DONE" in out.stdout
