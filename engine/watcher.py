"""``bide watch``: take decisions from the inbox and keep runs moving, under leases.

At start it takes files already in the inbox and every runnable or orphaned
run; then it watches the inbox with watchfiles (files present before the
watch began are caught by a rescan each ``rescan`` seconds, as DESIGN.md
warns). SIGINT/SIGTERM stop it at the next boundary; runs stay resumable. A run that
cannot go on for a reason of its own (a renamed node, an unknown flow, a
corrupt record) is recorded as blocked on that run and logged; the watcher
keeps serving the others (see ``blocking``).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import watchfiles

from . import signing
from .inbox import Inbox
from .recovery import RecoverReport
from .runtime import Engine


class Watcher:
    """Serve one home: inbox decisions in, runs resumed."""

    def __init__(self, engine: Engine, *, poll: bool = False, max_orphan_age: float = 86400.0,
                 max_attempts: int = 5, rescan: float = 1.0, grace: float = 30.0,
                 log: Callable[[str], None] = print) -> None:
        self.engine, self.poll, self.rescan, self.log = engine, poll, rescan, log
        self.max_orphan_age, self.max_attempts, self.grace = max_orphan_age, max_attempts, grace
        self.inbox = Inbox(engine)
        self.stop = engine.stopping
        if engine.approval_key is None and signing.requirement(engine.home) is not None:
            log(f"{engine.home} requires signed decisions and this watcher has no key: every "
                "decision file will be refused; start it with --approval-key-file")

    def once(self) -> dict[str, Any]:
        """Process the inbox, then advance every run that can go on."""
        # A reader slot left by a killed process pins old pages until someone clears it;
        # a long-running watcher may be the only process that has the store open.
        self.engine.store.reader_check()
        files = self.inbox.process()
        for f in files:
            verdict = "accepted" if f.accepted else "rejected"
            self.log(f"file {verdict}: {f.name} ({f.reason})")
        report = RecoverReport() if self.stop.is_set() else self.engine.recover(
            max_age=self.max_orphan_age, max_attempts=self.max_attempts)
        runs = list(report)
        for run in runs:
            self.log(f"run {run.run_id}: {run.status.value.lower()}"
                     + (f" (waiting on {run.waiting['approval_id']})" if run.waiting else ""))
        for entry in report.blocked:
            if entry.recorded_now:  # said once, not at every rescan
                self.log(f"run {entry.run_id}: blocked, recorded on the run; serving the "
                         f"others: {entry.reason}")
        return {"files": files, "runs": runs}

    def serve(self) -> None:
        """Run until SIGINT/SIGTERM (or ``stop`` is set)."""
        self._install_signals()
        self.once()
        for _changes in watchfiles.watch(
            self.inbox.dir, stop_event=self.stop, force_polling=self.poll, step=10,
            debounce=100, rust_timeout=int(self.rescan * 1000), yield_on_timeout=True,
            watch_filter=None, recursive=False, raise_interrupt=False,
        ):
            if self.stop.is_set():
                break
            self.once()
        self.log("watcher stopped; runs left resumable")

    def _give_up(self) -> None:
        self.log("grace period over; exiting with runs left to recovery")
        os._exit(0)

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handle(signum: int, frame: Any) -> None:
            self.log(f"signal {signal.Signals(signum).name}: stopping at the next boundary "
                     f"(at most {self.grace:.0f}s)")
            self.stop.set()
            # A node that never returns must not keep the watcher alive: after the grace
            # period leave anyway; its run keeps its lease and is recovered as an orphan.
            timer = threading.Timer(self.grace, self._give_up)
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
