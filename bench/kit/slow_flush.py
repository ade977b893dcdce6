"""Run a bench as on a slower disk: every flush made to take longer by a preload shim.

This machine's disk flushes in ~0.1-0.2 ms, so eight runs in one process are
bound by Python on two cores, not by flushes, and whether the commit path
overlaps its flushes with work cannot show. ``slow_flush.c`` adds a fixed delay
after each ``fsync`` / ``fdatasync`` (and each ``O_DSYNC`` write), the cost a
slower SSD, a cloud volume or an SD card puts there; the delay is the only
change. It needs a C compiler (``cc``); ``compile_shim`` returns None without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("slow_flush.c")
ENV = "SLOW_FLUSH_US"


def compile_shim(where: Path) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out = where / "slow_flush.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(SOURCE), "-ldl"],
                   check=True, timeout=120)
    return out


def reexec_slow(delay_us: int, where: Path) -> None:
    """Run this process's command again with every flush ``delay_us`` slower (once: the
    new process sees ``SLOW_FLUSH_US`` set and goes on). Exits with that process's code."""
    if os.environ.get(ENV) is not None:
        return
    shim = compile_shim(where)
    if shim is None:
        sys.exit("--flush-delay-us needs a C compiler (cc) to build bench/kit/slow_flush.c")
    env = {**os.environ, ENV: str(delay_us), "LD_PRELOAD": str(shim)}
    sys.exit(subprocess.run([sys.executable, *sys.orig_argv[1:]], env=env).returncode)
