"""`bide approve` checks against the store before it writes (issue 11, item 10).

Each refusal has a clear message and its documented exit code, and writes no file.
"""

# ruff: noqa: F811 - tests take the imported fixtures `home`/`template` as parameters

from __future__ import annotations

import json
from pathlib import Path

import bide
import pytest
from bide.cli import main
from cli_world import DECIDED, home, template  # noqa: F401 - fixtures
from click.testing import CliRunner

EXIT_BAD_STATE, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 3


def waiting_id(home: Path, run_id: str) -> str:
    with bide.open(home, create=False) as e:
        return e.get(run_id).waiting["approval_id"]


def approve(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["approve", *args, "--home", str(home)])
    return result.exit_code, result.stderr + result.stdout


def inbox(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "inbox").iterdir() if p.is_file())


def test_reject_with_decision_approve_is_a_usage_error(home: Path) -> None:
    code, out = approve(home, waiting_id(home, "r-waiting"), "--reject", "--decision", "approve")
    assert code == EXIT_USAGE and "--reject conflicts with --decision approve" in out
    assert inbox(home) == []


def test_approve_on_a_reconciliation_names_its_own_decisions(home: Path) -> None:
    aid = waiting_id(home, "r-recon")
    code, out = approve(home, aid)
    assert code == EXIT_USAGE and "reconciliation request" in out
    assert "mark_done / retry / abort" in out and inbox(home) == []
    code, _ = approve(home, aid, "--decision", "retry")
    assert code == 0 and len(inbox(home)) == 1


def test_the_reconciliation_request_file_tells_a_command_that_works(home: Path) -> None:
    aid = waiting_id(home, "r-recon")
    body = json.loads((home / "requests" / f"{aid}.json").read_text())
    assert f"bide approve {aid} --decision mark_done|retry|abort" in body["how_to_decide"]
    approval = json.loads((home / "requests" / f"{waiting_id(home, 'r-waiting')}.json")
                          .read_text())
    assert "--decision" not in approval["how_to_decide"]


def test_result_on_an_approval_is_a_usage_error(home: Path) -> None:
    code, out = approve(home, waiting_id(home, "r-waiting"), "--result", '{"x": 1}')
    assert code == EXIT_USAGE and "--result goes with --decision mark_done only" in out
    assert inbox(home) == []


def test_an_already_decided_request_says_by_whom(home: Path) -> None:
    aid = waiting_id(home, DECIDED)
    for args in ((), ("--reject",)):
        code, out = approve(home, aid, *args)
        assert code == EXIT_BAD_STATE, out
        assert "already decided 'approve' by tester" in out and "no approval request" not in out
    assert inbox(home) == []


def test_an_expired_request_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    flow = bide.Flow("exp")
    flow.node(lambda s, ctx: {"ok": ctx.approve("x", expires_in=0.001)}, name="n", start=True)
    with bide.open(home, durability="fast") as eng:
        eng.register(flow)
        aid = eng.start("exp").waiting["approval_id"]
    code, out = approve(home, aid)
    assert code == EXIT_BAD_STATE and "expired" in out
    assert inbox(home) == []


def test_an_unknown_id_is_not_found(home: Path) -> None:
    code, out = approve(home, "a-000000000000")
    assert code == EXIT_NOT_FOUND and "no approval request" in out
    assert inbox(home) == []


def test_a_good_decision_is_written_and_accepted(home: Path) -> None:
    aid = waiting_id(home, "r-waiting")
    code, _ = approve(home, aid, "--by", "alice")
    assert code == 0
    (name,) = inbox(home)
    body = json.loads((home / "inbox" / name).read_text())
    assert body["decision"] == "approve" and body["approval_id"] == aid


@pytest.mark.parametrize("decision", ["mark_done", "retry", "abort"])
def test_reconciliation_decisions_are_accepted(home: Path, decision: str) -> None:
    extra = ("--result", '{"charged": 5}') if decision == "mark_done" else ()
    code, out = approve(home, waiting_id(home, "r-recon"), "--decision", decision, *extra)
    assert code == 0, out
