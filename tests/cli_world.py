"""A home with runs in every status, for the CLI and maintenance tests.

Importable as ``cli_world`` (pytest puts ``tests/`` on ``sys.path``); the
subprocess tests pass ``--app cli_world:FLOWS`` with ``tests/`` on PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import bide
import pytest
from bide.engine.base import faults
from bide.engine.upkeep import operations

# -- flows ---------------------------------------------------------------------------
steps = bide.Flow("steps")
steps.reducer("trail", bide.append)


@steps.node(start=True)
def step(state, ctx):
    return {"n": state.get("n", 0) + 1, "trail": f"step{state.get('n', 0) + 1}"}


steps.route("step", lambda s: "step" if s["n"] < s.get("until", 5) else bide.END)

boom = bide.Flow("boom")


@boom.node(start=True)
def explode(state, ctx):
    raise RuntimeError("kaput: the disk is lava")


ask = bide.Flow("ask")


@ask.node(start=True)
def prep(state, ctx):
    return {"patch": "--- a\n+++ b\n"}


NOTIFIED: list[str] = []


@ask.node(after="prep")
def notify(state, ctx):
    NOTIFIED.append(ctx.run_id)
    return {"notified": True}


@ask.node(after="prep")
def apply_patch(state, ctx):
    return {"applied": ctx.approve("apply patch", {"patch": state["patch"]})}


CHARGES: list[int] = []


@bide.tool
def charge(amount: int) -> dict:
    CHARGES.append(amount)
    return {"charged": amount}


pay = bide.Flow("pay")


@pay.node(start=True)
def bill(state, ctx):
    return {"receipt": ctx.tool(charge, state.get("amount", 5))}


FLOWS = [steps, boom, ask, pay]


# Run ids by the status they are left in.
RUNS = {
    "DONE": "r-done",
    "FAILED": "r-failed",
    "WAITING_APPROVAL": "r-waiting",
    "NEEDS_RECONCILIATION": "r-recon",
    "CANCELLED": "r-cancelled",
    "RUNNING": "r-orphan",
    "PENDING": "r-pending",
}
DECIDED = "r-decided"  # WAITING_APPROVAL with its approval already decided


ORPHAN = """
import sys, bide, cli_world
e = bide.open(sys.argv[1])
e.register(*cli_world.FLOWS)
e.start("steps", run_id="r-orphan", policy=bide.Policy(full_every=2))
"""


def populate(home: Path) -> None:
    """Create one run per status (and a decided one), then close the home.

    The orphan is real: a worker process killed right after its third
    checkpoint, its lease unexpired but its process gone.
    """
    with bide.open(home) as e:
        e.register(*FLOWS)
        e.start("steps", {"until": 6}, run_id="r-done", policy=bide.Policy(full_every=2))
        e.start("boom", run_id="r-failed")
        e.start("ask", run_id="r-waiting")
        e.start("ask", run_id="r-decided")
        e.decide(e.get("r-decided").waiting["approval_id"], "approve", by="tester")
        e.start("ask", run_id="r-cancelled")
        operations.cancel(e, "r-cancelled", "no longer needed")
        _with_fault(e, "after_intent_prepared:1:raise", "pay", "r-recon")
        e.resume("r-recon")  # the prepared intent is now in doubt: NEEDS_RECONCILIATION
        e.submit("steps", {"until": 3}, run_id="r-pending")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env.update(BIDE_FAULT="after_checkpoint:3:kill", PYTHONPATH=os.pathsep.join(
        filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")])))
    killed = subprocess.run([sys.executable, "-c", ORPHAN, str(home)], env=env, timeout=60)
    assert killed.returncode == -9, killed


def _with_fault(e: bide.Engine, spec: str, flow: str, run_id: str) -> None:
    faults.configure(spec)
    try:
        e.start(flow, run_id=run_id)
    except faults.InjectedFault:
        pass
    finally:
        faults.configure(None)


_TEMPLATE: dict[str, Path] = {}


def world(tmp: Path, template_dir: Path) -> Path:
    """A fresh copy of the populated home (built once per session in ``template_dir``)."""
    if "home" not in _TEMPLATE:
        home = template_dir / "home"
        populate(home)
        _TEMPLATE["home"] = home
    dest = tmp / "home"
    shutil.copytree(_TEMPLATE["home"], dest)
    return dest


# Fixtures shared by the CLI and maintenance tests (import them into the test module):
# a world of runs in every status, built once per session and copied for each test.
@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("template")


@pytest.fixture
def home(tmp_path: Path, template: Path) -> Path:
    return world(tmp_path, template)
