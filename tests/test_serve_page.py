"""The approvals page (``GET /`` of ``bide serve``) in a real browser.

``bide serve`` runs as a real subprocess on a free port over a home where runs wait for
a person; headless Chromium (tests/browser.py) opens ``/``, is given the token, and a
person's clicks must land: an approval that finishes its run with its effect done once,
an answer through the form, the server's refusal shown, an untrusted payload shown as
text, a decision taken elsewhere and a new request both seen live. The page's own file
is checked without a browser too (package data, nothing fetched from outside, no HTML
built from strings).
"""

from __future__ import annotations

import html.parser
import importlib.resources
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bide
import pytest
from bide.bench.kit.crashkit import count_effects, worker_env
from bide.engine.base import faults
from browser import chromium, unavailable
from conftest import APPS
from polling import wait_for

sys.path.insert(0, str(APPS))
import page_app  # noqa: E402  (tests/apps is not a package)

TIMEOUT_MS = 15_000  # every browser wait
START_DEADLINE = 30.0  # bide serve answering GET /


# -- the page file, without a browser ---------------------------------------------------
def page_text() -> str:
    return importlib.resources.files("bide.engine.serve").joinpath("page.html").read_text()


class _Refs(html.parser.HTMLParser):
    """Every src/href/action the page's tags name."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [(tag, k, v or "") for k, v in attrs if k in ("src", "href", "action")]


def test_the_page_is_package_data_and_fetches_nothing_from_outside() -> None:
    text = page_text()
    refs = _Refs()
    refs.feed(text)
    assert refs.refs == [("link", "href", "data:,")]  # an empty icon: no script, style,
    # font or image from anywhere
    assert "connect-src 'self'" in text and "form-action 'none'" in text
    script = text.split("<script>", 1)[1]
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", script, re.I)


def test_the_page_never_builds_html_from_strings() -> None:
    """Payloads are untrusted: the script shows text through textContent only."""
    script = page_text().split("<script>", 1)[1]
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function"):
        assert sink not in script, sink


def test_the_token_stays_out_of_urls() -> None:
    """sessionStorage and the Authorization header; never localStorage, a query or a cookie."""
    script = page_text().split("<script>", 1)[1]
    assert 'sessionStorage.setItem(TOKEN_KEY' in script
    assert "localStorage.setItem(TOKEN_KEY" not in script
    assert "document.cookie" not in script
    assert "?token" not in script and "&token" not in script


# -- a served home ----------------------------------------------------------------------
@dataclass
class Served:
    """A ``bide serve`` subprocess over ``home``, stopped and started again on its port."""

    home: Path
    effects: Path
    log: Path
    port: int = field(default_factory=lambda: free_port())
    token: str = ""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = worker_env(extra={"BIDE_TEST_EFFECTS": str(self.effects), "PYTHONPATH": str(APPS)})
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bide.cli", "serve", "--home", str(self.home),
                 "--app", "page_app:FLOWS", "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        ready(self.url, self.proc, self.log)
        self.token = (self.home / "serve.token").read_text().strip()

    def stop(self) -> bool:
        """SIGTERM, waited for; SIGKILL after a deadline. Whether SIGTERM was enough."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return True
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
            return True
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            return False

    def engine(self) -> bide.Engine:
        engine = bide.open(self.home, durability="fast")
        engine.register(*page_app.FLOWS)
        return engine

    def approval(self, approval_id: str) -> Any:
        """The request as the store holds it: its decision, by whom, why."""
        with self.engine() as engine, engine.store.reader() as r:
            return r.approval(approval_id)

    def status(self, run_id: str) -> str:
        with self.engine() as engine:
            return str(engine.get(run_id).status)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_runs(home: Path, effects: Path, *runs: tuple[Any, ...]) -> None:
    """Start each ``(flow, run_id, input[, fault])`` in this process until it waits for a
    person; with a fault armed (raised, not a kill) the run stops there and is resumed:
    ``after_intent_prepared`` leaves a tool call in doubt, to reconcile."""
    os.environ["BIDE_TEST_EFFECTS"] = str(effects)
    try:
        with bide.open(home, durability="fast") as engine:
            engine.register(*page_app.FLOWS)
            for flow, run_id, given, *fault in runs:
                faults.configure(fault[0] if fault else None)
                try:
                    run = engine.start(flow, input=given, run_id=run_id)
                except faults.InjectedFault:
                    pass  # the node fails with it, or it escapes: the run is left in doubt
                finally:
                    faults.configure(None)
                if fault:
                    run = engine.resume(run_id)
                assert run.status.waiting, run.status
    finally:
        del os.environ["BIDE_TEST_EFFECTS"]


def ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until ``GET /`` answers; fail (with the server's log) if it dies or is late."""
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"bide serve exited {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # not listening yet
        time.sleep(0.1)
    pytest.fail(f"bide serve did not answer within {START_DEADLINE}s:\n{log.read_text()}")


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    """``bide serve`` over a home where the runs the test names (``waiting(...)``) wait."""
    for extra in ("starlette", "uvicorn"):
        if importlib.util.find_spec(extra) is None:
            unavailable(f"{extra} is not installed (pip install 'bide[serve]')")
    server = Served(tmp_path / "home", tmp_path / "effects.log", tmp_path / "serve.log")
    start_runs(server.home, server.effects, *getattr(request, "param", ()))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        from playwright.sync_api import expect

        expect.set_options(timeout=TIMEOUT_MS)
        yield launched


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    """A fresh tab on the page, every request it makes recorded (``page.requested``)."""
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


def waiting(*runs: tuple[Any, ...]) -> Any:
    """The runs (flow, run id, input[, fault]) that wait for a person when the server starts."""
    return pytest.mark.parametrize("served", [runs], indirect=True, ids=[runs[0][1]])


def log_in(page: Any, token: str) -> None:
    page.get_by_label(re.compile("^Token")).fill(token)
    page.get_by_label(re.compile("^Token")).press("Enter")


def card(page: Any, approval_id: str) -> Any:
    return page.locator(f'article[data-approval-id="{approval_id}"]')


def waiting_on(served: Served, run_id: str) -> str:
    with served.engine() as engine:
        return str(engine.get(run_id).waiting["approval_id"])


# -- the browser tests --------------------------------------------------------------------


@waiting(("deploy", "d-1", {"version": "v42", "note": "canary first"}))
def test_approve_on_the_page_finishes_the_run_and_ships_once(page: Any, served: Served) -> None:
    from playwright.sync_api import expect

    approval = waiting_on(served, "d-1")
    log_in(page, "tökén")  # no header can carry it: said before anything is sent
    expect(page.get_by_role("alert").first).to_contain_text("not a bide serve token")
    log_in(page, "not-the-token")  # refused: asked again, with the server's reason
    expect(page.get_by_role("alert").first).to_contain_text("refused the token")
    expect(page.get_by_label(re.compile("^Token"))).to_be_visible()
    log_in(page, served.token)
    item = card(page, approval)
    expect(item).to_contain_text("deploy to production")
    expect(item.locator(".run")).to_have_text("d-1")
    expect(item.locator(".flow")).to_have_text("deploy")
    expect(item.locator(".expires")).to_contain_text("(in 59m)")
    assert json.loads(item.locator("pre.payload").inner_text()) == {
        "version": "v42", "note": "canary first"}
    item.get_by_label("by").fill("ana")
    item.get_by_label("reason").fill("checked the canary")
    page.keyboard.press("Tab")  # by the keyboard: reason -> Approve, Enter
    expect(item.get_by_role("button", name="Approve")).to_be_focused()
    page.keyboard.press("Enter")
    expect(item).to_have_count(0)
    expect(page.locator("#empty")).to_be_visible()
    assert wait_for(lambda: served.status("d-1") == bide.Status.DONE, timeout=20)
    assert count_effects(served.effects) == {"ship v42": 1}
    decided = served.approval(approval)
    assert (decided.decision, decided.by, decided.reason) == (
        bide.Decision.APPROVE, "ana", "checked the canary")
    # bound to the request it was made on: its run and digest went with the decision
    posted = [r.post_data_json for r in page.requested if r.method == "POST"]
    assert posted == [{"decision": "approve", "by": "ana", "reason": "checked the canary",
                       "run_id": "d-1", "digest": served.approval(approval).digest}]
    # the token went in a header, never in a URL; nothing was fetched from elsewhere
    urls = [r.url for r in page.requested if not r.url.startswith("data:")]
    assert all(u.startswith(served.url + "/") for u in urls), urls
    assert not [u for u in urls if served.token in u]
    assert any(r.url.endswith("/pending") and
               r.headers.get("authorization") == f"Bearer {served.token}"
               for r in page.requested)


@waiting(("barista", "b-1", {}))
def test_a_question_answered_through_the_form_and_a_refusal_shown(
        page: Any, served: Served) -> None:
    from playwright.sync_api import expect

    question = waiting_on(served, "b-1")
    log_in(page, served.token)
    item = card(page, question)
    expect(item).to_contain_text("how many cups?")
    expect(item.locator("pre.payload")).to_contain_text('"coffee"')
    answer = item.get_by_label("answer (JSON)")
    answer.fill('{"cups": "two"}')  # JSON, but not an Order: the server refuses it
    item.get_by_role("button", name="Answer").click()
    refusal = item.get_by_role("alert")
    expect(refusal).to_contain_text("Refused:")
    expect(refusal).to_contain_text("$.cups")  # the server's 422 reason, as it said it
    assert served.approval(question).decision is None  # nothing recorded
    answer.fill("{not json")  # not JSON at all: said before anything is sent
    item.get_by_role("button", name="Answer").click()
    expect(refusal).to_contain_text("not JSON")
    answer.fill('{"cups": 2, "item": "coffee"}')
    item.get_by_label("by").fill("ana")
    item.get_by_role("button", name="Answer").click()
    expect(item).to_have_count(0)
    assert wait_for(lambda: served.status("b-1") == bide.Status.DONE, timeout=20)
    assert count_effects(served.effects) == {"brew coffee x2": 1}
    assert served.approval(question).result == {"cups": 2, "item": "coffee"}


HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


@waiting(("deploy", "d-evil", {"version": "v1", "note": HOSTILE,
                                         "action": "deploy <b>" + HOSTILE}))
def test_an_untrusted_payload_is_shown_as_text(page: Any, served: Served) -> None:
    from playwright.sync_api import expect

    approval = waiting_on(served, "d-evil")
    log_in(page, served.token)
    item = card(page, approval)
    expect(item.locator("h2")).to_contain_text("deploy <b><script>window.pwned = 1</script>")
    assert json.loads(item.locator("pre.payload").inner_text())["note"] == HOSTILE
    assert item.locator("script, img, b").count() == 0  # text, never markup
    assert page.evaluate("window.pwned") is None


@waiting(("deploy", "d-a", {"version": "v1"}))
def test_decisions_taken_elsewhere_and_new_requests_show_live(
        page: Any, served: Served) -> None:
    """No reload, no click: the event stream brings both changes to the open page."""
    from playwright.sync_api import expect

    first = waiting_on(served, "d-a")
    log_in(page, served.token)
    expect(card(page, first)).to_be_visible()
    expect(page.locator("#live")).to_have_text("live")
    with served.engine() as engine:  # another client: a run for the server's watcher
        engine.submit("deploy", input={"version": "v2"}, run_id="d-b")
    assert wait_for(lambda: served.status("d-b") == bide.Status.WAITING_APPROVAL, timeout=20)
    expect(card(page, waiting_on(served, "d-b"))).to_be_visible()
    with served.engine() as engine:  # decided through the library, not the page
        engine.decide(first, bide.Decision.REJECT, by="bo")
    expect(card(page, first)).to_have_count(0)
    assert wait_for(lambda: served.status("d-a") == bide.Status.DONE, timeout=20)
    assert count_effects(served.effects) == {}  # rejected: nothing shipped


@waiting(("pay", "p-1", {"amount": 7}, "after_intent_prepared:1:raise"))
def test_a_call_in_doubt_reconciled_on_the_page(page: Any, served: Served) -> None:
    """The worker stopped after the intent, before the call: retry calls it once."""
    from playwright.sync_api import expect

    assert served.status("p-1") == bide.Status.NEEDS_RECONCILIATION
    doubt = waiting_on(served, "p-1")
    log_in(page, served.token)
    item = card(page, doubt)
    expect(item.locator("h2")).to_contain_text("Did this call happen? charge(7)")
    for name in ("Mark done", "Retry", "Abort"):
        expect(item.get_by_role("button", name=name)).to_be_visible()
    item.get_by_label("reason").fill("the provider has no charge 7")
    item.get_by_role("button", name="Retry").click()
    expect(item).to_have_count(0)
    assert wait_for(lambda: served.status("p-1") == bide.Status.DONE, timeout=20)
    assert count_effects(served.effects) == {"charge 7": 1}
    assert served.approval(doubt).decision == bide.Decision.RETRY


@waiting(("deploy", "d-s", {"version": "v1"}))
def test_a_stale_card_shows_the_servers_409_and_records_nothing(
        page: Any, served: Served) -> None:
    """With the event stream cut, a card outlives its request: the server says why."""
    from playwright.sync_api import expect

    approval = waiting_on(served, "d-s")
    page.route("**/events", lambda route: route.abort())  # no live updates in this tab
    log_in(page, served.token)
    item = card(page, approval)
    expect(item).to_be_visible()
    expect(page.locator("#live")).to_contain_text("live updates lost")
    with served.engine() as engine:
        engine.decide(approval, bide.Decision.REJECT, by="bo", reason="not today")
    item.get_by_role("button", name="Approve").click()
    refusal = item.get_by_role("alert")
    expect(refusal).to_contain_text("(AlreadyDecided, HTTP 409)")
    expect(refusal).to_contain_text("bo")  # who decided, as the server says it
    decided = served.approval(approval)
    assert (decided.decision, decided.by) == (bide.Decision.REJECT, "bo")
    page.get_by_role("button", name="Refresh").click()
    expect(item).to_have_count(0)
    assert wait_for(lambda: served.status("d-s") == bide.Status.DONE, timeout=20)
    assert count_effects(served.effects) == {}


@waiting(("deploy", "d-r", {"version": "v1"}))
def test_the_page_follows_again_when_the_server_comes_back(page: Any, served: Served) -> None:
    """The stream reconnects with a backoff and the page catches up on what it missed."""
    from playwright.sync_api import expect

    approval = waiting_on(served, "d-r")
    log_in(page, served.token)
    expect(card(page, approval)).to_be_visible()
    expect(page.locator("#live")).to_have_text("live")
    assert served.stop()  # SIGTERM ends the open stream of the page: no hang until a kill
    expect(page.locator("#live")).to_contain_text("live updates lost")
    with served.engine() as engine:  # decided while the server was down
        engine.decide(approval, bide.Decision.APPROVE, by="bo")
    served.start()  # the same port, the same token
    expect(page.locator("#live")).to_have_text("live")
    expect(card(page, approval)).to_have_count(0)
    assert wait_for(lambda: served.status("d-r") == bide.Status.DONE, timeout=20)
    assert count_effects(served.effects) == {"ship v1": 1}


def test_the_page_refuses_to_work_inside_a_frame(browser: Any, served: Served) -> None:
    """Another site framing the page could steal a click (clickjacking): the server's
    headers keep the browser from showing it in a frame, and the page checks too."""
    from playwright.sync_api import expect

    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.set_content(f'<iframe src="{served.url}/" width="800" height="400"></iframe>')
        # set_content waits for the load event, which waits for the frame: refused, the
        # frame holds the browser's error page, not ours
        (child,) = tab.main_frame.child_frames
        assert child.url.startswith("chrome-error:"), child.url

        def without_frame_headers(route: Any) -> None:  # a proxy dropping them
            resp = route.fetch()
            headers = {k: v for k, v in resp.headers.items()
                       if k.lower() not in ("x-frame-options", "content-security-policy")}
            route.fulfill(response=resp, headers=headers)

        tab.route(f"{served.url}/", without_frame_headers)
        tab.set_content(f'<iframe src="{served.url}/" width="800" height="400"></iframe>')
        framed = tab.frame_locator("iframe")
        expect(framed.locator("body")).to_contain_text("does not work inside a frame")
        expect(framed.locator("input, button")).to_have_count(0)
    finally:
        context.close()


def test_a_home_that_never_goes_quiet_still_shows_new_requests(
        page: Any, served: Served) -> None:
    """Events without pause (a run committing step after step) must not postpone the
    refetch forever: a request that comes meanwhile shows while the busy run still runs."""
    from playwright.sync_api import expect

    log_in(page, served.token)
    expect(page.locator("#live")).to_have_text("live")
    with served.engine() as engine:
        engine.submit("busy", input={"until": 300}, run_id="busy")  # ~10 s of steps
    assert wait_for(lambda: served.status("busy") == bide.Status.RUNNING, timeout=20)
    with served.engine() as engine:
        engine.submit("deploy", input={"version": "v3"}, run_id="d-q")
    assert wait_for(lambda: served.status("d-q") == bide.Status.WAITING_APPROVAL, timeout=20)
    expect(card(page, waiting_on(served, "d-q"))).to_be_visible(timeout=5_000)
    assert served.status("busy") == bide.Status.RUNNING  # it was never quiet meanwhile
