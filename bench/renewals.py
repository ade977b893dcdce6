"""Does one renewer keep many leases alive over a slow link to PostgreSQL?

    python -m bide.bench.renewals [--runs 1,50,200] [--latency 0.1] [--ttl 3] [--seconds 12]

N runs are leased by one process whose connections to a throwaway PostgreSQL cluster
go through ``kit/pg_proxy.py`` adding ``--latency`` seconds each way. Two renewers keep
them for ``--seconds``, in the same run:

- **batched** (``engine/run/renewer.py``): every lease due within a third of its
  interval renewed in one ``renew_leases`` transaction;
- **one by one**: one transaction per lease, one after another in one thread (how
  renewals went before batching; next one timed from the start, as now).

For each lease the worker's ``LeaseClock`` deadline (its trusted lease, timed from
when each renewal was sent) is followed: **worst margin** is the least time it had
left when a renewal was acknowledged (negative: the lease could not be proven and
the worker would have stopped), **lapsed** how many leases ever ran out.
"""

from __future__ import annotations

import argparse
import heapq
import time
from dataclasses import dataclass, field
from typing import Any

from ..engine.run.lease_clock import LeaseClock
from ..engine.run.renewer import Renewer
from ..formats import LeaseAcquired, RunCreated


class _Watched(LeaseClock):
    """A LeaseClock that remembers the least it had left at each acknowledgment."""

    def __init__(self, ttl: float, granted_at: float) -> None:
        super().__init__(ttl, granted_at)
        self.worst = float("inf")
        self.lapsed = False
        self.acks = 0

    def renewed(self, started_at: float) -> None:
        left = self.until - time.monotonic()
        self.worst = min(self.worst, left)
        self.lapsed = self.lapsed or left <= 0
        self.acks += 1
        super().renewed(started_at)


@dataclass
class Row:
    mode: str
    runs: int
    worst_margin: float
    lapsed: int
    transactions: int
    acks: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self, ttl: float) -> str:
        return (f"{self.mode:<10} {self.runs:>5} runs: worst margin {self.worst_margin:+6.2f}s "
                f"of a {ttl * 0.9:.1f}s trusted lease, lapsed {self.lapsed}/{self.runs}, "
                f"{self.transactions} transactions for {self.acks} renewals")


def _one_by_one(store: Any, leases: list[tuple[str, float, _Watched]], seconds: float,
                interval: float) -> int:
    """The renewals of before: one transaction per lease, in order, in one thread."""
    heap = [(time.monotonic() + interval, i) for i in range(len(leases))]
    heapq.heapify(heap)
    end, calls = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        at, i = heapq.heappop(heap)
        time.sleep(max(0.0, at - time.monotonic()))
        run_id, ttl, clock = leases[i]
        started = time.monotonic()
        store.renew_leases([(run_id, 1, ttl)])
        calls += 1
        clock.renewed(started)
        heapq.heappush(heap, (started + interval, i))
    return calls


def measure(url: str, proxy_url: str, runs: int, ttl: float, seconds: float) -> list[Row]:
    from ..engine.postgres.store import PostgresStore

    direct = PostgresStore(url, durability="fast")
    slow = PostgresStore(proxy_url, durability="fast")
    rows = []
    try:
        for mode in ("batched", "one by one"):
            ids = [f"{mode[0]}{runs}-{i}" for i in range(runs)]
            direct.commit([x for r in ids for x in (
                RunCreated(run_id=r, flow="f", at=1.0),
                LeaseAcquired(run_id=r, owner="bench", token=1, expires_at=0.0, ttl=ttl))])
            granted = time.monotonic()
            clocks = [_Watched(ttl, granted) for _ in ids]
            if mode == "batched":
                renewer = Renewer(slow, name="bench-renewer")
                ends = [renewer.add(r, 1, ttl, c) for r, c in zip(ids, clocks, strict=True)]
                time.sleep(seconds)
                for end in ends:
                    end()
                transactions = renewer.batches
            else:
                leases = [(r, ttl, c) for r, c in zip(ids, clocks, strict=True)]
                transactions = _one_by_one(slow, leases, seconds, ttl / 3)
            now = time.monotonic()
            for c in clocks:  # a lease not renewed at all by the end lapsed too
                c.lapsed = c.lapsed or c.until <= now
            rows.append(Row(mode, runs, min(c.worst for c in clocks),
                            sum(c.lapsed for c in clocks), transactions,
                            sum(c.acks for c in clocks)))
    finally:
        direct.close()
        slow.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1,50,200")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds each way")
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=12.0)
    args = parser.parse_args(argv)
    from .kit.pg_proxy import Proxy
    from .kit.pg_server import throwaway

    with throwaway() as cluster:
        db = cluster.create_database()
        from ..engine.postgres.store import PostgresStore
        PostgresStore(cluster.url(db)).close()  # make the home
        proxy = Proxy(str(cluster.socket / ".s.PGSQL.5432"))
        proxy.latency = args.latency
        print(f"leases of {args.ttl:g}s renewed every {args.ttl / 3:.1f}s for {args.seconds:g}s, "
              f"over a link of {args.latency * 1000:.0f} ms each way")
        try:
            for n in (int(x) for x in args.runs.split(",")):
                for row in measure(cluster.url(db), proxy.url(db), n, args.ttl, args.seconds):
                    print(row.line(args.ttl), flush=True)
        finally:
            proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
