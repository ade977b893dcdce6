"""The interpreter this test venv was made from: Python without our packages.

``sys._base_executable`` names it on Python 3.11+, but on 3.10 a venv's own
``bin/python``; the base prefix's ``bin/python3.X`` is right on both.
"""

from __future__ import annotations

import sys
from pathlib import Path


def base_python() -> str:
    if sys.prefix != sys.base_prefix:
        found = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        if found.exists():
            return str(found)
    return getattr(sys, "_base_executable", None) or sys.executable
