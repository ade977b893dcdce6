"""``bide demo``: the whole story in one command, narrated, with real processes.

1. a worker runs the incident flow and is killed mid-superstep;
2. a new process resumes it: finished nodes are not redone; it pauses for approval;
3. an approval file lands in the inbox; a watcher process takes it, applies the
   patch, and dies between the side effect and its record;
4. another watcher finds the outcome unknown, asks the reconciler, finishes.
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

from .. import open as open_engine
from ..engine.inbox import drop_decision

RUN = "r-42"


def run_demo(home: Path | None = None, say: Callable[[str], None] = print) -> int:
    home = Path(home) if home else Path(tempfile.mkdtemp(prefix="bide-demo-")) / "home"
    effects = home.parent / "demo-effects.log"
    env = {**os.environ, "BIDE_DEMO_EFFECTS": str(effects)}
    env.pop("BIDE_FAULT", None)
    say(f"bide demo — home: {home}\n")

    say("1. A worker starts the incident flow: search_logs and prepare_patch run in parallel,")
    say("   each calling a tool through the intent log. We kill the worker (SIGKILL) right")
    say("   after the first node's output is committed.")
    out = _child(env, "after_pending_write:1:kill", "-m", "bide.bench.demo_app", str(home),
                 "start", RUN)
    say(f"   worker exit code: {out.returncode} (killed). World so far: {_tally(effects)}\n")

    say("2. A new process resumes the run from its last checkpoint.")
    _child(env, None, "-m", "bide.bench.demo_app", str(home), "resume", RUN)
    with open_engine(home) as eng:
        run = eng.get(RUN)
        snapshot = {"run_id": RUN, "state_version": run.state_version, "status": run.status.value,
                    "committed": run.committed, "waiting": run.waiting}
    say(f"   World now: {_tally(effects)}")
    say("   The node whose output was committed before the kill did not run again; the one")
    say("   that was in flight ran again (its idempotent tool replayed from the intent log).")
    say("   apply_patch asked for approval and the worker exited. The run, as `bide show`:")
    say("   " + json.dumps(snapshot) + "\n")

    say("3. Someone approves: a decision file is renamed into the inbox. A watcher process")
    say("   takes it and resumes the run — and we kill it right after git_apply changed the")
    say("   world, before bide could record that it did.")
    drop_decision(home, run.waiting["approval_id"], "approve", by="alice", reason="looks right")
    out = _child(env, "after_tool_effect:1:kill", "-m", "bide.cli", "watch", "--home", str(home),
                 "--app", "bide.bench.demo_app:flow", "--once")
    say(f"   watcher exit code: {out.returncode} (killed). World: {_tally(effects)}\n")

    say("4. Another watcher starts. The git_apply intent has no outcome: outcome unknown.")
    say("   bide does not guess: it asks the tool's reconciler, which finds the patch applied.")
    _child(env, None, "-m", "bide.cli", "watch", "--home", str(home), "--app",
           "bide.bench.demo_app:flow", "--once")
    with open_engine(home) as eng:
        run = eng.get(RUN)
        apply = [i for i in eng.intents(RUN) if i["tool"] == "git_apply"]
    world = _tally(effects)
    say(f"   run status: {run.status.value}; git_apply intent: {apply[0]['status']} via "
        f"{apply[0]['via']} → outcome unknown → reconciled")
    say(f"   World: {world}")
    once = world.get("git_apply", 0) == 1
    say(f"   git_apply happened {world.get('git_apply', 0)} time(s): "
        + ("nothing ran twice." if once else "DUPLICATED — this is a bug."))
    say("\nInspect what happened:")
    for cmd in ("runs", f"show {RUN}", f"log {RUN}", f"intents {RUN}", f"checkpoints {RUN}"):
        say(f"   bide {cmd} --home {home}")
    return 0 if run.status.value == "DONE" and once else 1


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
