"""The physical floor: the same bytes committed by a bare LMDB transaction loop.

No framing, no indexes, no Python engine: one ``put(append=True)`` per value
under a global big-endian sequence, grouped into the same transactions as bide
committed them, with the same sync flags. What bide spends beyond this is its
own overhead.
"""

from __future__ import annotations

import struct
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import lmdb

_KEY = struct.Struct(">Q")


@dataclass(frozen=True)
class FloorResult:
    seconds: float
    commits: int
    bytes: int
    growth: int  # (last page + 1) × page size, after minus before


def replay(groups: Sequence[Sequence[bytes]], *, durable: bool, directory: str | Path | None = None,
           warmup: Sequence[Sequence[bytes]] = ()) -> FloorResult:
    """Commit each group of values in one write transaction; time and measure growth."""
    with tempfile.TemporaryDirectory(dir=directory, prefix="bide-floor-") as d:
        env = lmdb.open(d, map_size=1 << 32, sync=durable, metasync=durable, readahead=False)
        try:
            seq = _commit_all(env, warmup, 0)
            before = _used(env)
            t0 = time.perf_counter()
            _commit_all(env, groups, seq)
            seconds = time.perf_counter() - t0
            growth = _used(env) - before
        finally:
            env.close()
    return FloorResult(seconds, len(groups), sum(len(v) for g in groups for v in g), growth)


def _commit_all(env: lmdb.Environment, groups: Sequence[Sequence[bytes]], seq: int) -> int:
    for group in groups:
        with env.begin(write=True) as txn:
            for value in group:
                seq += 1
                txn.put(_KEY.pack(seq), value, append=True)
    return seq


def _used(env: lmdb.Environment) -> int:
    return (env.info()["last_pgno"] + 1) * env.stat()["psize"]
