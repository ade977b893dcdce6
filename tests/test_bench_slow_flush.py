"""``--flush-delay-us``: the concurrency bench run as on a slower disk, by a preload shim."""

from __future__ import annotations

import os
import subprocess
import sys

from bide.bench.kit import slow_flush


def test_the_shim_makes_every_flush_at_least_that_much_slower(tmp_path):
    shim = slow_flush.compile_shim(tmp_path)
    assert shim is not None, "no C compiler (cc): the slow-flush bench cannot run here"
    path = str(tmp_path / "f")
    code = (f"import os, time; fd = os.open({path!r}, os.O_WRONLY | os.O_CREAT); "
            "t = time.monotonic(); [(os.write(fd, b'x'), os.fdatasync(fd)) for _ in range(5)];"
            "print(time.monotonic() - t)")
    env = {**os.environ, "LD_PRELOAD": str(shim), slow_flush.ENV: "20000"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert float(out.stdout) >= 5 * 0.020  # usleep waits at least that long: never flaky


def test_the_concurrency_bench_runs_as_on_a_slower_disk():
    out = subprocess.run([sys.executable, "-m", "bide.bench.concurrency", "--steps", "10",
                          "--repeat", "1", "--flush-delay-us", "200"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "every flush made 200 us slower" in out.stdout
    assert "8 runs >= 4x one run" in out.stdout
