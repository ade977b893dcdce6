"""LangGraph graphs on bide's guarantees, in one process: bide tools replay, reconcile and
ask; interrupts become requests a decision resumes; a driver resumes threads.

The crash tests (real processes killed at each boundary) are in test_langgraph_crash.py.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from extras import need

need("langgraph.prebuilt")

import bide  # noqa: E402
from bide import Outcome, Status  # noqa: E402
from bide.engine.base import faults  # noqa: E402
from bide.engine.base.errors import Nondeterminism, StaleLease  # noqa: E402
from bide.langgraph import (  # noqa: E402
    BideSaver,
    current_call,
    durable_tool,
    serve_graphs,
)
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import interrupt  # noqa: E402


class S(TypedDict):
    log: Annotated[list, operator.add]


CFG = {"configurable": {"thread_id": "t-1"}}


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    faults.configure(None)


class World:
    """Side effects counted outside the store."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


def one_node_graph(world: World, *, fail_once: list[bool] | None = None,
                   amount: list[int] | None = None, **options: Any) -> StateGraph:
    @durable_tool(**options)
    def pay(amount: int) -> str:
        world.calls.append(("pay", current_call().idempotency_key))
        return f"paid {amount}"

    @durable_tool
    def note(text: str) -> str:
        world.calls.append(("note", text))
        return text

    def node(state: S) -> dict[str, Any]:
        paid = pay(amount=(amount or [5])[0])
        if fail_once is not None and fail_once and fail_once.pop():
            raise RuntimeError("the node failed after its payment")
        return {"log": [paid, note(text="after")]}

    b = StateGraph(S)
    b.add_node("work", node)
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return b


def test_a_recorded_call_is_replayed_when_its_node_runs_again(tmp_path: Path):
    world = World()
    with BideSaver.from_home(tmp_path / "h", durability="fast") as saver:
        graph = one_node_graph(world, fail_once=[True]).compile(checkpointer=saver)
        with pytest.raises(RuntimeError, match="after its payment"):
            graph.invoke({"log": []}, CFG)
        out = graph.invoke(None, CFG)  # LangGraph runs the node again, from its start
    assert out["log"] == ["paid 5", "after"]
    assert world.count("pay") == 1 and world.count("note") == 1
    with bide.open(tmp_path / "h", durability="fast") as eng:
        rows = eng.intents("t-1")
        assert [r["tool"] for r in rows] == ["pay", "note"]
        assert {r["status"] for r in rows} == {"completed"}
        assert eng.get("t-1").status == Status.DONE


def test_arguments_that_changed_on_replay_are_refused_naming_both(tmp_path: Path):
    world = World()
    amount = [5]
    with BideSaver.from_home(tmp_path / "h", durability="fast") as saver:
        graph = one_node_graph(world, fail_once=[True], amount=amount).compile(
            checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"log": []}, CFG)
        amount[0] = 7
        with pytest.raises(Nondeterminism, match=r"pay\(args .*\).*pay\(args"):
            graph.invoke(None, CFG)
    assert world.count("pay") == 1


def test_a_call_that_raised_is_made_again(tmp_path: Path):
    tries: list[int] = []

    @durable_tool
    def flaky(n: int) -> int:
        tries.append(n)
        if len(tries) == 1:
            raise ConnectionError("down")
        return n * 2

    b = StateGraph(S)
    b.add_node("work", lambda s: {"log": [flaky(n=3)]})
    b.add_edge(START, "work")
    b.add_edge("work", END)
    with BideSaver.from_home(tmp_path / "h", durability="fast") as saver:
        graph = b.compile(checkpointer=saver)
        with pytest.raises(ConnectionError):
            graph.invoke({"log": []}, CFG)
        assert graph.invoke(None, CFG)["log"] == [6]
    assert tries == [3, 3]
    with bide.open(tmp_path / "h", durability="fast") as eng:
        (row,) = eng.intents("t-1")
        assert (row["status"], row["attempts"]) == ("completed", 2)


def _lost_outcome(tmp_path: Path, world: World, **options: Any) -> Any:
    """The first call's effect happens and the process 'dies' before its outcome is
    recorded (the fault point raises there); returns the compiled graph's saver home."""
    home = tmp_path / "h"
    faults.configure("after_tool_effect:1:raise")
    with BideSaver.from_home(home, durability="fast") as saver:
        graph = one_node_graph(world, **options).compile(checkpointer=saver)
        with pytest.raises(faults.InjectedFault):
            graph.invoke({"log": []}, CFG)
    faults.configure(None)
    assert world.count("pay") == 1
    return home


def test_an_unknown_outcome_asks_a_person_and_mark_done_goes_on_without_the_call(tmp_path):
    world = World()
    home = _lost_outcome(tmp_path, world)
    with BideSaver.from_home(home, durability="fast") as saver:
        graph = one_node_graph(world).compile(checkpointer=saver)
        out = graph.invoke(None, CFG)
        assert out["__interrupt__"][0].value["tool"] == "pay"
    with bide.open(home, durability="fast") as eng:
        assert eng.get("t-1").status == Status.NEEDS_RECONCILIATION
        (req,) = eng.pending()
        assert (req["kind"], req["tool"]) == ("reconciliation", "pay")
        assert (home / "requests" / f"{req['approval_id']}.json").exists()
        eng.decide(req["approval_id"], "mark_done", by="ann", result="paid 5 (checked)")
        serve_graphs(eng, one_node_graph(world))
        (run,) = eng.recover().advanced
        assert run.status == Status.DONE
        assert eng.pending() == []
    assert world.count("pay") == 1  # never made again: a person said it was done
    assert world.count("note") == 1


def test_an_unknown_outcome_retried_by_a_person_is_made_once_more(tmp_path: Path):
    world = World()
    home = _lost_outcome(tmp_path, world)
    with BideSaver.from_home(home, durability="fast") as saver:
        one_node_graph(world).compile(checkpointer=saver).invoke(None, CFG)
    with bide.open(home, durability="fast") as eng:
        (req,) = eng.pending()
        eng.decide(req["approval_id"], "retry", by="ann")
        serve_graphs(eng, one_node_graph(world))
        assert eng.recover().advanced[0].status == Status.DONE
        (pay, _) = eng.intents("t-1")
        assert (pay["status"], pay["attempts"]) == ("completed", 2)
    assert world.count("pay") == 2  # the person decided it had not happened


def test_a_reconciler_settles_an_unknown_outcome_without_asking(tmp_path: Path):
    world = World()
    asked: list[str] = []

    def reconcile(key: str, amount: int) -> Outcome:
        asked.append(key)
        return Outcome.done(f"paid {amount} (found by key)")

    home = _lost_outcome(tmp_path, world, reconcile=reconcile)
    with BideSaver.from_home(home, durability="fast") as saver:
        out = one_node_graph(world, reconcile=reconcile).compile(
            checkpointer=saver).invoke(None, CFG)
    assert out["log"] == ["paid 5 (found by key)", "after"]
    assert world.count("pay") == 1 and len(asked) == 1


def test_an_idempotent_tool_is_repeated_with_the_same_key(tmp_path: Path):
    world = World()
    home = _lost_outcome(tmp_path, world, idempotent=True)
    with BideSaver.from_home(home, durability="fast") as saver:
        one_node_graph(world, idempotent=True).compile(checkpointer=saver).invoke(None, CFG)
    keys = [k for n, k in world.calls if n == "pay"]
    assert len(keys) == 2 and keys[0] == keys[1]  # the system it calls sees one key


class ShipsOnce(BaseChatModel):
    """A scripted model: asks for ``ship`` until it has seen a tool's answer, then ends."""

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                  **kw: Any) -> ChatResult:
        if any(isinstance(m, ToolMessage) for m in messages):
            msg = AIMessage(content="done")
        else:
            msg = AIMessage(content="", tool_calls=[
                {"name": "ship", "args": {"item": "box"}, "id": "call-1"}])
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(self, tools: Any, **kw: Any) -> ShipsOnce:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"


def asking_tool_graph(world: World) -> StateGraph:
    """One node: a bide tool whose body asks a person with its own ``interrupt()``."""
    @durable_tool
    def push(patch: str) -> str:
        if interrupt({"question": f"push {patch}?"}) != "yes":
            return "not pushed"
        world.calls.append(("push", patch))
        return f"pushed {patch}"

    b = StateGraph(S)
    b.add_node("work", lambda s: {"log": [push(patch="p-9")]})
    b.add_edge(START, "work")
    b.add_edge("work", END)
    return b


def test_a_settled_question_never_takes_the_answer_meant_for_the_tools_own_interrupt(
        tmp_path: Path):
    """The call was prepared, then the worker died before its body asked its question:
    bide asks about the unknown outcome (retry), then the body asks its own. The retry was
    decided in the store and the thread resumed with it; the body's ``interrupt()`` must
    pause for its own answer, not receive the retry (LangGraph matches a task's resume
    values by order: bide's question took slot 0 once and gave it to the body after)."""
    world = World()
    home = tmp_path / "h"
    faults.configure("after_intent_prepared:1:raise")
    with BideSaver.from_home(home, durability="fast") as saver:
        with pytest.raises(faults.InjectedFault):
            asking_tool_graph(world).compile(checkpointer=saver).invoke({"log": []}, CFG)
    faults.configure(None)
    with bide.open(home, durability="fast") as eng:
        serve_graphs(eng, asking_tool_graph(world))
        eng.resume("t-1")
        (req,) = eng.pending()
        assert req["kind"] == "reconciliation"
        eng.decide(req["approval_id"], "retry", by="ann")
        assert eng.resume("t-1").status == Status.WAITING_INPUT  # the body's own question
        (req,) = eng.pending()
        assert (req["kind"], req["question"]) == ("input", "push p-9?")
        eng.answer(req["approval_id"], "yes")
        assert eng.resume("t-1").status == Status.DONE
        assert eng.state("t-1")["log"] == ["pushed p-9"]
    assert world.calls == [("push", "p-9")]


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")  # still the prebuilt
def test_a_reconciled_call_of_the_prebuilt_agent_replays_as_its_tool_message(tmp_path: Path):
    """A reconciler's result for a call ToolNode made is that call's ToolMessage (a bare
    value there fails the graph: "Tool ship returned unexpected type")."""
    from langgraph.prebuilt import create_react_agent

    world = World()

    @tool
    def ship(item: str) -> str:
        """Ship the item."""
        world.calls.append(("ship", current_call().idempotency_key))
        return f"shipped {item}"

    def found(key: str, item: str) -> Outcome:
        return Outcome.done(f"shipped {item} (found)") if ("ship", key) in world.calls \
            else Outcome.not_done()

    def agent() -> Any:
        return create_react_agent(ShipsOnce(), [durable_tool(ship, reconcile=found)])

    home = tmp_path / "h"
    faults.configure("after_tool_effect:1:raise")
    with BideSaver.from_home(home, durability="fast") as saver:
        with pytest.raises(faults.InjectedFault):
            agent().copy(update={"checkpointer": saver}).invoke(
                {"messages": [("user", "go")]}, CFG)
    faults.configure(None)
    with BideSaver.from_home(home, durability="fast") as saver:
        out = agent().copy(update={"checkpointer": saver}).invoke(None, CFG)
    messages = [(m.type, m.content) for m in out["messages"]]
    assert ("tool", "shipped box (found)") in messages and messages[-1] == ("ai", "done")
    assert [n for n, _ in world.calls] == ["ship"]


def parallel_questions() -> StateGraph:
    def ask(name: str) -> Any:
        return lambda s: {"log": [(name, interrupt({"question": f"{name}?"}))]}

    b = StateGraph(S)
    b.add_node("a", ask("a"))
    b.add_node("b", ask("b"))
    b.add_edge(START, "a")
    b.add_edge(START, "b")
    b.add_edge("a", END)
    b.add_edge("b", END)
    return b


def test_parallel_interrupts_each_get_a_decision_and_resume_together(tmp_path: Path):
    home = tmp_path / "h"
    with BideSaver.from_home(home, durability="fast") as saver:
        out = parallel_questions().compile(checkpointer=saver).invoke({"log": []}, CFG)
        assert len(out["__interrupt__"]) == 2
    with bide.open(home, durability="fast") as eng:
        serve_graphs(eng, parallel_questions())
        asked = {p["action"]: p["approval_id"] for p in eng.pending()}
        assert set(asked) == {"a?", "b?"}
        assert eng.get("t-1").status == Status.WAITING_INPUT
        eng.answer(asked["a?"], "yes")
        assert eng.recover().advanced == []  # b is not answered yet: nothing resumes
        eng.answer(asked["b?"], {"n": 2})
        (run,) = eng.recover().advanced
        assert run.status == Status.DONE
        _, values = bide.langgraph.thread_state(eng.store, "t-1")
    assert sorted(map(tuple, values["log"])) == [("a", "yes"), ("b", {"n": 2})]


def test_an_expired_interrupt_resumes_as_a_rejection(tmp_path: Path):
    home = tmp_path / "h"
    b = StateGraph(S)
    b.add_node("ask", lambda s: {"log": [interrupt("ship it?")]})
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    with BideSaver.from_home(home, durability="fast", interrupt_ttl=60) as saver:
        b.compile(checkpointer=saver).invoke({"log": []}, CFG)
    with bide.open(home, durability="fast", clock=lambda: 4e9) as eng:  # long after
        serve_graphs(eng, b)
        (run,) = eng.recover().advanced
        assert run.status == Status.DONE
        _, values = bide.langgraph.thread_state(eng.store, "t-1")
        with eng.store.reader() as r:
            (req,) = list(r.approvals())
        assert (req.decision, req.by, req.reason) == ("reject", "bide", "expired")
    assert values["log"][0]["decision"] == "reject"


def test_a_decision_for_an_interrupt_that_changed_is_refused(tmp_path: Path):
    home = tmp_path / "h"
    with BideSaver.from_home(home, durability="fast") as saver:
        parallel_questions().compile(checkpointer=saver).invoke({"log": []}, CFG)
    with bide.open(home, durability="fast") as eng:
        serve_graphs(eng, parallel_questions())
        req = eng.pending()[0]
        (home / "inbox" / "d.json").write_text(json.dumps({
            "approval_id": req["approval_id"], "decision": "answer", "value": "yes",
            "run_id": "t-1", "digest": "sha256:" + "0" * 64, "by": "ann"}))
        bide.Watcher(eng, log=lambda line: None).once()
        (error,) = (home / "inbox" / "rejected").glob("*.error.json")
        assert "digest does not match" in error.read_text()
        assert len(eng.pending()) == 2  # nothing recorded


def test_a_submitted_thread_is_started_by_the_driver(tmp_path: Path):
    world = World()
    with bide.open(tmp_path / "h", durability="fast") as eng:
        serve_graphs(eng, {"payments": one_node_graph(world)})
        run_id = eng.submit("payments", {"log": []}, run_id="t-9")
        assert eng.get(run_id).status == Status.PENDING
        (run,) = eng.recover().advanced
        assert (run.run_id, run.status) == ("t-9", Status.DONE)
        head = eng._head("t-9")
        assert head.lease_owner is None  # released when the invoke returned
    assert world.count("pay") == 1


def test_a_worker_fenced_off_a_thread_cannot_write_its_checkpoint(tmp_path: Path):
    """A watcher worker whose lease was taken over: its saver commits are refused."""
    world = World()
    with bide.open(tmp_path / "h", durability="fast", lease_ttl=0.01) as eng:
        driver = serve_graphs(eng, {"payments": one_node_graph(world)})
        eng.submit("payments", {"log": []}, run_id="t-9")
        first = eng._acquire("t-9")
        import time
        time.sleep(0.05)  # its lease ends...
        eng.owner = "another:1:worker"
        eng._acquire("t-9")  # ...and another worker takes the thread over
        with pytest.raises(StaleLease):
            driver.advance("t-9", first)
    assert world.count("pay") == 0  # its tool's prepare was refused before the call


def test_async_tools_and_ainvoke(tmp_path: Path):
    made: list[int] = []

    @tool
    async def lookup(n: int) -> int:
        """Look n up."""
        made.append(n)
        return n + 1

    wrapped = durable_tool(lookup)

    async def node(state: S) -> dict[str, Any]:
        return {"log": [await wrapped.ainvoke({"n": 1})]}

    b = StateGraph(S)
    b.add_node("work", node)
    b.add_edge(START, "work")
    b.add_edge("work", END)

    async def go() -> Any:
        saver = BideSaver(tmp_path / "h", durability="fast")
        try:
            graph = b.compile(checkpointer=saver)
            first = await graph.ainvoke({"log": []}, CFG)
            again = await graph.ainvoke(None, {"configurable": {"thread_id": "t-1"}})
            return first, again
        finally:
            saver.close()

    first, _ = asyncio.run(go())
    assert first["log"] == [2] and made == [1]


def test_a_tool_outside_a_bide_graph_says_what_is_missing():
    @durable_tool
    def pay(amount: int) -> int:
        return amount

    with pytest.raises(bide.ToolOutsideNode, match="BideSaver"):
        pay(amount=1)


def test_the_prebuilt_agent_with_bide_tools_through_the_cli(tmp_path: Path):
    """The README's story: the agent stops at its interrupt, the process ends, a decision
    file lands in the inbox, ``bide watch --once`` finishes the thread."""
    import subprocess
    import sys
    apps = Path(__file__).parent / "apps"
    home, effects = tmp_path / "h", tmp_path / "effects"
    env = {**os.environ, "LG_EFFECTS": str(effects)}
    started = subprocess.run([sys.executable, str(apps / "lg_agent_app.py"), str(home),
                              str(effects), "start", "t-1"], capture_output=True, text=True,
                             timeout=120, env=env)
    assert "STOPPED WAITING_INPUT" in started.stdout, started.stderr
    (request,) = (home / "requests").glob("*.json")
    decision = {**json.loads(request.read_text())["answer_file"], "value": "yes", "by": "ann"}
    (home / "inbox" / ".d.tmp").write_text(json.dumps(decision))
    os.replace(home / "inbox" / ".d.tmp", home / "inbox" / "d.json")
    watched = subprocess.run([sys.executable, "-m", "bide.cli", "watch", "--home", str(home),
                              "--app", "lg_agent_app:agent", "--once"], cwd=apps,
                             capture_output=True, text=True, timeout=120, env=env)
    assert watched.returncode == 0, watched.stderr
    assert "run t-1: DONE" in watched.stdout, watched.stdout
    lines = effects.read_text().split()
    assert lines[0::2] == ["charge", "refund"]
    shown = subprocess.run([sys.executable, "-m", "bide.cli", "intents", "t-1", "--home",
                            str(home), "--json"], capture_output=True, text=True, timeout=60)
    assert [i["status"] for i in json.loads(shown.stdout)] == ["completed", "completed"]


def test_a_thread_resumed_by_its_caller_keeps_its_list_channels_whole(tmp_path: Path):
    """Resumed with Command(resume=...) past an inbox request, the saver closes the request
    in the checkpoint's commit; the list channels' deltas must still chain onto their own
    values (found by LangGraph's own time-travel tests)."""
    from langgraph.types import Command

    class Named(TypedDict):
        log: Annotated[list, operator.add]
        name: str

    b = StateGraph(Named)
    b.add_node("a", lambda s: {"log": ["a"]})
    b.add_node("ask", lambda s: {"name": (who := interrupt("who?")), "log": [f"asked {who}"]})
    b.add_node("b", lambda s: {"log": [f"hi {s['name']}"]})
    b.add_edge(START, "a")
    b.add_edge("a", "ask")
    b.add_edge("ask", "b")
    b.add_edge("b", END)
    with BideSaver.from_home(tmp_path / "h", durability="fast") as saver:
        graph = b.compile(checkpointer=saver)
        graph.invoke({"log": []}, CFG)
        whole = ["a", "asked bob", "hi bob"]
        assert graph.invoke(Command(resume="bob"), CFG)["log"] == whole
        history = [s.values.get("log") for s in graph.get_state_history(CFG)]
        assert history[:3] == [whole, whole[:2], ["a"]]
        with saver.threads.store.reader() as r:
            (req,) = list(r.approvals())
        assert (req.decision, req.by) == ("answer", "langgraph")  # closed: not pending
