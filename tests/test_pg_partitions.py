"""PostgreSQL under network faults, with real worker processes behind fault-injecting
proxies (tests/torture/harness/network.py, bench/kit/pg_proxy.py); effects are counted
outside the store.

The bug these reproduce: a worker partitioned right after its prepare's COMMIT reached
the server ran the tool once the partition healed, after its lease had expired and
another worker had taken the run over, settled the call and made it. The short
versions run here; ``bide torture --network`` runs them at length.
"""

from __future__ import annotations

import pytest
from extras import need

need("psycopg")

from bide.tests.torture.harness import network  # noqa: E402 - after the skip

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("settle", ["reconciler", "person"])
def test_a_worker_cut_off_after_its_prepare_never_makes_the_call(pg_cluster, tmp_path, settle):
    report = network.partition_after_prepare(pg_cluster, tmp_path, settle=settle)
    assert report.ok(), (report.line(), report.notes)
    assert report.faults.get("held_commits") == 1, report.line()  # the fault did happen
    assert "worker A ended with 3" in report.notes, report.notes  # A stopped: LeaseUnproven
    tool = "charge_card" if settle == "reconciler" else "charge_unreconciled"
    (made,) = [e for e in network.effects_of(tmp_path) if e[0] == tool]
    # made once, never under A's token 1: by B when it took the run over (token 2), or,
    # after a person's retry, by the watcher that resumed it (token 3)
    assert made[3] == {"reconciler": "2", "person": "3"}[settle], made


def test_the_negative_control_repeats_the_effect(pg_cluster, tmp_path):
    """With the worker's lease check switched off, the same fault repeats the call: the
    scenario can fail, so its zero above means something."""
    report = network.partition_after_prepare(pg_cluster, tmp_path, negative=True)
    assert report.faults.get("held_commits") == 1, report.line()
    assert report.duplicated == 1, report.line()
    tokens = sorted(e[3] for e in network.effects_of(tmp_path) if e[0] == "charge_card")
    assert tokens == ["1", "2"], tokens  # the cut-off worker's call came after its successor's


def test_every_fault_at_once_loses_and_repeats_nothing(pg_cluster, tmp_path):
    """Three workers (one clock 5 minutes ahead, one behind), cuts, lost COMMIT replies,
    latency, a partition longer than a lease, a server restart and a server crash."""
    load = network.Load(runs=6, workers=3, ttl=3.0, seconds=15.0, latency=(0.01, 0.05))
    report = network.mixed_load(pg_cluster, tmp_path, load)
    assert report.ok(), (report.line(), report.notes)
    faults = report.faults
    assert faults.get("cuts", 0) > 0 and faults.get("server crashes") == 1, report.line()
    assert report.effects == 6 * 3 * 2 + 1, report.line()  # every call made, each once
