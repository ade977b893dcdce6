"""Flows with child runs (``ctx.child``), for the child run tests.

``family`` maps three items (Send) to ``raise_one``, each starting one ``kid`` child run;
``gather`` sums what the children returned. A ``kid`` charges once through a tool
that reconciles by reading $BIDE_TEST_EFFECTS (a file outside the store), so a kid
killed mid-call is found done, never charged twice. Run as a worker:
``child_app.py HOME start|resume|recover RUN`` (HOME a directory or a postgresql://
URL, its local directory $CHILD_APP_LOCAL); prints the run as JSON.
"""

from __future__ import annotations

import json
import os
import sys

import bide
from bide.bench.kit.crashkit import count_effects, record_effect

KIDS = 3


def effect(line: str) -> None:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, line)


def charged(idempotency_key: str, n: int) -> bide.Outcome:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    done = path is not None and any(line == f"charge {n} {idempotency_key}"
                                    for line in count_effects(path))
    return bide.Outcome.done(n * 10) if done else bide.Outcome.not_done()


@bide.tool(reconcile=charged)
def charge(n: int, *, idempotency_key: str) -> int:
    effect(f"charge {n} {idempotency_key}")
    return n * 10


kid = bide.Flow("kid")


@kid.node(start=True)
def work(state, ctx):
    effect(f"kid {state['n']}")
    return {"paid": ctx.tool(charge, state["n"])}


family = bide.Flow("family")


@family.node(start=True)
def plan(state, ctx):
    return {"planned": True}


@family.node()
def raise_one(state, ctx):
    return {"paid": [ctx.child("kid", {"n": state["n"]})["paid"]]}


@family.node(after=["raise_one"])
def gather(state, ctx):
    return {"total": sum(state["paid"])}


family.route("plan", lambda state: [bide.Send("raise_one", {"n": n}) for n in range(KIDS)])
family.reducer("paid", bide.append)


asker = bide.Flow("asker")  # a child that waits for a person


@asker.node(start=True)
def ask(state, ctx):
    return {"ok": ctx.approve("go", {"n": state["n"]})}


guardian = bide.Flow("guardian")


@guardian.node(start=True)
def guard(state, ctx):
    return {"ok": ctx.child("asker", {"n": 1}, key="ask")["ok"]}


flows = [family, kid, asker, guardian]  # for bide watch --app child_app:flows


def main(home: str, action: str, run_id: str) -> None:
    local = os.environ.get("CHILD_APP_LOCAL") if home.startswith("postgresql://") else None
    with bide.open(home, durability="fast", local=local) as engine:
        engine.register(*flows)
        if action == "start":
            run = engine.start("family", run_id=run_id)
        elif action == "recover":
            engine.recover()
            run = engine.get(run_id)
        else:
            run = engine.get(run_id)
            run = run if run.status == bide.Status.DONE else engine.resume(run_id)
        print(json.dumps({"status": run.status.value, "waiting": run.waiting,
                          "state": run.state if run.status == bide.Status.DONE else None}))


if __name__ == "__main__":
    main(*sys.argv[1:])
