"""Flows that wait for signals (``ctx.wait_for``), for the signal tests.

Every node execution and every effect is one line in $BIDE_TEST_EFFECTS (outside
the store). Run as a worker: ``signal_app.py HOME ACTION RUN [ARGS]`` with ACTION
``submit``, ``start``, ``resume``, ``signal RUN NAME DATA_JSON``, ``drop RUN NAME
DATA_JSON`` (a signal file into the inbox), ``inbox RUN`` (process the inbox once, as
a watcher does). HOME is a directory or a postgresql:// URL (its local directory:
$SIGNAL_APP_LOCAL). Prints the run as JSON.
"""

from __future__ import annotations

import json
import os
import sys

import bide
from bide.bench.kit.crashkit import record_effect


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, line)


@bide.tool
def ship(first: str, second: str) -> str:
    effect(f"ship {first}+{second}")
    return f"{first}+{second}"


flow = bide.Flow("courier")


@flow.node(start=True)
def listen(state, ctx):
    effect("node listen")
    first = ctx.wait_for("parcel")
    effect(f"got {first}")
    second = ctx.wait_for("parcel")
    effect(f"got {second}")
    return {"shipped": ctx.tool(ship, first, second)}


patient = bide.Flow("patient")


@patient.node(start=True)
def wait(state, ctx):
    return {"got": ctx.wait_for("ping", timeout=float(state.get("timeout", 60)),
                                default="nobody")}


def main(home: str, action: str, run_id: str, *args: str) -> None:
    local = os.environ.get("SIGNAL_APP_LOCAL") if home.startswith("postgresql://") else None
    with bide.open(home, durability="fast", local=local) as engine:
        engine.register(flow, patient)
        if action == "inbox":
            from bide.engine.human.inbox import Inbox

            Inbox(engine).process()
            run = engine.get(run_id)
        elif action == "drop":
            from bide.engine.human.signal_files import drop_signal

            drop_signal(engine.doors.inbox, run_id, args[0], json.loads(args[1]))
            run = engine.get(run_id)
        elif action == "submit":
            run = engine.get(engine.submit("courier", run_id=run_id))
        elif action == "start":
            run = engine.start("courier", run_id=run_id)
        elif action == "resume":  # a run a killed worker finished is shown as it is
            run = engine.get(run_id)
            run = run if run.status == bide.Status.DONE else engine.resume(run_id)
        else:
            engine.signal(run_id, args[0], json.loads(args[1]), by="test")
            run = engine.get(run_id)
        print(json.dumps({"status": run.status.value, "waiting": run.waiting,
                          "state": run.state if run.status == bide.Status.DONE else None}))


if __name__ == "__main__":
    main(*sys.argv[1:])
