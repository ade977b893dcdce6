"""pytest plugin (``-p checkout_root`` in pyproject.toml): the checkout root is no test package.

The repository root is the ``bide`` package itself (it holds ``__init__.py``), so
pytest would collect it as a Package and import that ``__init__.py`` under the
checkout folder's name: an error when the name is not an identifier
(``bide-main``, ``bide-0.1.0``), a second copy of bide when it is (``p``). The
tests import the installed ``bide``; to them the root is just a directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if path == parent.config.rootpath:
        return pytest.Dir.from_parent(parent, path=path)
    return None
