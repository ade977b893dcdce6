"""The torture suite's workloads, the operator that drives a run to its end, and the facts.

Every workload records each node execution and each real tool side effect as
one line appended to an effects file *outside* the store (the world's
counter). ``drive`` plays a correct operator: it starts the run if there is
none, resumes it after a crash or a failure, drops approval files into the
inbox and lets a watcher take them, and answers "outcome unknown" by looking
at the world (``mark_done`` with the real result if the effect happened,
``retry`` if it did not). It is stateless: run it in a fresh process after any
crash and it carries the run to the end.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import bide
from bide.bench.kit.crashkit import count_effects, record_effect
from bide.engine.human.inbox import drop_decision
from bide.engine.ops.watcher import Watcher
from bide.engine.run.context import idempotency_key
from bide.engine.run.held import HOLD_BOUND
from bide.formats import PendingWrite

RUN_ID = "r1"
WORKLOADS = ("chain", "fanout", "tools", "tools-held", "approval", "grow", "maintain", "map",
             "timer", "signal", "schedule", "child", "langgraph")
# "langgraph": a LangGraph ReAct agent with bide tools (lg_workload.py), when LangGraph is here
# "tools-held" is "tools" with held outcomes, the opt-in whose window the matrix must cover
POLICIES = {"tools-held": bide.Policy(tool_outcomes="with_next_commit")}
RESULTS: dict[str, Any] = {
    "send_email": "sent to ops@example.com",
    "create_ticket": {"ticket": "T-1"},
    "git_apply": {"sha": "abc"},
    "git_push": {"pushed": "p-9"},
    "charge": "charged",
    "notify": "notified",
    "ship": {"shipped": True},
}
NON_IDEMPOTENT = ("send_email", "git_push", "charge")  # no reconciler: a human decides
IDEMPOTENT = ("create_ticket", "notify")
RECONCILED = ("git_apply", "ship")
LONG_STEPS = 12
MAP_ITEMS = 4  # the map workload's Send tasks (2 at once)
BLOB = 40_000
NAP = 0.05  # the timer workload's sleep: short, so a trial waits little for its due time
SCHEDULE = "beat"  # the schedule workload's: every second; its one slot's run is the run
# the points the matrix kills a workload at (all by default): the schedule workload's own
# (its other boundaries are the engine's, which the other workloads cover)
MATRIX_POINTS = {"schedule": ("after_schedule_recorded", "after_slot_run_created")}


class World:
    """The effects file: what really happened, counted outside the store."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def log(self, line: str) -> None:
        record_effect(self.path, line)

    def lines(self) -> Counter[str]:
        return count_effects(self.path)

    def happened(self, tool: str, key: str) -> bool:
        return self.lines()[f"tool:{tool} {key}"] > 0


def _tools(world: World) -> dict[str, bide.Tool]:
    def make(name: str, **options: Any) -> bide.Tool:
        def fn(*args: Any, idempotency_key: str, **kwargs: Any) -> Any:
            world.log(f"tool:{name} {idempotency_key}")
            return RESULTS[name]

        if name in RECONCILED:
            options["reconcile"] = lambda key, *a, **k: (
                bide.Outcome.done(RESULTS[name]) if world.happened(name, key)
                else bide.Outcome.not_done())
        return bide.tool(name=name, **options)(fn)

    return {n: make(n, idempotent=n in IDEMPOTENT) for n in RESULTS}


def _then_work(result: Any) -> Any:
    """The node keeps working after its call: its outcome is committed alone
    (engine/run/held.py)."""
    time.sleep(10 * HOLD_BOUND)
    return result


def langgraph_here() -> bool:
    """Is LangGraph's prebuilt agent installed (the ``langgraph`` workload needs it)?"""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None
               for m in ("langgraph", "langgraph.prebuilt", "langchain_core"))


def warm(workload: str) -> None:
    """Import what a workload needs once, in the worker, before it forks trials."""
    if workload == "langgraph":
        from . import lg_workload  # noqa: F401


def build_flow(workload: str, world: World) -> bide.Flow:
    """The flow of a workload; each node logs ``node:<name>@<superstep>`` when it runs."""
    tools = _tools(world)
    flow = bide.Flow(f"torture-{workload}")
    flow.reducer("trail", bide.append)

    def node(name: str, body: Any = None, *, start: bool = False, after: tuple = (),
             concurrency: int = 8) -> None:
        def fn(state: Any, ctx: Any) -> Any:
            world.log(f"node:{task_label(name, ctx.task_id)}@{ctx.superstep}")
            out = {"trail": [name]}
            if body is not None:
                out.update(body(state, ctx))
            return out

        flow.node(fn, name=name, start=start, after=after, concurrency=concurrency)

    if workload in ("chain", "maintain", "grow"):
        blob = (lambda s, c: {f"blob_{c.node}_{c.superstep}": "x" * BLOB}) \
            if workload == "grow" else None
        for name in ("a", "b", "c"):
            node(name, blob, start=True)
        node("join", after=("a", "b", "c"))
        node("loop", lambda s, c: {"n": s.get("n", 0) + 1, **(blob(s, c) if blob else {})},
             after=("join",))
        flow.route("loop", lambda s: "loop" if s["n"] < 3 else bide.END)
    elif workload == "fanout":
        def flaky(state: Any, ctx: Any) -> Any:
            if world.lines()["node:c@0"] == 1:  # its first execution ever fails
                raise RuntimeError("c fails the first time")
            return {"c": "ok"}

        node("a", lambda s, c: {"a": 1}, start=True)
        node("b", lambda s, c: {"b": 2}, start=True)
        node("c", flaky, start=True)
        node("d", lambda s, c: {"d": s["a"] + s["b"]}, after=("a", "b", "c"))
    elif workload in ("tools", "tools-held"):
        node("act", lambda s, c: {
            "email": c.tool(tools["send_email"], "ops@example.com", body="disk full"),
            "ticket": c.tool(tools["create_ticket"], "disk full"),
            "patch": c.tool(tools["git_apply"], "p-9")}, start=True)
        node("other", lambda s, c: {"other": _then_work(c.tool(tools["create_ticket"], "other"))},
             start=True)
        node("after", lambda s, c: {"done": True}, after=("act", "other"))
    elif workload == "approval":
        node("search_logs", lambda s, c: {"logs": c.tool(tools["create_ticket"], "logs")},
             start=True)
        node("prepare_patch", lambda s, c: {"patch": "p-9"}, start=True)

        def apply(state: Any, ctx: Any) -> Any:
            if not ctx.approve("apply patch", payload={"patch": state["patch"]},
                               expires_in=state.get("expires_in")):
                return {"applied": False}
            return {"applied": ctx.tool(tools["git_push"], state["patch"])}

        node("apply_patch", apply, after=("search_logs", "prepare_patch"))
    elif workload == "map":  # plan -> one Send task per item (2 at once) -> gather
        def item(state: Any, ctx: Any) -> Any:
            i = state["item"]
            out = {"shipped": [ctx.tool(tools["ship"], i)], "told": [ctx.tool(tools["notify"], i)]}
            if i == 0:  # a non-idempotent call in a Send task: an unknown outcome asks a human
                out["charged"] = ctx.tool(tools["charge"], i)
            return out

        node("plan", lambda s, c: {"items": list(range(MAP_ITEMS))}, start=True)
        node("item", item, concurrency=2)
        node("gather", lambda s, c: {"count": len(s["shipped"])}, after=("item",))
        flow.route("plan", lambda s: [bide.Send("item", {"item": i}) for i in s["items"]])
        flow.reducer("shipped", bide.append)
        flow.reducer("told", bide.append)
    elif workload == "timer":  # a tool call, a durable sleep, then a non-idempotent call
        def nap(state: Any, ctx: Any) -> Any:
            ticket = ctx.tool(tools["create_ticket"], "nap")
            ctx.sleep(NAP)
            return {"ticket": ticket, "email": ctx.tool(tools["send_email"], "after the nap")}

        node("nap", nap, start=True)
        node("after", lambda s, c: {"done": True}, after=("nap",))
    elif workload == "signal":  # one signal sent before the wait (API), one after (a file)
        def listen(state: Any, ctx: Any) -> Any:
            first = ctx.wait_for("parcel")
            out = {"first": first, "shipped": ctx.tool(tools["ship"], first)}
            second = ctx.wait_for("parcel")
            return {**out, "second": second, "told": ctx.tool(tools["notify"], second)}

        node("listen", listen, start=True)
        node("close", after=("listen",))
    elif workload == "schedule":  # a run a schedule started: one slot, then unscheduled
        node("tick", lambda s, c: {"charged": c.tool(tools["charge"], "tick")}, start=True)
        node("after", after=("tick",))
    elif workload == "child":  # the run starts two child runs of its own flow, one by one
        def spawn(state: Any, ctx: Any) -> Any:
            if state.get("depth"):  # a child: a reconciled call and an idempotent one
                k = state["k"]
                return {"shipped": ctx.tool(tools["ship"], f"kid{k}"),
                        "told": ctx.tool(tools["notify"], f"kid{k}")}
            return {"kids": [ctx.child(flow.name, {"depth": 1, "k": k}, key=f"k{k}")["shipped"]
                             for k in (0, 1)]}

        node("spawn", spawn, start=True)
        node("after", after=("spawn",))
    elif workload == "long":
        def step(state: Any, ctx: Any) -> Any:
            i = state.get("i", 0)
            return {"i": i + 1, f"c{i}": ctx.tool(tools["charge"], i),
                    f"n{i}": ctx.tool(tools["notify"], i), f"s{i}": ctx.tool(tools["ship"], i)}

        node("begin", start=True)
        node("side", lambda s, c: {"side": c.tool(tools["notify"], "side")}, start=True)
        node("step", step, after=("begin", "side"))
        flow.route("step", lambda s: "step" if s["i"] < LONG_STEPS else bide.END)
    else:
        raise ValueError(f"unknown workload {workload!r}")
    return flow


def by_tool(effects: Counter[str]) -> Counter[str]:
    """The effects with each tool call's key left out (``tool:charge *``): a thread's keys
    are new in every run of it, so runs compare by the tools they called."""
    out = Counter[str]()
    for line, n in effects.items():
        out[f"{line.split()[0]} *" if line.startswith("tool:") else line] += n
    return out


def one_key_per_call(effects: Counter[str]) -> list[str]:
    """Each tool of the LangGraph workload is called once in its script: a second key for
    it is the call made again as another call (a step re-run from a lost checkpoint)."""
    keys = Counter(line.split()[0] for line in effects if line.startswith("tool:"))
    return [f"{tool} was called under {n} different keys" for tool, n in keys.items() if n > 1]


def task_label(node: str, task: str) -> str:
    """A Send task's items are told apart in the world's counter: ``item[2]``."""
    return f"{node}[{task.rpartition(':')[2]}]" if node in SENT else node


SENT = ("item",)  # the nodes that run only as Send tasks (the map workload's)


def open_engine(home: Path, workload: str, durability: str) -> bide.Engine:
    map_size = 1 << 17 if workload == "grow" else 1 << 22
    return bide.open(home, durability=durability, map_size=map_size)


def drive(home: Path, workload: str, durability: str, world: World) -> dict[str, Any]:
    """Carry the workload's run to its end from wherever it stands; what the operator saw."""
    seen: list[str] = []
    counts = Counter[str]()
    for _ in range(40):
        with open_engine(home, workload, durability) as eng:
            if workload == "langgraph":
                from . import lg_workload

                status = lg_workload.step(eng, _head(eng), world, counts)
            else:
                eng.register(build_flow(workload, world))
                status = _step(eng, workload, world, counts)
            seen.append(status)
        if status in ("FINISHED", "GAVE_UP"):
            break
        if workload == "maintain" and status == "MAINTAIN":
            _maintain(home)
            counts["compacted"] += 1
    return {"seen": seen, **counts}


def _step(eng: bide.Engine, workload: str, world: World, counts: Counter[str]) -> str:
    head = _head(eng)
    if workload == "schedule" and (moved := _schedule_step(eng, head)) is not None:
        return moved
    if head is None:
        if workload == "signal":  # its first signal is sent before the node waits
            eng.submit(f"torture-{workload}", input={"n": 0}, run_id=RUN_ID)
        else:
            eng.start(f"torture-{workload}", input={"n": 0}, run_id=RUN_ID,
                      policy=POLICIES.get(workload))
        return "STARTED"
    status = head.status
    if status == "DONE":
        if workload == "maintain" and not counts["compacted"]:
            bide_prune(eng)
            return "MAINTAIN"
        return "FINISHED"
    if workload == "signal":
        _send_signals(eng, head)
    if status in ("WAITING_APPROVAL", "WAITING_SIGNAL"):
        if status == "WAITING_APPROVAL":
            _approve_through_inbox(eng, head)
        watch_once(eng, counts)
    elif status == "SLEEPING":  # wait out the due time; a watcher resumes it
        time.sleep(max(0.0, head.waiting["until"] - time.time()))
        watch_once(eng, counts)
    elif status == "NEEDS_RECONCILIATION":
        counts["unknown_surfaced"] += 1
        _reconcile(eng, head, world)
        resume(eng, head.run_id, counts)
    elif status == "FAILED" and (workload != "fanout" or counts["failed"] >= 2):
        return "GAVE_UP"
    else:
        counts["failed"] += status == "FAILED"
        resume(eng, head.run_id, counts)
    return status


def watch_once(eng: bide.Engine, counts: Counter[str]) -> None:
    """What the operator does for a run that waits on the inbox: one watcher pass."""
    Watcher(eng, log=lambda line: None).once()
    counts["watched"] += 1


def resume(eng: bide.Engine, run_id: str, counts: Counter[str]) -> None:
    eng.resume(run_id)
    counts["resumed"] += 1


def _head(eng: bide.Engine) -> Any:
    with eng.store.reader() as r:
        return r.head(_run_id(r))


def _run_id(r: Any) -> str:
    """The workload's run: ``r1``, or the one the schedule workload's slot started."""
    prefix = f"s-{SCHEDULE}-"
    return next((k.decode() for k, _ in r.scan("runs", prefix.encode())), RUN_ID)


def _schedule_step(eng: bide.Engine, head: Any) -> str | None:
    """Record the schedule, start its first due slot's run as a watcher does, then remove
    the schedule (once its run exists: a crash in between must not start a second slot)."""
    if head is not None:
        if any(s.name == SCHEDULE for s in eng.schedules()):
            eng.unschedule(SCHEDULE)
            return "UNSCHEDULED"
        return None
    found = [s for s in eng.schedules() if s.name == SCHEDULE]
    if not found:
        eng.schedule(SCHEDULE, "torture-schedule", every=1)
        return "SCHEDULED"
    time.sleep(max(0.0, found[0].next_due - time.time()) + 0.002)
    Watcher(eng, log=lambda line: None).once()  # starts the slot's run, then runs it
    return "FIRED"


def bide_prune(eng: bide.Engine) -> None:
    from bide.engine.upkeep.maintenance import prune

    prune(eng.store, keep=1)


def _maintain(home: Path) -> None:
    from bide.engine.upkeep.compaction import compact

    compact(home)


def _approve_through_inbox(eng: bide.Engine, head: Any) -> None:
    """Drop an approval file once; a crashed watcher's claimed file is taken again."""
    aid = head.waiting["approval_id"]
    with eng.store.reader() as r:
        req = r.approval(aid)
    if req is not None and req.decision is None and not dropped(eng, aid):
        drop_decision(eng.home, aid, "approve", by="operator", reason="torture",
                      run_id=req.run_id, digest=req.digest)


def dropped(eng: bide.Engine, approval_id: str) -> bool:
    """Is a decision file for ``approval_id`` in the inbox, or claimed by a watcher?"""
    inbox = eng.home / "inbox"
    return any(n.startswith(approval_id) for d in (inbox, inbox / ".work") if d.exists()
               for n in os.listdir(d))


def _send_signals(eng: bide.Engine, head: Any) -> None:
    """The first signal by the API before the run waits, the second as an inbox file once
    it waits for it; never again once sent (the queue, and files not yet taken, say so)."""
    from bide.engine.human.signal_files import drop_signal
    from bide.engine.run.signals import Queue

    with eng.store.reader() as r:
        sent = len(Queue.read(r, RUN_ID).sent)
    inbox = eng.home / "inbox"
    sent += sum(1 for d in (inbox, inbox / ".work") if d.exists() for n in os.listdir(d)
                if n.startswith("signal-"))
    if sent == 0:
        eng.signal(RUN_ID, "parcel", "p-1", by="operator")
    elif sent == 1 and head.status == "WAITING_SIGNAL":
        drop_signal(inbox, RUN_ID, "parcel", "p-2", by="operator")


def _reconcile(eng: bide.Engine, head: Any, world: World) -> None:
    """Decide an unknown outcome the way a careful human would: look at the world."""
    waiting = head.waiting
    key = idempotency_key(head.run_id, waiting["intent"])
    if world.happened(waiting["tool"], key):
        eng.decide(waiting["approval_id"], "mark_done", by="operator",
                   reason="the effect is there", result=RESULTS[waiting["tool"]])
    else:
        eng.decide(waiting["approval_id"], "retry", by="operator", reason="never happened")


def facts(home: Path, workload: str, durability: str) -> dict[str, Any]:
    """What the store holds now: committed tasks, intents in doubt, records present."""
    out: dict[str, Any] = {"exists": (home / "store" / "data.mdb").exists(), "committed": [],
                           "unknown": [], "seqs": [], "last_seq": 0}
    if not out["exists"]:
        return out
    with open_engine(home, workload, durability) as eng:
        with eng.store.reader() as r:
            out["last_seq"] = r.last_seq()
            out["seqs"] = [seq for seq, _ in r.log()]
            rid = _run_id(r)
            if r.head(rid) is None:
                return out
            for seq, rtype in r.run_entries(rid):
                if rtype == "pending_write":
                    w = r.record(seq)
                    assert isinstance(w, PendingWrite)
                    out["committed"].append(f"node:{task_label(w.node, w.task)}@{w.superstep}")
            out["unknown"] = [i.tool for i in r.intents(rid)
                              if i.status in ("prepared", "unknown")]
    return out


def final(home: Path, workload: str, durability: str) -> dict[str, Any]:
    """The run's end: status, state, intents, and what ``bide doctor`` says."""
    from bide.engine.upkeep.maintenance import doctor

    with open_engine(home, workload, durability) as eng:
        report = doctor(eng.store)
        head = _head(eng)
        if workload == "langgraph" and head is not None:
            from . import lg_workload

            state = lg_workload.state(eng, head.run_id)
        else:
            state = eng.state(head.run_id) if head else None
        if workload == "schedule" and state is not None:  # one slot's run, not two
            state["slot_runs"] = len(eng.runs(flow="torture-schedule"))
        return {"status": head.status if head else None,
                "state": state,
                "doctor": [str(p) for p in report.problems] if not report.ok else [],
                "readers_cleared": eng.store.reader_check()}

