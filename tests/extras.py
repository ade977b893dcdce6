"""Tests of an optional extra: they skip saying which extra to install, or fail on CI.

``pip install -e ".[test]"`` brings every extra the suite exercises; someone who
installed less still gets a passing suite whose skips name what is missing. On CI
(``CI=true``) a missing extra or system package FAILS instead, so CI can never pass
by skipping what it was meant to prove.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

# the module each extra's tests import first, as pyproject.toml's extras name them
EXTRAS = {
    "mypy": "test", "ruff": "test", "psycopg": "postgres", "starlette": "serve", "uvicorn": "serve",
    "httpx": "serve", "opentelemetry": "otel", "langgraph": "langgraph",
    "langchain_core": "langgraph", "langchain": "langgraph", "playwright": "browser",
    "shiv": "pack", "packaging": "pack",
    "matplotlib": "plot", "langgraph.checkpoint.sqlite": "compare",
    "langgraph.checkpoint.postgres": "compare",
}


def extra_of(module: str) -> str | None:
    """The extra that brings ``module``: its longest dotted prefix named in EXTRAS."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in EXTRAS:
            return EXTRAS[".".join(parts[:n])]
    return None


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(why: str) -> None:
    """Skip with ``why``; fail on CI, where something missing is a broken setup."""
    if on_ci():
        pytest.fail(f"CI=true and {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def need(module: str) -> ModuleType:
    """``module`` imported, or the test (or the test module, at its top) skipped with the
    name of the extra that brings it (``unavailable``: a failure on CI)."""
    if extra_of(module) is None:
        raise KeyError(f"{module} belongs to no extra: import it, do not need() it")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        extra = extra_of(exc.name or "")
        if extra is None:
            raise  # an installed extra that is broken is a failure, not a skip
        unavailable(f"needs the {extra!r} extra ({exc.name} is not installed): "
                    f"pip install -e '.[{extra}]' (or '.[test]', which has every extra)")
        raise  # unreachable: unavailable() raised
