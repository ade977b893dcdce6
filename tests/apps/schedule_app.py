"""A flow that schedules start, for the schedule tests.

Each run's effect is one line ``tick <run id>`` in $BIDE_TEST_EFFECTS (outside the
store), made through a tool so a run taken over after a crash does not make it
twice. Run as a worker: ``schedule_app.py HOME set NAME EVERY`` records a schedule,
``schedule_app.py HOME once`` is one ``bide watch --once`` pass (due slots started,
runs resumed); the engine's clock is $SCHEDULE_APP_NOW when set. HOME is a
directory or a postgresql:// URL (its local directory: $SCHEDULE_APP_LOCAL).
Prints JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time

import bide
from bide.bench.kit.crashkit import record_effect


def _effects() -> list[str]:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if not path or not os.path.exists(path):
        return []
    return open(path).read().splitlines()


def ticked(idempotency_key: str, run_id: str) -> bide.Outcome:
    """Did the tick happen before the worker died? The effects file knows."""
    done = f"tick {run_id}" in _effects()
    return bide.Outcome.done(run_id) if done else bide.Outcome.not_done()


@bide.tool(reconcile=ticked)
def tick(run_id: str) -> str:
    path = os.environ.get("BIDE_TEST_EFFECTS")
    if path:
        record_effect(path, f"tick {run_id}")
    return run_id


flow = bide.Flow("tick")


@flow.node(start=True)
def work(state, ctx):
    return {"ticked": ctx.tool(tick, ctx.run_id), "n": state.get("n", 0)}


def main(argv: list[str]) -> None:
    home, action, *rest = argv
    now = os.environ.get("SCHEDULE_APP_NOW")
    clock = (lambda: float(now)) if now else time.time
    local = os.environ.get("SCHEDULE_APP_LOCAL") if home.startswith("postgresql://") else None
    with bide.open(home, local=local, durability="fast", clock=clock) as eng:
        eng.register(flow)
        if action == "set":
            name, every = rest
            print(json.dumps(eng.schedule(name, "tick", every=int(every)).to_dict()))
        elif action == "once":
            out = bide.Watcher(eng, log=lambda line: print(line, file=sys.stderr)).once()
            print(json.dumps(sorted(r.run_id for r in out["runs"])))
        else:
            raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
