"""The flow of the racing-processes torture test (``--app race_app:flow``).

Everything a worker does is appended to $BIDE_RACE_LOG, a file outside the store:

    node <node> <run> <pid>            each node execution
    stall <run> <pid>                  a "-stall" run's first `work`: it waits there until the
                                       test creates go-<run> beside the log (having frozen this
                                       worker with SIGSTOP, or not)
    tool <name> <run> <key>            each real side effect of a tool
    commit <run> <token> <seq>...      each commit made under a lease (fenced), once accepted
    refused <run> <token>              a fenced commit refused: the token was stale

The commit lines let the test attribute every fenced record in the log to the lease
token its worker held, and so prove that no commit with a stale token was accepted.
"""

from __future__ import annotations

import os
import time

import bide
from bide.bench.kit.crashkit import record_effect
from bide.engine.storage.store import WriteEvent, observe

STALL_MAX = 30.0


def log(line: str) -> None:
    path = os.environ.get("BIDE_RACE_LOG")
    if not path:
        return
    record_effect(path, line)


def _log_commit(event: WriteEvent) -> None:
    if event.kind != "commit" or event.fence is None:
        return
    if event.refused:
        log(f"refused {event.fence[0]} {event.fence[1]}")
    else:
        log(f"commit {event.fence[0]} {event.fence[1]} " + " ".join(map(str, event.seqs)))


if os.environ.get("BIDE_RACE_LOG"):  # a worker: test_racing imports this for its flow only,
    observe(_log_commit)  # and a process-wide observer there would hear every test's commits


def _ran_before(line: str) -> bool:
    path = os.environ.get("BIDE_RACE_LOG")
    if not path or not os.path.exists(path):
        return False
    with open(path) as fh:
        return any(existing.rstrip("\n").rsplit(" ", 1)[0] == line for existing in fh)


@bide.tool
def charge(run: str, *, idempotency_key: str) -> str:
    log(f"tool charge {run} {idempotency_key}")
    return f"charged {run}"


@bide.tool
def ship(run: str, *, idempotency_key: str) -> str:
    log(f"tool ship {run} {idempotency_key}")
    return f"shipped {run}"


flow = bide.Flow("race")


@flow.node(start=True)
def work(state, ctx):
    first = not _ran_before(f"node work {ctx.run_id}")
    log(f"node work {ctx.run_id} {os.getpid()}")
    if first and ctx.run_id.endswith("-stall"):
        log(f"stall {ctx.run_id} {os.getpid()}")
        go = os.path.join(os.path.dirname(os.environ["BIDE_RACE_LOG"]), f"go-{ctx.run_id}")
        deadline = time.monotonic() + STALL_MAX
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.005)
    return {"charged": ctx.tool(charge, ctx.run_id)}


@flow.node(after=["work"])
def gate(state, ctx):
    log(f"node gate {ctx.run_id} {os.getpid()}")
    if not ctx.approve("ship", payload={"run": ctx.run_id}):
        return {"shipped": None}
    return {"shipped": ctx.tool(ship, ctx.run_id)}
