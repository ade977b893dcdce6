"""Fault points are listed in one place and every listed one exists in the engine."""

import re
from pathlib import Path

from bide.engine.base.faults import FAULT_POINTS

ROOT = Path(__file__).parent.parent


def test_every_point_called_is_listed_and_every_listed_point_is_called():
    called = set()
    for path in [*(ROOT / "engine").rglob("*.py")]:
        called |= set(re.findall(r'faults\.point\("([a-z_]+)"\)', path.read_text()))
    assert called <= set(FAULT_POINTS), called - set(FAULT_POINTS)
    missing = set(FAULT_POINTS) - called
    assert not missing, f"listed but never called: {missing}"
