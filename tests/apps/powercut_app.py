"""A worker for power-cut tests: runs that call a tool at every step, acknowledging out loud.

usage: powercut_app.py run HOME ACKS EFFECTS STEPS RUN_ID...
       powercut_app.py check STEPS RUN_IDS IMAGE...

``run`` runs the named durable runs at once (one thread each), each STEPS steps of
one tool call. The moment ``ctx.tool`` returns, and the moment a run ends, a line
goes to ACKS ("tool RUN I RESULT", "done RUN"): what the caller was told is
durable. Each real call appends "RUN I" to EFFECTS.

``check`` opens, one after another, stores rebuilt as a power cut left them
(tests/powercut/crash_image.py): each IMAGE directory holds ``home/``, ``told`` (the
acknowledged lines) and, for the calls a resume makes, a new ``effects``. For each
it prints one JSON line: whether ``doctor`` found the store whole, which
acknowledged outcomes or ends it lacks, which acknowledged calls the resume made
again, and the runs that did not end with every step's result once. RUN_IDS are
comma-separated.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import bide

_lock = threading.Lock()
effects = ""  # where this process's real calls are counted


def say(acks: str, line: str) -> None:
    with _lock:  # one write per line: the write log orders it
        fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


@bide.tool(idempotent=True)
def bump(run_id: str, i: int, *, idempotency_key: str) -> str:
    with _lock, open(effects, "a") as f:
        f.write(f"{run_id} {i}\n")
    return f"ok-{run_id}-{i}"


def make_flow(steps: int, acks: str | None) -> bide.Flow:
    flow = bide.Flow("powercut")

    @flow.node(start=True)
    def step(state, ctx):
        i = state.get("n", 0)
        result = ctx.tool(bump, ctx.run_id, i)
        if acks is not None:
            say(acks, f"tool {ctx.run_id} {i} {result}")
        return {"n": i + 1, "results": [*state.get("results", []), result]}

    flow.route("step", lambda state: "step" if state["n"] < steps else bide.END)
    return flow


def run(home: str, acks: str, steps: int, names: list[str]) -> None:
    with bide.open(home, durability=os.environ.get("BIDE_TEST_DURABILITY", "durable")) as engine:
        engine.register(make_flow(steps, acks))

        def one(run_id: str) -> None:
            if engine.start("powercut", run_id=run_id).status == bide.Status.DONE:
                say(acks, f"done {run_id}")

        threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)


def check(image: Path, steps: int, names: list[str]) -> dict:
    told = (image / "told").read_text().splitlines()
    with bide.open(image / "home", durability="durable") as engine:
        engine.register(make_flow(steps, None))
        report: dict = {"image": image.name, "doctor": engine.doctor().to_dict(),
                        "missing": [], "again": [], "unfinished": []}
        known = {r.run_id: r for r in engine.runs()}
        for line in told:
            kind, run_id, *rest = line.split()
            if kind == "done" and (run_id not in known
                                   or known[run_id].status != bide.Status.DONE):
                report["missing"].append(line)
            if kind == "tool":
                done = [i for i in engine.intents(run_id) if i.get("status") == "completed"] \
                    if run_id in known else []
                if not any(i.get("result") == rest[1] for i in done):
                    report["missing"].append(line)
        for run_id in names:  # every run resumed to its end: each step's result once
            if run_id not in known:
                continue  # not started before the cut: nothing of it was acknowledged
            got = engine.get(run_id)
            if got.status != bide.Status.DONE:
                got = engine.resume(run_id)
            expected = [f"ok-{run_id}-{i}" for i in range(steps)]
            if got.status != bide.Status.DONE or got.state.get("results") != expected:
                report["unfinished"].append([run_id, got.status.value, got.state.get("results")])
        called = set(Path(effects).read_text().splitlines()) if Path(effects).exists() else set()
        acked = {" ".join(line.split()[1:3]) for line in told if line.startswith("tool ")}
        report["again"] = sorted(acked & called)
        report["doctor_after"] = engine.doctor().ok
    return report


if __name__ == "__main__":
    action = sys.argv[1]
    if action == "run":
        home, acks, effects, steps = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
        run(home, acks, steps, sys.argv[6:])
    else:
        steps, names = int(sys.argv[2]), sys.argv[3].split(",")
        for image in map(Path, sys.argv[4:]):
            effects = str(image / "effects")
            print(json.dumps(check(image, steps, names)), flush=True)
