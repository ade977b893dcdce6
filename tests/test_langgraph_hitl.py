"""LangChain's ``HumanInTheLoopMiddleware`` decided through every door bide has.

A real ``langchain.agents.create_agent`` agent (``tests/apps/hitl_app.py``) stops at
HITL's review of ``charge(amount=5)``; a person decides it by a decision file, ``bide
approve`` / ``bide answer``, ``POST /decisions`` (as an API client and as the page sends
it) or lets it expire. Each way ends the thread DONE with the effects that decision
implies — counted in a file outside the store — never FAILED: a decision the review's
configs do not allow is refused at the door, nothing is stored, and the thread still
waits. Both of HITL's modes (batched, per call) are driven; the SIGKILL of a watcher right
after an approved charge is in ``test_watcher_killed_after_an_approved_charge_asks``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import APPS
from extras import need

need("langchain.agents")
need("langgraph.prebuilt")

import bide  # noqa: E402
from bide import Status  # noqa: E402
from bide.bench.kit.crashkit import run_worker  # noqa: E402
from bide.cli import main  # noqa: E402
from bide.engine.base.errors import DecisionNotAllowed, DecisionRefused, InvalidAnswer  # noqa: E402
from bide.langgraph import BideSaver, serve_graphs  # noqa: E402
from click.testing import CliRunner  # noqa: E402

sys.path.insert(0, str(APPS))
import hitl_app  # noqa: E402  (tests/apps is not a package)

THREAD = "t-1"
TIMEOUT = 120.0  # per subprocess: none of them may hang the suite


class Desk:
    """One home with one agent thread stopped at its review, the effects file, the doors."""

    def __init__(self, root: Path, graph: str, *, ttl: float | None = None) -> None:
        self.home, self.effects_file, self.graph = root / "home", root / "effects.txt", graph
        os.environ["HITL_EFFECTS"] = str(self.effects_file)
        with BideSaver.from_home(self.home, durability="fast", interrupt_ttl=ttl) as saver:
            out = hitl_app.GRAPHS[graph].copy(update={"checkpointer": saver}).invoke(
                {"messages": [("user", "charge 5")]}, {"configurable": {"thread_id": THREAD}})
        assert len(out["__interrupt__"]) == 1
        self.row = self.pending()[0]
        self.id = self.row["approval_id"]

    def engine(self, **options: Any) -> bide.Engine:
        eng = bide.open(self.home, durability="fast", **options)
        serve_graphs(eng, {self.graph: hitl_app.GRAPHS[self.graph]})
        return eng

    def pending(self) -> list[dict[str, Any]]:
        with bide.open(self.home, durability="fast") as eng:
            return eng.pending()

    def status(self) -> str:
        with bide.open(self.home, durability="fast") as eng:
            return str(eng.get(THREAD).status)

    def charges(self) -> list[int]:
        """The amounts charged, as the world saw them."""
        if not self.effects_file.exists():
            return []
        return [int(line.split()[1]) for line in self.effects_file.read_text().splitlines()]

    def last_message(self) -> str:
        with bide.open(self.home, durability="fast") as eng:
            _, values = bide.langgraph.thread_state(eng.store, THREAD)
        return str(values["messages"][-1]["content"])

    def request_file(self) -> dict[str, Any]:
        return json.loads((self.home / "requests" / f"{self.id}.json").read_text())

    def drop(self, body: dict[str, Any], name: str = "d.json") -> None:
        """A decision file, renamed into the inbox as a person's tool would."""
        tmp = self.home / "inbox" / f".{name}.tmp"
        tmp.write_text(json.dumps(body))
        os.replace(tmp, self.home / "inbox" / name)

    def watch_once(self) -> None:
        with self.engine() as eng:
            bide.Watcher(eng, log=lambda _line: None).once()

    def resume(self) -> None:
        with self.engine() as eng:
            eng.recover()

    def check_done(self, charges: list[int], says: str) -> None:
        assert self.status() == "DONE"
        assert self.charges() == charges
        assert says in self.last_message(), self.last_message()
        assert self.pending() == []
        rejected = self.home / "inbox" / "rejected"
        assert not rejected.exists() or list(rejected.iterdir()) == []


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Desk]:
    monkeypatch.setenv("HITL_EFFECTS", str(tmp_path / "effects.txt"))
    return lambda graph="agent", **kw: Desk(tmp_path, graph, **kw)


# -- what a person sees ---------------------------------------------------------------------
def test_a_review_shows_its_calls_and_what_each_takes(desk: Callable[..., Desk]) -> None:
    d = desk()
    assert (d.row["kind"], d.row["node"], d.row["action"]) == (
        "approval", "HumanInTheLoopMiddleware.after_model", "charge(amount=5)")
    assert d.row["allowed"] == ["approve", "reject", "answer"]
    (action,) = d.row["review"]["actions"]
    assert (action["name"], action["args"], action["allowed"]) == (
        "charge", {"amount": 5}, ["approve", "edit", "reject", "respond"])
    assert d.status() == "WAITING_APPROVAL"
    req = d.request_file()
    assert req["review"] == d.row["review"]
    answer = next(f for f in req["decision_files"] if f["decision"] == "answer")
    assert answer["value"] == {"decisions": [
        {"type": "edit", "edited_action": {"name": "charge", "args": {"amount": 5}}}]}
    shown = CliRunner().invoke(main, ["pending", "--home", str(d.home)])
    assert shown.exit_code == 0, shown.output
    assert "charge(amount=5)  [approve / edit / reject / respond]" in shown.output


def test_a_per_call_review_names_its_pushed_node(desk: Callable[..., Desk]) -> None:
    d = desk("per_call_agent")
    assert (d.row["kind"], d.row["node"], d.row["review"]["mode"]) == (
        "approval", "tools", "per_call")
    assert d.row["allowed"] == ["approve", "reject", "answer"]


# -- every door, every decision: DONE with the effects it implies ---------------------------
def _file(d: Desk, decision: str, value: Any = None) -> None:
    req = d.request_file()
    body = next(dict(f) for f in req["decision_files"] if f["decision"] == decision)
    body.update(by="ann", reason="too much")
    if value is not None:
        body["value"] = value
    d.drop(body)
    d.watch_once()


def _cli(d: Desk, decision: str, value: Any = None) -> None:
    if decision == "answer":
        args = ["answer", d.id, "--edit", json.dumps(value)]
    else:
        args = ["approve", d.id, *(["--reject", "--reason", "too much"]
                                   if decision == "reject" else [])]
    done = CliRunner().invoke(main, [*args, "--home", str(d.home), "--by", "ann"])
    assert done.exit_code == 0, done.output
    d.watch_once()


def _http(d: Desk, decision: str, value: Any = None, *, as_page: bool = False) -> None:
    from serve_world import client

    body: dict[str, Any] = {"decision": decision, "by": "ann", "reason": "too much"}
    if value is not None:
        body["value"] = value
    if as_page:  # what the page's form sends: it binds the digest and the run it showed
        body.update(run_id=d.row["run_id"], digest=d.row["digest"])
    with d.engine() as eng, client(eng) as c:
        resp = c.post(f"/decisions/{d.id}", json=body)
        assert resp.status_code == 200, resp.text
        eng.recover()


def _page(d: Desk, decision: str, value: Any = None) -> None:
    _http(d, decision, value, as_page=True)


def _edit_value(d: Desk, args: dict[str, Any]) -> Any:
    """An edit as each door takes it: the CLI its arguments, the others HITL's answer."""
    one = {"type": "edit", "edited_action": {"name": "charge", "args": args}}
    return one if d.row["review"]["mode"] == "per_call" else {"decisions": [one]}


DOORS = {"file": _file, "cli": _cli, "http": _http, "page": _page}


@pytest.mark.parametrize("graph", ["agent", "per_call_agent"])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_approved_the_agent_charges_once_and_finishes(desk: Callable[..., Desk], door: str,
                                                      graph: str) -> None:
    d = desk(graph)
    DOORS[door](d, "approve")
    d.check_done([5], "done: charged 5")


@pytest.mark.parametrize("graph", ["agent", "per_call_agent"])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_rejected_the_agent_is_told_why_and_charges_nothing(desk: Callable[..., Desk],
                                                            door: str, graph: str) -> None:
    d = desk(graph)
    DOORS[door](d, "reject")
    d.check_done([], "User rejected the tool call for `charge` with reason: too much")


@pytest.mark.parametrize("graph", ["agent", "per_call_agent"])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_edited_the_agent_charges_the_new_amount_once(desk: Callable[..., Desk], door: str,
                                                      graph: str) -> None:
    d = desk(graph)
    DOORS[door](d, "answer", {"amount": 3} if door == "cli" else _edit_value(d, {"amount": 3}))
    d.check_done([3], "charged 3")


@pytest.mark.parametrize("graph", ["agent", "per_call_agent"])
def test_expired_the_review_resumes_as_a_rejection(desk: Callable[..., Desk], graph: str) -> None:
    d = desk(graph, ttl=60)
    assert d.row["expires_at"] is not None
    with d.engine(clock=lambda: 4e9) as eng:  # long after
        (run,) = eng.recover().advanced
        assert run.status == Status.DONE
        with eng.store.reader() as r:
            req = r.approval(d.id)
        assert (req.decision, req.by, req.reason) == ("reject", "bide", "expired")
    d.check_done([], "with reason: expired")


def test_a_reply_in_the_tools_place_runs_nothing(desk: Callable[..., Desk]) -> None:
    d = desk()
    done = CliRunner().invoke(main, ["answer", d.id, "--respond", "card declined",
                                     "--home", str(d.home)])
    assert done.exit_code == 0, done.output
    d.watch_once()
    d.check_done([], "done: card declined")


# -- what does not fit is refused at the door; the thread still waits -----------------------
def _unchanged(d: Desk, before: list[dict[str, Any]]) -> None:
    assert d.pending() == before
    assert d.status() == "WAITING_APPROVAL"
    assert d.charges() == []


def test_approve_where_the_config_allows_only_edit_or_reject_is_refused_everywhere(
        desk: Callable[..., Desk]) -> None:
    from serve_world import client

    d = desk("strict_agent")
    assert d.row["allowed"] == ["reject", "answer"]  # no plain approve
    before = d.pending()
    with d.engine() as eng:
        with pytest.raises(DecisionNotAllowed, match="takes reject / answer, not 'approve'"):
            eng.decide(d.id, "approve")
        with client(eng) as c:
            resp = c.post(f"/decisions/{d.id}", json={"decision": "approve"})
            assert resp.status_code == 422 and "not 'approve'" in resp.text, resp.text
            approve_all = {"decisions": [{"type": "approve"}]}
            resp = c.post(f"/decisions/{d.id}", json={"decision": "answer",
                                                      "value": approve_all})
            assert resp.status_code == 422 and "$.decisions[0]" in resp.text, resp.text
    shown = CliRunner().invoke(main, ["approve", d.id, "--home", str(d.home)])
    assert shown.exit_code != 0 and "not 'approve'" in shown.output, shown.output
    assert [p for p in (d.home / "inbox").iterdir() if p.is_file()] == []  # no file dropped
    d.drop({"approval_id": d.id, "decision": "approve", "by": "ann"})
    d.watch_once()
    (error,) = (d.home / "inbox" / "rejected").glob("*.error.json")
    assert "not 'approve'" in error.read_text()
    _unchanged(d, before)
    # what it does allow still finishes it
    done = CliRunner().invoke(main, ["answer", d.id, "--edit", '{"amount": 2}',
                                     "--home", str(d.home)])
    assert done.exit_code == 0, done.output
    d.watch_once()
    assert d.status() == "DONE" and d.charges() == [2]


@pytest.mark.parametrize("value, problem", [
    ({"decisions": [{"type": "approve"}, {"type": "approve"}]}, "2 items, more than 1"),
    ({"decision": "approve"}, "the field 'decisions' is required"),
    ({"decisions": [{"type": "edit", "edited_action": {"name": "refund", "args": {}}}]},
     '"refund" is not "charge"'),
    ({"decisions": [{"type": "respond"}]}, "the field 'message' is required"),
    ({"type": "approve"}, "the field 'decisions' is required"),
])
def test_an_answer_that_does_not_fit_the_review_is_refused(desk: Callable[..., Desk],
                                                           value: Any, problem: str) -> None:
    d = desk()
    before = d.pending()
    with d.engine() as eng:
        with pytest.raises(InvalidAnswer, match="HITL's response") as found:
            eng.answer(d.id, value)
        assert problem in str(found.value)
        assert eng.recover().advanced == []
    _unchanged(d, before)


def test_a_per_call_edit_is_checked_against_the_tools_arguments(
        desk: Callable[..., Desk]) -> None:
    d = desk("per_call_agent")
    before = d.pending()
    with d.engine() as eng:
        with pytest.raises(InvalidAnswer, match="expected integer"):
            eng.answer(d.id, _edit_value(d, {"amount": "lots"}))
        with pytest.raises(InvalidAnswer, match="one HITL decision"):
            eng.answer(d.id, {"decisions": [{"type": "approve"}]})
        with pytest.raises(DecisionRefused, match="1 action"):
            eng.review_answer(d.id, edit=[{"amount": 1}, {"amount": 2}])
    _unchanged(d, before)


def test_a_review_that_cannot_be_rejected_never_expires(desk: Callable[..., Desk]) -> None:
    """An expiry resumes as a rejection, which HITL refuses where the config has no reject:
    such a review waits for a person, whatever the saver's interrupt_ttl."""
    d = desk("approve_only_agent", ttl=60)
    assert d.row["allowed"] == ["approve", "answer"] and d.row["expires_at"] is None
    with d.engine(clock=lambda: 4e9) as eng:
        assert eng.recover().advanced == []
    assert d.status() == "WAITING_APPROVAL"
    assert desk("strict_agent", ttl=60).row["expires_at"] is not None  # reject: it may


def test_a_plain_interrupt_still_resumes_with_bides_own_decision(tmp_path: Path) -> None:
    from bide.engine.run import reviews

    assert reviews.review_of({"question": "ship it?"}) is None
    assert reviews.review_of("ship it?") is None
    assert reviews.review_of({"action_requests": [], "review_configs": []}) is None


# -- a watcher killed right after the approved charge ---------------------------------------
def test_watcher_killed_after_an_approved_charge_asks_instead_of_charging_again(
        tmp_path: Path) -> None:
    home, effects = tmp_path / "home", tmp_path / "effects.txt"
    env = {"PYTHONPATH": str(APPS), "HITL_EFFECTS": str(effects)}
    started = subprocess.run([sys.executable, str(APPS / "hitl_app.py"), str(home), THREAD],
                             capture_output=True, text=True, timeout=TIMEOUT,
                             env={**os.environ, **env})
    assert "STOPPED WAITING_APPROVAL" in started.stdout, started.stderr
    approved = CliRunner().invoke(main, ["approve", "--home", str(home),
                                         _only_pending(home)["approval_id"]])
    assert approved.exit_code == 0, approved.output

    def watch(fault: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return run_worker("-m", "bide.cli", "watch", "--home", str(home), "--app",
                              "hitl_app:agent", "--once", fault=fault, env=env, timeout=TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"bide watch did not end within {TIMEOUT}s: {exc.stderr!r}")

    killed = watch("after_tool_effect:1:kill")  # the approved charge happened, unrecorded
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _lines(effects) == ["charge 5"]
    asked = watch()
    assert asked.returncode == 0, asked.stderr
    assert "NEEDS_RECONCILIATION" in asked.stdout, asked.stdout
    assert _lines(effects) == ["charge 5"]  # asked, not charged again
    row = _only_pending(home)
    assert (row["kind"], row["tool"]) == ("reconciliation", "charge")
    marked = CliRunner().invoke(main, ["approve", row["approval_id"], "--decision", "mark_done",
                                       "--result", '"charged 5"', "--home", str(home)])
    assert marked.exit_code == 0, marked.output
    done = watch()
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr
    assert _lines(effects) == ["charge 5"]
    with bide.open(home, durability="fast") as eng:
        assert eng.get(THREAD).status == Status.DONE
        assert eng.doctor().ok


def _only_pending(home: Path) -> dict[str, Any]:
    with bide.open(home, durability="fast") as eng:
        (row,) = eng.pending()
    return row


def _lines(effects: Path) -> list[str]:
    """The effects, without their idempotency keys (one key per call: checked apart)."""
    lines = effects.read_text().splitlines() if effects.exists() else []
    return [" ".join(line.split()[:2]) for line in lines]


# -- the same on PostgreSQL ------------------------------------------------------------------
@pytest.mark.parametrize("graph", ["agent", "per_call_agent"])
def test_on_postgres_each_door_resumes_with_hitls_decisions(pg_url: str, graph: str,
                                                            tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """A review in the database: refused where it does not fit, approved by ``bide
    approve`` (recorded in the database at once), edited by ``POST /decisions``; another
    engine's driver (another host's watcher) finishes each thread."""
    need("psycopg")
    from serve_world import client

    effects = tmp_path / "effects.txt"
    monkeypatch.setenv("HITL_EFFECTS", str(effects))
    agent = hitl_app.GRAPHS[graph]
    with BideSaver.from_home(pg_url, durability="fast") as saver:
        for thread in ("t-approve", "t-edit"):
            agent.copy(update={"checkpointer": saver}).invoke(
                {"messages": [("user", "charge 5")]}, {"configurable": {"thread_id": thread}})
    with bide.open(pg_url, durability="fast") as eng:
        asked = {row["run_id"]: row for row in eng.pending()}
        assert {r["kind"] for r in asked.values()} == {"approval"}
        assert eng.get("t-approve").status == Status.WAITING_APPROVAL
        with pytest.raises(InvalidAnswer):
            eng.answer(asked["t-edit"]["approval_id"], {"decision": "approve"})
        approved = CliRunner().invoke(main, ["approve", asked["t-approve"]["approval_id"],
                                             "--home", pg_url])
        assert approved.exit_code == 0, approved.output
        one = {"type": "edit", "edited_action": {"name": "charge", "args": {"amount": 3}}}
        with client(eng) as c:
            resp = c.post(f"/decisions/{asked['t-edit']['approval_id']}", json={
                "decision": "answer", "by": "ann",
                "value": one if graph == "per_call_agent" else {"decisions": [one]}})
            assert resp.status_code == 200, resp.text
    with bide.open(pg_url, durability="fast") as other:  # another host's engine
        serve_graphs(other, {graph: agent})
        ended = {run.run_id: run.status for run in other.recover().advanced}
        assert ended == {"t-approve": Status.DONE, "t-edit": Status.DONE}
        assert other.pending() == []
    assert sorted(int(line.split()[1]) for line in effects.read_text().splitlines()) == [3, 5]
