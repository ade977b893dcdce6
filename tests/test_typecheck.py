"""mypy is clean on the installed package (issue 12, item 7: a type checker run by CI).

Here, not as a separate CI step, so the README's one test command covers it too.
The settings are ``[tool.mypy]`` in pyproject.toml. The checkout root is the
package ``bide`` itself, so mypy run inside the checkout would name it after the
folder (``bide-main``, ``bide-ci.0``), and mypy does not follow the import hook
of setuptools' editable install either. So the test links the directory the
installed ``bide`` is imported from as ``<tmp>/bide`` and runs, there::

    MYPYPATH=<tmp> python -m mypy --config-file <checkout>/pyproject.toml -p bide

Rerun just this: ``python -m pytest -q tests/test_typecheck.py`` (a failure shows
mypy's report).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from extras import need

need("mypy")  # in the test extra, so CI always runs this

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean_on_the_installed_package(tmp_path: Path) -> None:
    import bide

    package = Path(bide.__file__).resolve().parent
    (tmp_path / "bide").symlink_to(package, target_is_directory=True)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), "-p", "bide"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, f"mypy on {package}:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout
