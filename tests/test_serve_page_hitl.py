"""A HumanInTheLoopMiddleware review on the approvals page, in a real browser.

``bide serve --app hitl_app:agent`` (a real subprocess) serves a home where a
``create_agent`` agent waits for HITL's review of ``charge(amount=5)``. The page must show
the call and the decisions its config allows, and a person's clicks must finish the agent
with the effect that decision implies: Approve charges 5 once; the arguments edited in
the card's box and "Run as edited" charge the new amount once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bide
import pytest
from bide.bench.kit.crashkit import worker_env
from conftest import APPS
from extras import need
from polling import wait_for
from test_serve_page import TIMEOUT_MS, browser, card, free_port, log_in, ready

need("langchain.agents")
need("starlette")
need("uvicorn")

from bide.langgraph import BideSaver  # noqa: E402

sys.path.insert(0, str(APPS))
import hitl_app  # noqa: E402  (tests/apps is not a package)

__all__ = ["browser"]  # the module's browser fixture, shared with test_serve_page
THREAD = "t-1"


class ServedAgent:
    """A home whose agent thread waits at its review, served by ``bide serve``."""

    def __init__(self, root: Path) -> None:
        self.home, self.effects, self.log = root / "home", root / "effects.txt", root / "serve.log"
        self.port = free_port()
        os.environ["HITL_EFFECTS"] = str(self.effects)
        try:
            with BideSaver.from_home(self.home, durability="fast") as saver:
                hitl_app.agent.copy(update={"checkpointer": saver}).invoke(
                    {"messages": [("user", "charge 5")]},
                    {"configurable": {"thread_id": THREAD}})
        finally:
            del os.environ["HITL_EFFECTS"]
        env = worker_env(extra={"HITL_EFFECTS": str(self.effects), "PYTHONPATH": str(APPS)})
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bide.cli", "serve", "--home", str(self.home),
                 "--app", "hitl_app:agent", "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        ready(self.url, self.proc, self.log)
        self.token = (self.home / "serve.token").read_text().strip()
        with bide.open(self.home, durability="fast") as eng:
            (row,) = eng.pending()
        self.approval_id = row["approval_id"]

    def status(self) -> str:
        with bide.open(self.home, durability="fast") as eng:
            return str(eng.get(THREAD).status)

    def charges(self) -> list[int]:
        if not self.effects.exists():
            return []
        return [int(line.split()[1]) for line in self.effects.read_text().splitlines()]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedAgent]:
    server = ServedAgent(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(browser: Any, served: ServedAgent) -> Iterator[Any]:
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    tab.requested = []
    tab.on("request", lambda r: tab.requested.append(r))
    tab.goto(served.url + "/")
    try:
        yield tab
    finally:
        context.close()


def _review_card(page: Any, served: ServedAgent) -> Any:
    from playwright.sync_api import expect

    log_in(page, served.token)
    item = card(page, served.approval_id)
    expect(item.locator("code.call")).to_have_text("charge(amount=5)")
    expect(item).to_contain_text("takes approve / edit / reject / respond")
    expect(item).to_contain_text("HumanInTheLoopMiddleware.after_model")  # its node
    return item


def test_approve_on_the_page_charges_once_and_finishes_the_agent(page: Any,
                                                                 served: ServedAgent) -> None:
    from playwright.sync_api import expect

    item = _review_card(page, served)
    item.get_by_label("by").fill("ana")
    item.get_by_role("button", name="Approve").click()
    expect(item).to_have_count(0)
    assert wait_for(lambda: served.status() == "DONE", timeout=30), served.log.read_text()
    assert served.charges() == [5]
    posted = [r.post_data_json for r in page.requested if r.method == "POST"]
    assert [p["decision"] for p in posted] == ["approve"]


def test_arguments_edited_on_the_page_run_the_new_call_once(page: Any,
                                                            served: ServedAgent) -> None:
    from playwright.sync_api import expect

    item = _review_card(page, served)
    args = item.get_by_label(re.compile("^arguments"))
    assert json.loads(args.input_value()) == {"amount": 5}
    args.fill("{not json")  # said on the page; nothing is sent
    item.get_by_role("button", name="Run as edited").click()
    expect(item.get_by_role("alert")).to_contain_text("not JSON")
    args.fill('{"amount": 4}')
    item.get_by_role("button", name="Run as edited").click()
    expect(item).to_have_count(0)
    assert wait_for(lambda: served.status() == "DONE", timeout=30), served.log.read_text()
    assert served.charges() == [4]
    (posted,) = [r.post_data_json for r in page.requested if r.method == "POST"]
    assert posted["decision"] == "answer" and posted["value"] == {"decisions": [
        {"type": "edit", "edited_action": {"name": "charge", "args": {"amount": 4}}}]}
