"""What one superstep's durable commit does inside its write transaction, counted.

py-lmdb releases the GIL around every ``get``, ``put`` and cursor call, so under
concurrency each LMDB call in a commit body lets another run's thread in; and the
Python of the body runs while every other committer waits. These pin the cuts
(engine/storage/hot_cache.py, the fence's head folded onto, the list tail never decoded):
a change that brings a read, a decode or an encode back fails here, whatever the
machine's load. Before them a chain superstep's body made ~17.5 LMDB calls
(7.4 gets, 6 puts, a cursor walk of 4) and 4 decodes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import bide
import pytest
from bide.bench.kit.workloads import Workload
from bide.engine.storage import index, latest, lmdb_store, table_reads
from bide.formats import packed_list


class Counting:
    """A transaction (or cursor) that counts the calls made on it."""

    def __init__(self, inner: Any, counts: Counter) -> None:
        self._inner, self._counts = inner, counts

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counts[name] += 1
            found = method(*args, **kwargs)
            return Counting(found, self._counts) if name == "cursor" else found
        return counted

    def __iter__(self) -> Any:
        for item in self._inner:
            self._counts["next"] += 1
            yield item


def superstep_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
                    steps: int) -> tuple[Counter, int]:
    """Every call made in commit bodies over one run of ``kind`` (after a warm-up run)."""
    counts: Counter = Counter()
    run_one = lmdb_store._run_one
    monkeypatch.setattr(lmdb_store, "_run_one",
                        lambda txn, request: run_one(Counting(txn, counts), request))
    for module in (index, latest, table_reads):
        real = module.unpack_value  # type: ignore[attr-defined]

        def decoded(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            counts["decode"] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(module, "unpack_value", decoded)
    unpacked = packed_list.PackedList.unpacked.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(packed_list.PackedList, "unpacked", classmethod(
        lambda cls, *a, **k: (counts.update(["list read"]), unpacked(cls, *a, **k))[1]))
    w = Workload(kind, steps, 100)
    with bide.open(tmp_path / "home", durability="fast") as e:
        e.register(w.flow())
        e.start(w.flow().name, w.initial(), run_id="warm")
        counts.clear()
        batches = e.store.batches
        run = e.start(w.flow().name, w.initial(), run_id="r")
        assert run.status == bide.Status.DONE and run.state == w.expected()
        assert e.store.batches - batches == w.supersteps + 1  # one commit a superstep, + start
    return counts, w.supersteps


LMDB_CALLS = ("get", "put", "delete", "cursor", "set_range", "last", "prev", "next", "key",
              "value", "first")


def per_step(counts: Counter, steps: int, *names: str) -> float:
    return sum(counts[n] for n in names) / steps


def test_a_chain_superstep_s_commit_makes_about_six_lmdb_calls(tmp_path, monkeypatch):
    counts, steps = superstep_costs(tmp_path, monkeypatch, "long", 200)
    # 6 puts (log, run log, head, state directory, list tail, counter); a get only when a
    # chunk closes or a full snapshot comes (every 64 versions); the run's start counts too
    assert per_step(counts, steps, "put") <= 6.1, counts
    assert per_step(counts, steps, "get") <= 0.3, counts
    assert per_step(counts, steps, *LMDB_CALLS) <= 6.6, counts  # 17.5 before
    assert counts["cursor"] == 0, counts  # the last seq is known
    # nothing but at a full snapshot (4 before): the head the fence reads, the state
    # directory and the list's tail (never decoded) are kept from the run's last commit
    assert per_step(counts, steps, "decode") <= 0.25, counts
    assert counts["list read"] == 0, counts  # 0.83 a step before


def test_a_fan_out_4_superstep_s_commit_makes_about_eight(tmp_path, monkeypatch):
    counts, steps = superstep_costs(tmp_path, monkeypatch, "fanout4", 60)
    assert per_step(counts, steps, "put") <= 6.7, counts
    assert per_step(counts, steps, *LMDB_CALLS) <= 7.8, counts  # 19.1 before
    assert counts["cursor"] == 0, counts
    assert per_step(counts, steps, "decode") <= 0.9, counts  # 4.2, then 2.9 before
