"""The README's Python examples run, so the quick start cannot rot."""

import re
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "bide.open(" in b]


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs(block, tmp_path, monkeypatch):
    if "opentelemetry" in block:  # the tracing example needs bide[otel] (CI installs it)
        pytest.importorskip("opentelemetry.sdk")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})


def test_readme_has_the_two_commands():
    assert 'pip install -e ".[test]" && bide demo' in README
    assert "python -m pytest -q" in README


def test_ci_runs_the_readme_test_command():
    """CI runs the suite exactly as the README tells a newcomer to (flags included)."""
    readme = re.search(r"^(python -m pytest [^#\n]*?)\s*# run the tests", README, re.M)
    assert readme is not None, "the README's quick start lost its test command"
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text().splitlines()
    assert readme.group(1) in [line.strip() for line in ci]
