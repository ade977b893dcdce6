"""Several runs in threads of one process, their commits batched (group commit).

    python group_commit_app.py HOME WORLD ACKS work|finish

``work`` starts THREADS runs at once on one durable engine; each superstep makes
one reconcilable tool call (its effect: a line in WORLD, outside the store). Every
commit the store acknowledges is logged to ACKS as ``seq:crc32`` of its framed
bytes, in the committing thread, before the caller goes on: what must survive a
kill. ``finish`` (a new process) recovers and finishes every run; it prints the
statuses as JSON.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import zlib

import bide
from bide.bench.kit.crashkit import count_effects, record_effect

THREADS, STEPS = 6, 10
home, world, acks, mode = sys.argv[1:5]


def _reconcile(key: str, *args: object, **kwargs: object) -> bide.Outcome:
    return bide.Outcome.done("shipped") if count_effects(world)[key] else bide.Outcome.not_done()


@bide.tool(name="ship", reconcile=_reconcile)
def ship(n: int, *, idempotency_key: str) -> str:
    record_effect(world, idempotency_key)
    return "shipped"


flow = bide.Flow("gc")


@flow.node(start=True)
def step(state, ctx):
    ctx.tool(ship, state.get("i", 0))
    return {"i": state.get("i", 0) + 1}


flow.route("step", lambda s: "step" if s["i"] < STEPS else bide.END)


def work() -> None:
    with bide.open(home, durability="durable", lease_ttl=1.0) as eng:
        eng.register(flow)

        def acked(event):
            if event.kind == "commit" and not event.refused:
                with eng.store.reader() as r:
                    record_effect(acks, " ".join(f"{s}:{zlib.crc32(r.raw(s))}"
                                                 for s in event.seqs))

        eng.store.on_commit(acked)
        errors: list[str] = []

        def one(k: int) -> None:
            try:
                eng.start("gc", run_id=f"t{k}")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(repr(exc))

        threads = [threading.Thread(target=one, args=(k,), name=f"run-t{k}")
                   for k in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and not any(t.is_alive() for t in threads), errors
        commits = sum(1 for line in open(acks))
        print(json.dumps({"commits": commits, "batches": eng.store.batches}))


def finish() -> None:
    deadline = time.monotonic() + 30
    with bide.open(home, durability="durable", lease_ttl=1.0) as eng:
        eng.register(flow)
        while True:
            eng.recover()
            known = {r.run_id for r in eng.runs()}
            for k in range(THREADS):
                if f"t{k}" not in known:  # killed before its first commit
                    eng.start("gc", run_id=f"t{k}")
            statuses = {r.run_id: str(r.status) for r in eng.runs()}
            if all(s == "DONE" for s in statuses.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # a dead worker's lease runs out (lease_ttl)
        print(json.dumps({r.run_id: [str(r.status), r.state.get("i")] for r in eng.runs()}))


if __name__ == "__main__":
    {"work": work, "finish": finish}[mode]()
