"""The crash kit: start a worker, arm a fault, kill it, count effects outside the store.

One place for what every crash test needs (the crash benchmarks, the torture
harness in ``tests/torture/harness/``, the tests' worker apps):

- ``record_effect`` / ``count_effects``: a side effect is one line appended
  with one ``write`` to a file outside the store, so it survives SIGKILL whole;
  counting the lines says what really happened, however often it was redone.
- ``worker_env`` / ``run_worker`` / ``start_worker``: a worker is a fresh
  interpreter whose environment carries no ``BIDE_*`` from the parent, with a
  fault (``point:occurrence:mode``) armed through ``BIDE_FAULT`` when asked.
- ``in_fork``: a phase run in a child forked from a warm parent (Linux: pidfd),
  killed by SIGKILL after a delay, or dying by itself at an armed fault.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

CHILD_TIMEOUT = 60.0


# -- effects, counted outside the store -------------------------------------------------------
def record_effect(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` to ``path`` in one ``write``: whole lines only, even under SIGKILL."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def count_effects(path: str | os.PathLike[str]) -> Counter[str]:
    """How often each line was recorded (an empty count when nothing was)."""
    path = Path(path)
    return Counter(path.read_text().splitlines()) if path.exists() else Counter()


# -- workers in fresh interpreters --------------------------------------------------------------
def worker_env(fault: str | None = None, extra: Mapping[str, str] | None = None
               ) -> dict[str, str]:
    """The parent's environment without ``BIDE_*``, the fault armed, ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    if fault:
        env["BIDE_FAULT"] = fault
    env.update(extra or {})
    return env


def run_worker(*args: str, fault: str | None = None, env: Mapping[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python *args`` to its end (or its death at the armed fault), output captured."""
    return subprocess.run([sys.executable, *args], env=worker_env(fault, env),
                          capture_output=True, text=True, timeout=timeout)


def start_worker(*args: str, fault: str | None = None, env: Mapping[str, str] | None = None
                 ) -> subprocess.Popen[str]:
    """``python *args`` started with pipes, for a parent that kills it at a moment it picks."""
    return subprocess.Popen([sys.executable, *args], env=worker_env(fault, env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# -- phases forked from a warm parent ---------------------------------------------------------
def in_fork(workdir: Path, name: str, fn: Callable[[], Any], *, kill_after: float | None = None,
            timeout: float = CHILD_TIMEOUT) -> tuple[str, Any]:
    """Run ``fn`` in a forked child; ``("ok", value)``, ``("killed", sig)`` or ``("error", tb)``.

    The child inherits the parent's imports (it starts in milliseconds), reports
    through ``<workdir>/<name>.json`` and leaves by ``os._exit``; ``kill_after``
    SIGKILLs it after that many seconds unless it ended first.
    """
    out = workdir / f"{name}.json"
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 3
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            value = fn()
            out.write_text(json.dumps({"value": value}, default=str))
            code = 0
        except BaseException:  # noqa: BLE001 - reported to the parent, whatever it is
            out.write_text(json.dumps({"error": traceback.format_exc()}))
        finally:
            os._exit(code)
    pidfd = os.pidfd_open(pid)
    try:
        if kill_after is not None and not select.select([pidfd], [], [], kill_after)[0]:
            os.kill(pid, signal.SIGKILL)
        if not select.select([pidfd], [], [], timeout)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "error", f"{name} hung for more than {timeout}s"
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) or os.waitstatus_to_exitcode(status) == 137:
        return "killed", os.waitstatus_to_exitcode(status)
    body = json.loads(out.read_text()) if out.exists() else {"error": f"{name}: no report"}
    return ("ok", body["value"]) if "value" in body else ("error", body["error"])
