"""A worker of the network-fault scenarios (tests/torture/harness/network.py), on a
PostgreSQL home reached through a fault-injecting proxy.

usage: net_app.py URL WORKDIR start RUN_ID FLOW | watch | submit FLOW COUNT

Every real side effect is one line appended to WORKDIR/effects, outside the store:
``<tool> <idempotency key> <pid> <fencing token>``. ``notify`` is idempotent the way
a real system is: it applies a key once (under a file lock) and answers every repeat.
A watcher also appends the seqs of every commit the store acknowledged to
WORKDIR/acked-<pid>, so the harness can check that none was lost.

Environment: BIDE_TEST_LEASE_TTL (seconds, default 2), BIDE_TEST_CLOCK_SKEW (seconds
added to this process's wall clock, before bide is imported), BIDE_TEST_TOOL_SLEEP
(seconds each tool takes).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time

SKEW = float(os.environ.get("BIDE_TEST_CLOCK_SKEW", "0"))
if SKEW:  # this host's clock is off: patched before bide binds time.time anywhere
    _real_time = time.time
    time.time = lambda: _real_time() + SKEW

import bide  # noqa: E402 - after the clock shim
from bide.engine.base.errors import LeaseUnproven, StaleLease  # noqa: E402
from bide.engine.storage.store import observe  # noqa: E402

url, workdir, role = sys.argv[1:4]
EFFECTS = os.path.join(workdir, "effects")
TTL = float(os.environ.get("BIDE_TEST_LEASE_TTL", "2"))
TOOL_SLEEP = float(os.environ.get("BIDE_TEST_TOOL_SLEEP", "0"))


def effect(line: str) -> None:
    fd = os.open(EFFECTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def applied(tool: str, key: str) -> bool:
    if not os.path.exists(EFFECTS):
        return False
    with open(EFFECTS) as f:
        return any(line.split()[:2] == [tool, key] for line in f)


def charged(idempotency_key: str, amount: int) -> bide.Outcome:
    """The reconciler asks the world, as a payment provider's lookup by key would."""
    return bide.Outcome.done({"charged": amount}) if applied("charge_card", idempotency_key) \
        else bide.Outcome.not_done()


@bide.tool(reconcile=charged)
def charge_card(amount: int, *, idempotency_key: str, fencing_token: int) -> dict:
    time.sleep(TOOL_SLEEP)
    effect(f"charge_card {idempotency_key} {os.getpid()} {fencing_token}")
    return {"charged": amount}


@bide.tool
def charge_unreconciled(amount: int, *, idempotency_key: str, fencing_token: int) -> dict:
    time.sleep(TOOL_SLEEP)
    effect(f"charge_unreconciled {idempotency_key} {os.getpid()} {fencing_token}")
    return {"charged": amount}


@bide.tool(idempotent=True)
def notify(message: str, *, idempotency_key: str) -> str:
    time.sleep(TOOL_SLEEP)
    with open(os.path.join(workdir, "notify.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the system applies a key once, whoever asks
        if not applied("notify", idempotency_key):
            effect(f"notify {idempotency_key} {os.getpid()} -")
    return "sent"


pay = bide.Flow("pay")


@pay.node(start=True)
def charge(state, ctx):
    return {"paid": ctx.tool(charge_card, 10)}


@pay.node(after=["charge"])
def tell(state, ctx):
    return {"told": ctx.tool(notify, "paid")}


pay_asking = bide.Flow("pay_asking")


@pay_asking.node(start=True)
def charge_asking(state, ctx):
    return {"paid": ctx.tool(charge_unreconciled, 10)}


ledger = bide.Flow("ledger")


def _step(i: int):
    def step(state, ctx):
        ctx.tool(charge_card, i)
        ctx.tool(notify, f"step {i}")
        return {"steps": [i]}
    step.__name__ = f"step{i}"
    return step


ledger.node(start=True)(_step(1))
ledger.node(after=["step1"])(_step(2))
ledger.node(after=["step2"])(_step(3))
ledger.reducer("steps", bide.append)
FLOWS = (pay, pay_asking, ledger)


def acked_log() -> None:
    """Every commit this process heard acknowledged, by seq."""
    path = os.path.join(workdir, f"acked-{os.getpid()}")

    def seen(event) -> None:
        if event.kind == "commit" and event.seqs:
            effect_to(path, " ".join(map(str, event.seqs)))

    observe(seen)


def effect_to(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def main() -> int:
    local = os.path.join(workdir, f"local-{os.getpid()}")
    acked_log()
    with bide.open(url, local=local, durability="durable", lease_ttl=TTL) as engine:
        engine.register(*FLOWS)
        if role == "start":
            run_id, flow = sys.argv[4:6]
            try:
                run = engine.start(flow, run_id=run_id)
            except LeaseUnproven as exc:
                print(json.dumps({"stopped": "LeaseUnproven", "error": str(exc)}), flush=True)
                return 3
            except StaleLease as exc:
                print(json.dumps({"stopped": "StaleLease", "error": str(exc)}), flush=True)
                return 4
            print(json.dumps({"status": run.status.value}), flush=True)
            return 0
        if role == "submit":
            flow, count = sys.argv[4], int(sys.argv[5])
            for i in range(count):
                engine.submit(flow, run_id=f"{flow}-{i}")
            return 0
        watcher = bide.Watcher(engine, workers=2, rescan=0.5, max_attempts=1000,
                               max_orphan_age=1e9, log=lambda s: print(s, flush=True))
        watcher.serve()
        return 0


sys.exit(main())
