"""The README's test command works in a checkout of any folder name (issue 11, item 20).

The checkout root is the package, so pytest used to import its ``__init__.py``
by the folder's name: every test errored in ``bide-main`` and bide was imported
twice in ``p``. Each case copies the checkout into such a folder and runs
pytest there in a subprocess; the negative control (without the
``checkout_root`` plugin) shows the copy reproduces the bug.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ONCE = '''
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bide_comes_from_its_install_and_only_once():
    import bide

    copies = sorted(name for name, module in list(sys.modules.items())
                    if (f := getattr(module, "__file__", None))
                    and ROOT in Path(f).resolve().parents
                    and Path(f).resolve().relative_to(ROOT).parts[0] != "tests")
    assert copies == []
    assert ROOT not in Path(bide.__file__).resolve().parents
'''


def checkout(parent: Path, name: str) -> Path:
    dest = parent / name
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".git", "*.egg-info", "__pycache__", ".hypothesis", ".ruff_cache", ".pytest_cache",
        ".bide", "corpus"))
    (dest / "tests" / "test_here.py").write_text(ONCE)
    return dest


def pytest_in(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BIDE_", "PYTEST_")) and k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_here.py", "tests/test_cli_render.py", *extra],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["bide-main", "bide-0.1.0", "p"])
def test_the_readme_test_command_works_in_any_folder(tmp_path: Path, name: str) -> None:
    folder = checkout(tmp_path, name)
    out = pytest_in(folder)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " passed" in out.stdout and "error" not in out.stdout.lower(), out.stdout


@pytest.mark.parametrize("name, symptom", [
    ("bide-main", "attempted relative import with no known parent package"),
    ("p", "assert ['p', "),
])
def test_negative_control_without_the_plugin_the_bug_is_back(tmp_path: Path, name: str,
                                                             symptom: str) -> None:
    out = pytest_in(checkout(tmp_path, name), "-p", "no:checkout_root")
    assert out.returncode != 0
    assert symptom in out.stdout, out.stdout
