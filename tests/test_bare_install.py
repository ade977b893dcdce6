"""The bare package (no extras) imports every module, and ``bide --help`` runs.

A real venv with ``pip install <checkout>`` and nothing else: a module that imports
psycopg, Starlette, uvicorn, OpenTelemetry, shiv, Playwright, matplotlib or LangGraph
where it does not need them fails here. The only modules that may not import bare are
the LangGraph adapter's (saver, tools, runner), whose whole job is LangGraph: they
raise ``bide.MissingExtra`` naming the extra. The wheel is built from the checkout, so a
subpackage missing from pyproject.toml's package list fails here too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from base_python import base_python
from extras import EXTRAS, unavailable

ROOT = Path(__file__).resolve().parents[1]
# the top packages bide's extras bring (the test extra's own tools aside)
OPTIONAL = tuple(sorted({m.split(".")[0] for m, extra in EXTRAS.items() if extra != "test"}))
# a module whose one job is an extra: it says which, instead of importing
NEEDS_AN_EXTRA = {"bide.engine.langgraph.saver": "langgraph",
                  "bide.engine.langgraph.tools": "langgraph",
                  "bide.engine.langgraph.runner": "langgraph"}

IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
import bide
failed = {}
names = [info.name for info in pkgutil.walk_packages(bide.__path__, "bide.")]
for name in names:
    try:
        importlib.import_module(name)
    except bide.MissingExtra as exc:
        failed[name] = ["MissingExtra", exc.extra, str(exc)]
    except BaseException as exc:
        failed[name] = [type(exc).__name__, None, str(exc)]
seen = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print(json.dumps({"failed": failed, "optional_loaded": seen, "count": len(names)}))
"""


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    base = base_python()
    made = _run([base, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    # from a copy: setuptools builds in the source tree (build/), and the checkout is not ours
    source = venv.parent / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".*cache", ".hypothesis", "venv", ".venv"))
    installed = _run([str(python), "-m", "pip", "install", "-q", str(source)], env=env,
                     cwd=venv.parent)
    if installed.returncode != 0:
        text = installed.stderr + installed.stdout
        if "No matching distribution" in text or "Could not find a version" in text:
            unavailable(f"the package index is not reachable to build a bare venv: {text[-300:]}")
        pytest.fail(f"pip install of the bare package failed:\n{text[-3000:]}")
    return venv


def test_the_bare_package_imports_every_module(bare_venv: Path) -> None:
    python = bare_venv / "bin" / "python"
    # no extra is installed in the bare venv: the import check below proves the modules,
    # not an accident of what the venv holds
    present = _run([str(python), "-c", "import importlib.util, sys; print([m for m in sys.argv[1:]"
                    " if importlib.util.find_spec(m)])", *OPTIONAL])
    assert present.stdout.strip() == "[]", present.stdout + present.stderr
    done = _run([str(python), "-c", IMPORT_ALL, *OPTIONAL], cwd=bare_venv.parent)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["count"] > 100  # every module was walked, not an empty package
    failed = report["failed"]
    unexpected = {m: f for m, f in failed.items() if m not in NEEDS_AN_EXTRA}
    assert unexpected == {}, json.dumps(unexpected, indent=1)
    for module, extra in NEEDS_AN_EXTRA.items():
        kind, named, message = failed[module]
        assert (kind, named) == ("MissingExtra", extra), failed[module]
        assert f"pip install 'bide[{extra}]'" in message
    assert report["optional_loaded"] == []


def test_the_bare_cli_prints_its_help(bare_venv: Path) -> None:
    done = _run([str(bare_venv / "bin" / "bide"), "--help"], cwd=bare_venv.parent)
    assert done.returncode == 0, done.stderr
    assert "Usage: bide" in done.stdout


def test_a_plain_import_loads_no_extra_even_where_installed(tmp_path: Path) -> None:
    """With every extra installed (the test venv), ``import bide`` and the CLI's help still
    import none of them: an extra costs start-up time only where it is used."""
    code = ("import sys; import bide, bide.cli; from click.testing import CliRunner; "
            "r = CliRunner().invoke(bide.cli.main, ['--help']); assert r.exit_code == 0, r.output; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))")
    done = _run([sys.executable, "-c", code, *OPTIONAL], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
