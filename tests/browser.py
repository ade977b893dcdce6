"""A real browser for the tests: headless Chromium from the system's packages, driven by
Playwright.

Playwright's own browser download is not reachable from every machine, so the tests
launch the distribution's Chromium (Debian: ``apt-get install chromium``) through
``executable_path``. Without Chromium or Playwright the browser tests skip with the
reason; on CI (``CI=true``) they FAIL instead, as tests/pg_cluster.py does for
PostgreSQL, so CI can never pass by skipping them (.ci/run installs Chromium).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from extras import unavailable

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str | None:
    """The system's Chromium: $BIDE_TEST_CHROMIUM, else the first candidate on PATH."""
    given = os.environ.get("BIDE_TEST_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``), closed on the way out."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        unavailable("Playwright is not installed (pip install 'bide[browser]')")
    path = chromium_path()
    if path is None:
        unavailable("no Chromium on PATH (apt-get install chromium; or set "
                    "BIDE_TEST_CHROMIUM to its executable)")
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=path, headless=True,
                                                 timeout=30_000)
        except Error as exc:
            unavailable(f"Chromium at {path} did not start: {exc}")
        try:
            yield browser
        finally:
            browser.close()
