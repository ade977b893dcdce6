"""The checkpoint policies the benchmark compares: one per point on each axis.

Each is a ``bide.Policy`` (how often, pending writes, delta/full snapshots)
plus the store's durability, which is chosen when a home is opened.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.run.policy import Policy


@dataclass(frozen=True)
class BenchPolicy:
    name: str
    policy: Policy
    durability: str = "durable"
    about: str = ""

    @property
    def pending_writes(self) -> bool:
        return self.policy.pending_writes


def _p(name: str, about: str, durability: str = "durable", **options: object) -> BenchPolicy:
    return BenchPolicy(name, Policy(**options), durability, about)  # type: ignore[arg-type]


POLICIES: tuple[BenchPolicy, ...] = (
    _p("default", "checkpoint every superstep, pending writes, deltas (geometric fulls), "
       "durable"),
    _p("fast", "default, but durability='fast' (no fsync: survives a crash, not power loss)",
       durability="fast"),
    _p("full", "every superstep, a full state snapshot each time", snapshot="full"),
    _p("delta-k8", "deltas with a full snapshot every 8 (cheaper reads)", full_every=8),
    _p("no-pw", "every superstep, no pending writes", pending_writes=False),
    _p("every-4", "a checkpoint every 4 supersteps, pending writes", checkpoint_every=4),
    _p("every-4-no-pw", "every 4 supersteps, no pending writes", checkpoint_every=4,
       pending_writes=False),
    _p("exit", "checkpoint only at exit/pause, pending writes", checkpoint_every="exit"),
    _p("exit-no-pw", "only at exit/pause, no pending writes (nothing durable mid-run)",
       checkpoint_every="exit", pending_writes=False),
)

BY_NAME = {p.name: p for p in POLICIES}


def get(name: str) -> BenchPolicy:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown bench policy {name!r}; known: {', '.join(BY_NAME)}") from None
