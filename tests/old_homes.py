"""Homes made by an older bide's code (tests/fixtures/make_format*_home.py): each fixture
home leaves run ``r-waiting`` paused on an approval; a home moved to the current format must
take the decision and finish that run as it would have."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import bide

FIXTURES = Path(__file__).parent / "fixtures"


def finish_the_waiting_run(home: Path, maker: str) -> bide.Engine:
    """Approve and resume ``r-waiting`` with the flow the ``maker`` module made the home with;
    the engine is returned open for more checks (the caller closes it)."""
    sys.path.insert(0, str(FIXTURES))
    try:
        flow = importlib.import_module(maker).flow
    finally:
        sys.path.remove(str(FIXTURES))
    e = bide.open(home, create=False)
    e.register(flow)
    aid = e.get("r-waiting").waiting["approval_id"]
    e.decide(aid, "approve", by="me")
    run = e.resume("r-waiting")
    assert run.status == bide.Status.DONE
    assert run.state["found"] == {"name": "ada", "tags": ["a", "b"]} and run.state["ok"]
    return e
