"""``bide demo``: the whole story in one command, narrated, with real processes.

1. a worker runs the incident flow and is killed mid-superstep;
2. a new process resumes it: finished nodes are not redone; it pauses for approval;
3. an approval file lands in the inbox; a watcher process takes it, applies the
   patch, and dies between the side effect and its record;
4. another watcher finds the outcome unknown, asks the reconciler, finishes.

Repeatable: each demo is a new run (``r-42``, then ``r-42-2``… in a home that
already has one) with its own effects file, ``<home>/demo-effects/<run>.log``, so
a second demo in the same home neither reads the first one's world nor touches
it. What step 2 says about each tool call is read from the intent log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import Decision, IntentStatus, Status
from .. import open as open_engine
from ..engine.human.inbox import drop_decision
from ..engine.read.inspect import show

RUN = "r-42"
NODES_AND_TOOLS = (("search_logs", "fetch_logs"), ("prepare_patch", "draft_patch"))


def run_demo(home: Path | None = None, say: Callable[[str], None] = print) -> int:
    home = Path(home) if home else Path(tempfile.mkdtemp(prefix="bide-demo-")) / "home"
    run_id = _new_run_id(home)
    effects = home / "demo-effects" / f"{run_id}.log"
    effects.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "BIDE_DEMO_EFFECTS": str(effects)}
    env.pop("BIDE_FAULT", None)
    say(f"bide demo — home: {home}, run: {run_id}\n")

    say("1. A worker starts the incident flow: search_logs and prepare_patch run in parallel,")
    say("   each calling a tool through the intent log. We kill the worker (SIGKILL) right")
    say("   after the first node's output is committed.")
    out = _child(env, "after_pending_write:1:kill", "-m", "bide.bench.demo_app", str(home),
                 "start", run_id)
    if out.returncode != -9:
        return _went_wrong(say, "the worker", out)
    say(f"   worker exit code: {out.returncode} (killed). World so far: {_tally(effects)}")
    with open_engine(home) as eng:
        before = {i["tool"]: i for i in eng.intents(run_id)}
        kept = set(show(eng, run_id)["pending_writes"])
    say(f"   Committed before the kill: {', '.join(sorted(kept)) or 'nothing'}.\n")

    say("2. A new process resumes the run from its last checkpoint.")
    _child(env, None, "-m", "bide.bench.demo_app", str(home), "resume", run_id)
    with open_engine(home) as eng:
        run = eng.get(run_id)
        after = {i["tool"]: i for i in eng.intents(run_id)}
        snapshot = {"run_id": run_id, "state_version": run.state_version,
                    "status": run.status.value, "committed": run.committed,
                    "waiting": run.waiting}
    world = _tally(effects)
    say(f"   World now: {world}")
    for node, tool in NODES_AND_TOOLS:
        say("   " + resumed_node_story(node, tool, node in kept, before.get(tool),
                                       after.get(tool), world))
    if not run.waiting or run.waiting.get("type") != "approval":
        say(f"   The run should wait for approval but is {run.status.value}: {run.error}")
        return 1
    say("   apply_patch asked for approval and the worker exited. The run, as `bide show`:")
    say("   " + json.dumps(snapshot) + "\n")

    say("3. Someone approves: a decision file is renamed into the inbox. A watcher process")
    say("   takes it and resumes the run — and we kill it right after git_apply changed the")
    say("   world, before bide could record that it did.")
    drop_decision(home, run.waiting["approval_id"], Decision.APPROVE, by="alice",
                  reason="looks right")
    out = _child(env, "after_tool_effect:1:kill", "-m", "bide.cli", "watch", "--home", str(home),
                 "--app", "bide.bench.demo_app:flow", "--once")
    if out.returncode != -9:
        return _went_wrong(say, "the watcher", out)
    say(f"   watcher exit code: {out.returncode} (killed). World: {_tally(effects)}\n")

    say("4. Another watcher starts. The git_apply intent has no outcome: outcome unknown.")
    say("   bide does not guess: it asks the tool's reconciler, which finds the patch applied.")
    _child(env, None, "-m", "bide.cli", "watch", "--home", str(home), "--app",
           "bide.bench.demo_app:flow", "--once")
    with open_engine(home) as eng:
        run = eng.get(run_id)
        apply = next((i for i in eng.intents(run_id) if i["tool"] == "git_apply"), None)
    world = _tally(effects)
    if apply is None:
        say(f"   run status: {run.status.value}; git_apply was never called: {run.error}")
        return 1
    say(f"   run status: {run.status.value}; git_apply intent: {apply['status']} via "
        f"{apply['via']}" + (" → outcome unknown → reconciled" if apply["via"] == "reconcile"
                             else ""))
    say(f"   World: {world}")
    once = world.get("git_apply", 0) == 1
    say(f"   git_apply happened {world.get('git_apply', 0)} time(s): "
        + ("nothing ran twice." if once else "DUPLICATED — this is a bug."))
    say("\nInspect what happened:")
    for cmd in ("runs", f"show {run_id}", f"log {run_id}", f"intents {run_id}",
                f"checkpoints {run_id}"):
        say(f"   bide {cmd} --home {home}")
    return 0 if run.status is Status.DONE and once else 1


def resumed_node_story(node: str, tool: str, kept: bool, before: dict[str, Any] | None,
                       after: dict[str, Any] | None, world: dict[str, int]) -> str:
    """What the resume did with one node and its tool call, as the records tell it.

    ``before``/``after`` are the tool's intent rows right after the kill and after
    the resume; ``world`` counts the node runs and tool calls that really happened.
    """
    runs, calls = world.get(f"node {node}", 0), world.get(tool, 0)
    seen = f"(node ran {runs}×, {tool} called {calls}×)"
    if kept:
        return f"{node}: its output was committed before the kill; it did not run again {seen}."
    if after is None:
        return f"{node}: ran again; its {tool} call is not in the log {seen}."
    key = after["idempotency_key"]
    if before is None:
        return (f"{node}: ran again; {tool} had not been called before the kill, so it was "
                f"called now with key {key} {seen}.")
    if before["status"] == IntentStatus.COMPLETED:
        return (f"{node}: ran again; {tool}'s intent was completed in the log, so its result "
                f"was returned without calling the tool {seen}.")
    return (f"{node}: ran again; {tool}'s intent was prepared with no outcome (outcome "
            f"unknown). The tool is idempotent, so it was called again with the same key "
            f"{key} (attempt {after['attempts']}) {seen}.")


def _new_run_id(home: Path) -> str:
    """``r-42``, or the first ``r-42-N`` not taken yet (the home is created if missing)."""
    with open_engine(home) as eng:
        taken = {r.run_id for r in eng.runs()}
    n = 1
    while (run_id := RUN if n == 1 else f"{RUN}-{n}") in taken:
        n += 1
    return run_id


def _went_wrong(say: Callable[[str], None], who: str,
                out: subprocess.CompletedProcess) -> int:
    say(f"   {who} should have been killed but exited with {out.returncode}:")
    say("   " + (out.stderr.strip() or out.stdout.strip() or "(no output)").replace("\n", "\n   "))
    return 1


def _child(env: dict[str, str], fault: str | None, *args: str) -> subprocess.CompletedProcess:
    child_env = dict(env)
    if fault:
        child_env["BIDE_FAULT"] = fault
    return subprocess.run([sys.executable, *args], env=child_env, capture_output=True,
                          text=True, timeout=120)


def _tally(effects: Path) -> dict[str, int]:
    lines = effects.read_text().splitlines() if effects.exists() else []
    return dict(Counter(line.split()[0] if not line.startswith("node ") else line
                        for line in lines))
