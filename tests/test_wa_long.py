"""Write amplification of a growing run stays under 3x at B = 100.

The default policy's full snapshots re-store a state that grows with the run;
spaced by 4 (versions 64, 256, 1024, ...) they cost about a third of the payload,
where spacing by 2 cost about one payload (3.18x in all at K = 1,000).
"""

from __future__ import annotations

from bide.bench.kit.workloads import Workload
from bide.engine.api.runtime import open as open_home
from bide.formats import decode


def _committed(tmp_path, k: int) -> tuple[float, float]:
    """(WA committed, WA of the full snapshots alone) of a ``long`` run of K steps."""
    w = Workload("long", k, 100)
    with open_home(tmp_path / f"long-{k}", durability="fast") as engine:
        engine.register(w.flow())
        assert engine.start(w.flow().name, w.initial(), run_id="r").state == w.expected()
        rows = list(engine.records("r"))
        with engine.store.reader() as r:
            fulls = sum(size for seq, rtype, size in rows
                        if rtype == "checkpoint" and decode(r.raw(seq)).full)
    return sum(size for _, _, size in rows) / w.logical_bytes, fulls / w.logical_bytes


def test_long_run_writes_at_most_3x_its_payload_and_full_snapshots_a_third(tmp_path):
    wa, fulls = _committed(tmp_path, 1000)
    assert wa <= 3.0, f"WA committed {wa:.2f}x at K=1,000, B=100"
    assert fulls <= 0.4, f"full snapshots alone {fulls:.2f}x the payload"

