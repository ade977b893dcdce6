"""A full disk mid-run: ``StoreFull`` says so, the run is left INTERRUPTED with no
lease, and once space is freed a resume finishes it with each effect exactly once.

The home sits on a 3 MB tmpfs (root only: mounting needs it); a filler file the
test owns takes part of it, and deleting that file is "freeing space".
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import bide
import pytest
from bide.engine.storage.lmdb_store import RESERVE, RESERVE_BYTES, LMDBStore
from bide.engine.upkeep import maintenance
from conftest import count_lines

STEPS = 40
BLOB = 40_000  # bytes of new state per step: ~1.6 MB of log in all, more than fits at first


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a size-limited tmpfs (a full filesystem)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)


def effect_flow(effects: Path) -> bide.Flow:
    """charge (a tool, once) -> fill (STEPS steps of big state) -> notify (a tool, once)."""

    @bide.tool
    def charge(amount: int) -> int:
        with effects.open("a") as fh:
            fh.write("charge\n")
        return amount

    @bide.tool
    def notify(text: str) -> str:
        with effects.open("a") as fh:
            fh.write("notify\n")
        return text

    flow = bide.Flow("fill")

    @flow.node(start=True)
    def pay(state, ctx):
        return {"paid": ctx.tool(charge, 5), "i": 0}

    @flow.node(after="pay")
    def fill(state, ctx):
        i = state["i"] + 1
        return {"i": i, "blob": f"{i:04d}" + "x" * BLOB}

    @flow.node()
    def tell(state, ctx):
        return {"told": ctx.tool(notify, "done")}

    flow.route("fill", lambda s: "fill" if s["i"] < STEPS else "tell")
    return flow


def test_a_full_disk_interrupts_the_run_and_a_resume_after_freeing_space_finishes_it(
        small_fs: Path, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"  # outside the small filesystem
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * (2 << 20))
    home = small_fs / "home"
    with bide.open(home, durability="durable") as engine:
        assert (home / "store" / RESERVE).stat().st_size > 0
        engine.register(effect_flow(effects))
        with pytest.raises(bide.StoreFull, match="filesystem holding the home .* is full") as err:
            engine.start("fill", run_id="r")
        assert f"{err.value.free} bytes free" in str(err.value)
        assert "INTERRUPTED" in "".join(err.value.__notes__)
        run = engine.get("r")
        assert run.status == bide.Status.INTERRUPTED, run
        assert 0 < run.state["i"] < STEPS  # it really stopped mid-way
        with engine.store.reader() as r:
            assert r.head("r").lease_owner is None  # any worker may resume it at once
        assert count_lines(effects) == {"charge": 1}

        filler.unlink()  # free space
        done = engine.resume("r")
        assert done.status == bide.Status.DONE and done.state["i"] == STEPS
        assert done.state["blob"].startswith(f"{STEPS:04d}")
    assert count_lines(effects) == {"charge": 1, "notify": 1}
    store = LMDBStore(home, create=False)
    try:
        assert maintenance.doctor(store).ok
    finally:
        store.close()


def test_a_full_store_met_inside_a_node_interrupts_the_run_instead_of_failing_it(
        tmp_path: Path) -> None:
    """A tool's intent or a pending write can be the commit that meets the full disk:
    that is not the node's fault, so the run is not FAILED and the node not retried."""
    flow = bide.Flow("node-full")
    calls = []

    @flow.node(start=True, retries=3)
    def write(state, ctx):
        calls.append(1)
        raise bide.StoreFull(tmp_path, free=0)

    with bide.open(tmp_path / "home", durability="fast") as engine:
        engine.register(flow)
        with pytest.raises(bide.StoreFull):
            engine.start("node-full", run_id="r")
        assert engine.get("r").status == bide.Status.INTERRUPTED
        assert calls == [1]


def test_the_reserve_is_kept_by_writing_opens_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bide.open(home).close()
    reserve = home / "store" / RESERVE
    assert reserve.stat().st_size == RESERVE_BYTES
    reserve.unlink()
    LMDBStore(home, create=False).close()  # what the CLI's reading commands do
    assert not reserve.exists()
    bide.open(home).close()
    assert reserve.exists()
