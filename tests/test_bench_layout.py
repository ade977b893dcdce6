"""``bide bench layout``: reads against run length and device bytes, with sane values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bide.bench import physical
from bide.bench.command import bench
from bide.bench.kit.policies import POLICIES
from click.testing import CliRunner


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "layout.json"
    result = CliRunner().invoke(bench, ["layout", "--quick", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Physical writes" in result.output or "not measured" in result.output
    return json.loads(out.read_text())["layout"]


def test_reads_use_the_index_not_a_replay(layout: dict) -> None:
    rows = {r["k"]: r for r in layout["reads"]}
    assert set(rows) == {100, 1000}
    # same run, same machine: the index reads O(state), the replay O(run length)
    assert rows[1000]["read_latest_ms"] < rows[1000]["read_replay_ms"] / 3
    assert all(2.0 < r["wa_committed"] < 10 for r in rows.values())


@pytest.mark.skipif(physical.available() is not None, reason="no /proc/self/io here")
def test_device_bytes_for_every_policy_the_floor_and_more_databases(layout: dict) -> None:
    rows = layout["physical"]["rows"]
    policies = {r["policy"] for r in rows if r["system"] == "bide"}
    assert policies == {p.name for p in POLICIES}
    floor = {r["databases"]: r["bytes_per_commit"] for r in rows if r["system"] == "raw LMDB"}
    assert set(floor) == {0, 1, 3, 6}
    assert floor[1] >= 4096  # a durable commit writes at least a meta page
    assert floor[1] < floor[3] < floor[6]  # each named database written costs pages
    bide = {r["policy"]: r for r in rows if r["system"] == "bide" and r["payload"] == 100}
    assert bide["default"]["bytes_per_superstep"] >= floor[1]
    # nothing durable mid-run: only the exit commit, spread over the supersteps
    assert bide["exit-no-pw"]["bytes_per_superstep"] < bide["default"]["bytes_per_superstep"] / 4
    assert layout["physical"]["ratio_to_floor"] == pytest.approx(
        bide["default"]["bytes_per_superstep"] / floor[1])


def test_device_writes_counts_what_the_block_writes(tmp_path: Path) -> None:
    if physical.available() is not None:
        pytest.skip("no /proc/self/io here")
    with physical.device_writes() as quiet:
        pass
    with physical.device_writes() as loud:
        with open(tmp_path / "f", "wb") as fh:
            fh.write(b"x" * (1 << 20))
    assert loud.bytes >= 1 << 20 > quiet.bytes
