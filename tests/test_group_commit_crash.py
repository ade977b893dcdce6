"""Kills while several runs' commits share a batch: every acknowledged commit is still
there, byte for byte, and after a resume in a new process every run is DONE with each
tool effect exactly once (counted in a file outside the store).

The worker (``tests/apps/group_commit_app.py``) runs six runs in six threads of one
durable engine; it logs each acknowledged commit (``seq:crc32``) from the committing
thread before that thread goes on. It dies at a fault point (SIGKILL or ``os._exit``)
or by a SIGKILL from here at a random moment.
"""

from __future__ import annotations

import json
import random
import signal
import time
import zlib
from pathlib import Path

import pytest
from bide.bench.kit.crashkit import count_effects, start_worker
from bide.engine.storage.lmdb_store import LMDBStore
from conftest import APPS, run_app

APP = "group_commit_app.py"
THREADS, STEPS = 6, 10
# A step is one commit (its prepare carries the previous step's outcome and checkpoint):
# ~12 commits a run, ~72 in all; a held checkpoint rides in a batch at checkpoint_held.
FAULTS = ["after_commit:25:kill", "after_commit:55:kill", "before_commit:40:exit",
          "after_tool_effect:20:kill", "after_intent_prepared:33:exit",
          "checkpoint_held:15:kill", "after_checkpoint:3:kill"]


def paths(tmp_path: Path) -> tuple[str, str, str]:
    return str(tmp_path / "home"), str(tmp_path / "world.log"), str(tmp_path / "acks.log")


def acknowledged(acks: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for line in Path(acks).read_text().splitlines() if Path(acks).exists() else []:
        for pair in line.split():
            seq, crc = pair.split(":")
            assert int(seq) not in out, f"seq {seq} acknowledged twice"
            out[int(seq)] = int(crc)
    return out


def check_acknowledged_survived(home: str, acks: str) -> int:
    got = acknowledged(acks)
    store = LMDBStore(home, create=False)
    try:
        with store.reader() as r:
            lost = {s for s, crc in got.items()
                    if (raw := r.raw(s)) is None or zlib.crc32(raw) != crc}
    finally:
        store.close()
    assert not lost, f"acknowledged commits lost or changed: {sorted(lost)[:10]}"
    return len(got)


def finish_and_check(home: str, world: str, acks: str) -> None:
    check_acknowledged_survived(home, acks)
    done = run_app(APP, home, world, acks, "finish", timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout)
    assert runs == {f"t{k}": ["DONE", STEPS] for k in range(THREADS)}, runs
    effects = count_effects(world)
    twice = {k: n for k, n in effects.items() if n > 1}
    assert not twice, f"tool effects repeated: {twice}"
    assert len(effects) == THREADS * STEPS, len(effects)
    check_acknowledged_survived(home, acks)  # still there after the resume


def test_the_worker_s_runs_really_share_batches(tmp_path):
    """The control: without a kill, the six runs finish in fewer transactions than
    commits (so the kills below do hit shared batches)."""
    home, world, acks = paths(tmp_path)
    done = run_app(APP, home, world, acks, "work", timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout)
    assert counts["batches"] < counts["commits"], counts
    finish_and_check(home, world, acks)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_kill_at_a_commit_boundary_loses_no_acknowledged_commit(tmp_path, fault):
    home, world, acks = paths(tmp_path)
    died = run_app(APP, home, world, acks, "work", fault=fault, timeout=90)
    assert died.returncode in (-signal.SIGKILL, 137), (died.returncode, died.stderr[-2000:])
    assert check_acknowledged_survived(home, acks) > 0
    finish_and_check(home, world, acks)


@pytest.mark.parametrize("seed", range(4))
def test_a_kill_at_a_random_moment_loses_no_acknowledged_commit(tmp_path, seed):
    home, world, acks = paths(tmp_path)
    proc = start_worker(str(APPS / APP), home, world, acks, "work")
    try:
        deadline = time.monotonic() + 30
        while not Path(acks).exists() and time.monotonic() < deadline:
            time.sleep(0.005)  # the runs are committing
        time.sleep(random.Random(seed).uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close(), proc.stderr.close()
    finish_and_check(home, world, acks)


def test_acknowledged_lines_parse_as_seq_crc_pairs(tmp_path):
    acks = tmp_path / "acks.log"
    acks.write_text("3:11 4:12\n5:13\n")
    assert acknowledged(str(acks)) == {3: 11, 4: 12, 5: 13}
    acks.write_text("3:11\n3:11\n")
    with pytest.raises(AssertionError, match="twice"):
        acknowledged(str(acks))
