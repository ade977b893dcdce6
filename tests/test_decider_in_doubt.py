"""A decider sees what a call in doubt was called with, and when a request expires."""

from __future__ import annotations

import json
import time

import bide
import pytest
from bide.cli import main
from bide.engine.base.render import expiry_text
from bide.engine.run.context import args_digest
from bide.formats import IntentPrepared
from bide.formats.records import compact_digest
from click.testing import CliRunner


@bide.tool
def charge(amount: int, *, to: str) -> str:
    return "charged"


def in_doubt(engine: bide.Engine, run_id: str = "rp", *, payload_preview: bool = True) -> str:
    """A run paused on a charge whose outcome is unknown (a crash after prepare leaves it)."""
    flow = bide.Flow("pay")
    flow.node(lambda s, ctx: {"x": ctx.tool(charge, 5, to="日本")}, name="act", start=True)
    engine.register(flow)
    engine.submit("pay", run_id=run_id)
    engine.store.commit([IntentPrepared(
        run_id=run_id, task="0:act:0", index=0, tool="charge", args_preview="5, to='日本'",
        digest=compact_digest(args_digest("charge", (5,), {"to": "日本"})))])
    run = engine.resume(run_id)
    assert run.status == "NEEDS_RECONCILIATION"
    return run.waiting["approval_id"]


def test_request_file_pending_and_show_carry_the_arguments(engine, home) -> None:
    aid = in_doubt(engine)
    request = json.loads((home / "requests" / f"{aid}.json").read_text())
    assert request["payload"]["args_preview"] == "5, to='日本'"
    (row,) = engine.pending()
    assert row["args_preview"] == "5, to='日本'"
    assert engine.show("rp")["waiting"]["args_preview"] == "5, to='日本'"
    engine.close()  # the CLI opens the home itself
    runner = CliRunner()
    out = runner.invoke(main, ["pending", "--home", str(home)]).output
    assert "reconcile charge (5, to='日本')" in out
    out = runner.invoke(main, ["show", "--home", str(home), "rp"]).output
    assert "charge(5, to='日本')" in out
    out = runner.invoke(main, ["pending", "--home", str(home), "--json"]).output
    assert json.loads(out)[0]["args_preview"] == "5, to='日本'"


def test_a_request_made_before_previews_shows_them_from_the_log(engine) -> None:
    """A request whose payload has no preview (made by an older bide) still shows it."""
    aid = in_doubt(engine)
    with engine.store.reader() as r:
        stored = r.approval(aid)
    assert stored is not None
    stored.payload.pop("args_preview")
    from bide.engine.human.in_doubt import request_preview, waiting_with_preview
    with engine.store.reader() as r:
        assert request_preview(r, stored) == "5, to='日本'"
        waiting = {k: v for k, v in engine.show("rp")["waiting"].items() if k != "args_preview"}
        assert waiting_with_preview(r, "rp", waiting)["args_preview"] == "5, to='日本'"


@pytest.mark.parametrize(("offset", "tail"), [(300, "(in 5m)"), (-120, "(EXPIRED 2m ago)")])
def test_expiry_is_absolute_and_relative(offset: float, tail: str) -> None:
    now = 1_800_000_000.0
    text = expiry_text(now + offset, now)
    assert text.endswith(tail) and text.startswith("2027-01-15T")
    assert expiry_text(None, now) == "never"


def test_pending_marks_an_expired_request(engine, home) -> None:
    flow = bide.Flow("ask")
    flow.node(lambda s, ctx: {"ok": ctx.approve("deploy", expires_in=0.05)}, name="n",
              start=True)
    engine.register(flow)
    engine.start("ask", run_id="ra")
    time.sleep(0.1)
    engine.close()  # the CLI opens the home itself
    out = CliRunner().invoke(main, ["pending", "--home", str(home)]).output
    assert "EXPIRED" in out and "ago)" in out, out
