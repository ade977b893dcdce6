"""Hand runs to a fixed set of worker threads: never one run twice at once, and at most
``limits[flow]`` runs of a flow at once.

The watcher's inbox loop and its rescans ``offer`` runs; a worker takes the oldest
offer whose flow is under its limit. A run offered while a worker has it is
offered again when that worker is done (it may have paused and been decided
meanwhile), not run twice at once. Within one process this set of run ids is the
guard; between processes the run's lease is.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping

Work = Callable[[str], None]


class Dispatcher:
    """N named worker threads taking run ids from one queue (see the module docstring)."""

    def __init__(self, work: Work, *, workers: int, limits: Mapping[str, int] | None = None,
                 log: Callable[[str], None] = print, name: str = "bide-worker") -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a whole number of at least 1, not {workers!r}")
        self.limits = check_limits(limits or {})
        self._work, self._log = work, log
        self._cond = threading.Condition()
        self._queued: dict[str, str] = {}  # run id -> flow, oldest first
        self._busy: dict[str, str] = {}  # run id -> flow, held by a worker now
        self._again: set[str] = set()  # offered while busy: queue again when done
        self._per_flow: Counter[str] = Counter()
        self._closing = False
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
                         for i in range(workers)]

    @property
    def workers(self) -> int:
        return len(self._threads)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def offer(self, run_id: str, flow: str) -> bool:
        """Queue ``run_id`` unless it is queued already; False if it was not queued now."""
        with self._cond:
            if self._closing or run_id in self._queued:
                return False
            if run_id in self._busy:
                self._again.add(run_id)
                return False
            self._queued[run_id] = flow
            self._cond.notify_all()
            return True

    def busy(self) -> set[str]:
        """The runs workers hold right now."""
        with self._cond:
            return set(self._busy)

    def idle(self) -> bool:
        """Nothing queued and no worker busy."""
        with self._cond:
            return not self._queued and not self._busy

    def close(self, timeout: float) -> bool:
        """Take no more runs; wait up to ``timeout`` seconds for the workers to finish theirs.

        Returns:
            True if every worker has stopped.
        """
        with self._cond:
            self._closing = True
            self._queued.clear()
            self._cond.notify_all()
        for t in self._threads:
            if t.ident is not None:
                t.join(timeout)
        return not any(t.is_alive() for t in self._threads)

    def _take(self) -> tuple[str, str] | None:
        """The oldest queued run whose flow is under its limit (the lock is held)."""
        for run_id, flow in self._queued.items():
            if self._per_flow[flow] < self.limits.get(flow, len(self._threads)):
                del self._queued[run_id]
                self._busy[run_id] = flow
                self._per_flow[flow] += 1
                return run_id, flow
        return None

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (taken := self._take()) is None:
                    self._cond.wait(timeout=1.0)  # woken by offer/finish; the timeout is a guard
                if self._closing or taken is None:
                    return
            run_id, flow = taken
            try:
                self._work(run_id)
            except Exception as exc:  # a store error, a bug: this run's worker logs it, serves on
                self._log(f"run {run_id}: worker error, left for the next rescan: "
                          f"{type(exc).__name__}: {exc}")
            finally:
                self._done(run_id, flow)

    def _done(self, run_id: str, flow: str) -> None:
        with self._cond:
            del self._busy[run_id]
            self._per_flow[flow] -= 1
            if run_id in self._again and not self._closing:
                self._queued[run_id] = flow
            self._again.discard(run_id)
            self._cond.notify_all()


def check_limits(limits: Mapping[str, int]) -> dict[str, int]:
    """Per-flow limits as given, or ValueError naming the bad one."""
    out = {}
    for flow, n in limits.items():
        if not isinstance(flow, str) or not flow:
            raise ValueError(f"a concurrency limit needs a flow name, not {flow!r}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"the concurrency limit of flow {flow!r} must be a whole number "
                             f"of at least 1, not {n!r}")
        out[flow] = n
    return out
