"""A power cut loses every write no flush made durable: every acknowledged commit survives.

A SIGKILL leaves the page cache to the kernel, which writes it all; a power cut
does not. So durable workers run under ``tests/powercut/writelog.c``, a preload
shim that records each write and each flush they make in the store, and
``tests/powercut/crash_image.py`` rebuilds the store as a power cut at a point of that
record could have left it: what a flush covered, and of the rest, per page, any
prefix of its writes (none at all, at random, or all). Each rebuilt store must
open, pass ``doctor``, hold every outcome and end the workers had acknowledged
before the cut, and resume to the end without calling again a tool whose outcome
was acknowledged (counted in a file outside the store).

The cuts are chosen by a seeded generator and include the moment right after
each kind of acknowledgement, when the flush behind it is the only thing that
kept it. ``fast`` stores (no flush) are shown to fail the same check, so the
check can fail.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "powercut"))
import crash_image as image  # noqa: E402

HERE = Path(__file__).parent
APP = HERE / "apps" / "powercut_app.py"
STEPS = 6
TIMEOUT = 180


@pytest.fixture(scope="session")
def shim(tmp_path_factory) -> Path:
    """The preload shim, compiled for this machine (a C compiler is part of the test kit)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("the power-cut tests need a C compiler (cc) to build tests/powercut/"
                    "writelog.c; install one (Debian: apt-get install gcc)")
    out = tmp_path_factory.mktemp("shim") / "writelog.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(out),
                    str(HERE / "powercut" / "writelog.c"), "-ldl"], check=True, timeout=120)
    return out


def record(shim: Path, world: Path, workers: list[list[str]], durability: str) -> Path:
    """Run the workers (processes, each with runs in threads) under the shim; the log."""
    log = world.parent / "writes.log"
    env = {**os.environ, "LD_PRELOAD": str(shim), "WRITELOG_DIR": str(world),
           "WRITELOG_FILE": str(log), "BIDE_TEST_DURABILITY": durability}
    procs = [subprocess.Popen([sys.executable, str(APP), "run", str(world / "home"),
                               str(world / "acks"), str(world / "effects"), str(STEPS), *names],
                              env=env, stderr=subprocess.PIPE, text=True)
             for names in workers]
    for p in procs:
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, err
    return log


def cuts(entries: list[image.Entry], acks: Path, seed: int) -> list[tuple[int, str, int]]:
    """(cut, keep, seed): right after some acknowledgements with every unflushed write
    lost, random points with random pages kept, and the end of the log."""
    rng = random.Random(seed)
    after_ack = [e.at + 1 for e in entries if e.kind == "W" and e.path == str(acks)]
    anywhere = image.cut_points(entries)
    chosen = [(c, "none") for c in rng.sample(after_ack, min(10, len(after_ack)))]
    chosen += [(rng.choice(anywhere), "random") for _ in range(8)]
    chosen += [(rng.choice(after_ack), "random") for _ in range(4)]
    chosen += [(anywhere[-1], "none"), (anywhere[-1], "all")]
    return [(c, keep, rng.randrange(1 << 30)) for c, keep in chosen]


def check_images(tmp_path: Path, world: Path, log: Path, names: list[str],
                 seed: int) -> tuple[list[dict], list[str]]:
    entries = image.read_log(log)
    acks = world / "acks"
    dirs, told_total = [], []
    for k, (cut, keep, s) in enumerate(cuts(entries, acks, seed)):
        d = tmp_path / f"cut{k}"
        image.image(entries, world / "home" / "store", d / "home" / "store", cut, s, keep=keep)
        told = image.acknowledged(entries, acks, cut)
        (d / "told").write_text("".join(f"{line}\n" for line in told))
        (d / "how").write_text(f"cut={cut} keep={keep} seed={s}\n")
        dirs.append(str(d))
        told_total += told
    out = subprocess.run([sys.executable, str(APP), "check", str(STEPS), ",".join(names), *dirs],
                         capture_output=True, text=True, timeout=TIMEOUT)
    reports = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == len(dirs), out.stderr[-3000:]
    return reports, told_total


def failures(tmp_path: Path, reports: list[dict]) -> list[str]:
    bad = []
    for r in reports:
        if r["missing"] or r["again"] or r["unfinished"] or not r["doctor"]["ok"] \
                or not r["doctor_after"]:
            how = (tmp_path / r["image"] / "how").read_text().strip()
            bad.append(f"{r['image']} ({how}): {json.dumps(r)}")
    return bad


@pytest.mark.parametrize("workers", [
    [["r0", "r1", "r2", "r3"]],  # four runs in one process: commits grouped
    [["a0", "a1"], ["b0", "b1"]],  # two processes writing one store
], ids=["threads", "processes"])
def test_every_acknowledged_commit_survives_a_power_cut(tmp_path, shim, workers):
    world = tmp_path / "world"
    world.mkdir()
    log = record(shim, world, workers, "durable")
    names = [n for group in workers for n in group]
    acked = (world / "acks").read_text().splitlines()
    assert len(acked) == len(names) * (STEPS + 1)  # every call and every end was told
    reports, told = check_images(tmp_path, world, log, names, seed=len(names))
    assert failures(tmp_path, reports) == []
    assert sum(line.startswith("tool ") for line in told) > 0  # the cuts came after acks


def test_a_fast_store_loses_acknowledged_commits_the_same_check_finds(tmp_path, shim):
    """``fast`` flushes nothing: cut with every unflushed write lost, what was told is gone
    (or the store is not even there) — the check above is one that can fail."""
    world = tmp_path / "world"
    world.mkdir()
    log = record(shim, world, [["f0", "f1"]], "fast")
    entries = image.read_log(log)
    end = image.cut_points(entries)[-1]
    d = tmp_path / "cut"
    image.image(entries, world / "home" / "store", d / "home" / "store", end, 0, keep="none")
    (d / "told").write_text("".join(f"{line}\n" for line in
                                    image.acknowledged(entries, world / "acks", end)))
    out = subprocess.run([sys.executable, str(APP), "check", str(STEPS), "f0,f1", str(d)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    lost = out.returncode != 0 or json.loads(out.stdout.splitlines()[-1])["missing"]
    assert lost, out.stdout
