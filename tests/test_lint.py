"""ruff is clean on the checkout, with the settings in pyproject.toml.

Here, not as a separate CI step, so the README's one test command covers it too.
Rerun just this: ``python -m pytest -q tests/test_lint.py`` (a failure shows ruff's report).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extras import need

need("ruff")  # in the test extra

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
