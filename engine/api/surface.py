"""The Engine methods that front the read side, upkeep and the inbox door.

``bide`` is the one public surface (the CLI uses nothing else): these methods
are thin, typed delegations to the modules that do the work (``inspect``,
``operations``, ``maintenance``, ``inbox``), kept out of ``runtime`` so that
module stays about running flows. ``Engine`` inherits them.

The readers return plain JSON-ready data (dicts and lists, as ``bide ... --json``
prints them) and each reads one consistent snapshot, so they work while other
processes write.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..base.vocabulary import Status
from ..human import deliver, signal_files, signing
from ..read import follow as following
from ..read import inspect
from ..read.events import Event
from ..upkeep import maintenance, operations
from ..upkeep.maintenance import DoctorReport, PruneReport

if TYPE_CHECKING:
    from ..run.host import Host


class Surface:
    """Mixed into ``Engine``: reading runs as data, acting on them, keeping the store."""

    def _engine(self) -> Host:
        return cast("Host", self)

    # -- reading ----------------------------------------------------------------
    def run_rows(self, *, status: Status | str | None = None, flow: str | None = None,
                 limit: int | None = None) -> list[dict[str, Any]]:
        """One row per run, newest first, with what it waits on and whether its lease
        is live (``bide runs``). Raises UnknownStatus for a status that does not exist."""
        return inspect.runs(self._engine(), status=status, flow=flow, limit=limit)

    def show(self, run_id: str) -> dict[str, Any]:
        """The run's snapshot: status, version, committed nodes, pending writes, what it
        waits on, its lease, error and policy (``bide show``). Raises UnknownRun."""
        return inspect.show(self._engine(), run_id)

    def log(self, run_id: str) -> list[dict[str, Any]]:
        """Every record of the run in log order: seq, type, bytes, time, a one-line
        summary and the record itself; an unreadable one says why (``bide log``)."""
        return inspect.log(self._engine(), run_id)

    def follow(self, run_id: str, *, since: int | None = None, through_pauses: bool = False,
               timeout: float | None = None, fallback: float = following.FALLBACK,
               stop: threading.Event | None = None, outage: following.Outage | None = None
               ) -> Generator[Event, None, None]:
        """The run's records as typed events, as they are committed by any process (a
        watcher, another app): all of them first, then each new one within milliseconds.

        Args:
            since: the ``seq`` of the last event already seen: go on after it, with no
                gap and no repeat (None: from the run's first record).
            through_pauses: go on while the run waits for a person (or was let go by
                its worker) until it finishes; by default a pause ends the follow.
            timeout: seconds after which ``FollowTimeout`` is raised if the run has
                neither finished nor paused (None: no limit).
            fallback: seconds between re-reads of the store when no wake-up comes.
            stop: set from another thread, it ends the follow after its current wait (at
                most ``fallback`` s): a follow busy in another thread cannot be closed.
            outage: how to wait out a store that cannot be read (``bide.Outage``: the
                first and the longest pause, and whom to tell when it goes away and comes
                back); the follow then goes on from the last event, with no gap and no
                repeat, as ``bide log --follow`` does. None: ``StoreError`` ends it.

        Returns:
            An iterator; close it (or leave the loop) to release what it holds.

        Raises:
            UnknownRun: at once, as ``get`` does. FollowTimeout: see ``timeout``.
            StoreError: without ``outage``, the store could not be read (a PostgreSQL
                server away longer than the store's reconnect time): not retried unless
                asked, since how long an outage may last is the caller's call (a script
                may prefer to fail).
            ValueError: ``timeout`` and ``outage`` together (a deadline through an
                outage of unknown length is not one).
        """
        return following.follow_with(self._engine().store, run_id, outage, since=since,
                                     through_pauses=through_pauses, timeout=timeout,
                                     fallback=fallback, stop=stop)

    def afollow(self, run_id: str, *, since: int | None = None, through_pauses: bool = False,
                timeout: float | None = None, fallback: float = following.FALLBACK,
                outage: following.Outage | None = None) -> AsyncIterator[Event]:
        """``follow`` for async code (``async for event in engine.afollow(run_id)``); the
        waits happen off the event loop (an ``outage``'s pauses too, and its ``away`` and
        ``back`` are called there). UnknownRun is raised at the first step."""
        return following.afollow(self._engine().store, run_id, outage, since=since,
                                 through_pauses=through_pauses, timeout=timeout,
                                 fallback=fallback)

    def checkpoint_rows(self, run_id: str) -> list[dict[str, Any]]:
        """``checkpoints`` as JSON-ready rows (``bide checkpoints``).

        Raises:
            UnknownRun. LangGraphThread: the run is a LangGraph thread.
        """
        return inspect.checkpoints(self._engine(), run_id)

    def state_at(self, run_id: str, version: int | None = None) -> tuple[int, dict[str, Any]]:
        """``(version, state)`` at the latest checkpoint or at ``version`` (``bide state``).

        Raises:
            UnknownRun, UnknownVersion. LangGraphThread: the run is a LangGraph thread.
        """
        return inspect.state(self._engine(), run_id, version)

    def diff(self, run_id: str, v1: int, v2: int) -> list[dict[str, Any]]:
        """Which state keys changed from version ``v1`` to ``v2`` and how (added, removed,
        appended, merged, changed), with both values (``bide diff``)."""
        return inspect.diff(self._engine(), run_id, v1, v2)

    def intent_rows(self, run_id: str | None = None, *, unknown: bool = False
                    ) -> list[dict[str, Any]]:
        """Tool calls with every field of their intent (``bide intents``).

        With ``unknown``: only calls in doubt (prepared with no outcome, or waiting
        for a human) of runs no live worker is advancing, across all runs unless
        ``run_id`` is given.
        """
        return inspect.intents(self._engine(), run_id, unknown=unknown)

    def export(self, run_id: str) -> dict[str, Any]:
        """Everything stored about one run, as one JSON-ready document (``bide export``)."""
        return inspect.export(self._engine(), run_id)

    # -- acting on runs ----------------------------------------------------------
    def cancel(self, run_id: str, reason: str | None = None) -> bool:
        """Stop a run for good (``CANCELLED``); its records are kept and a worker holding
        it is fenced out. Returns False if it already was cancelled.

        Raises:
            UnknownRun. NotCancellable: the run is DONE.
        """
        return operations.cancel(self._engine(), run_id, reason)

    def fork(self, run_id: str, version: int, *, new_id: str | None = None) -> str:
        """Start a PENDING run from the state of ``run_id`` at checkpoint ``version``.

        Returns:
            The new run's id (``<run_id>-fork-xxxxxx`` unless ``new_id`` is given).

        Raises:
            UnknownRun, UnknownVersion, RunExists. ValueError: an unusable ``new_id``.
        """
        return operations.fork(self._engine(), run_id, version, new_id)

    def drop_decision(self, approval_id: str, decision: str, *, by: str | None = None,
                      reason: str | None = None, result: Any = None,
                      key: bytes | None = None) -> Path:
        """Write a decision file into the inbox, for a watcher to apply: the door people
        and other programs use (``bide approve`` on a directory home).

        It is checked first, so no file is written that the watcher would refuse: the
        home's key requirement (``key`` signs the file), and that the request exists,
        takes this decision and is neither decided nor expired.

        Returns:
            The file written.

        Raises:
            ApprovalKeyError, UnknownApproval, DecisionNotAllowed, DecisionRefused.
        """
        return deliver.drop(self._engine(), approval_id, decision, by=by, reason=reason,
                            result=result, key=key)[0]

    def record_decision(self, approval_id: str, decision: str, *, by: str | None = None,
                        reason: str | None = None, result: Any = None,
                        key: bytes | None = None, run_id: str | None = None,
                        digest: str | None = None) -> dict[str, Any]:
        """Record a decision in the store at once, after the checks a decision file
        gets at the watcher: the home's key when it requires signed decisions (``key``
        must be it), that the request exists, takes this decision, matches ``run_id``
        and ``digest`` when given, and is neither decided nor expired.

        Returns:
            The request it decided (as in ``pending()``).

        Raises:
            ApprovalKeyError, UnknownApproval, DecisionNotAllowed, DecisionRefused
            (the same decision already recorded too). Nothing is written then.
        """

        req = deliver.record(self._engine(), approval_id, decision, by=by, reason=reason,
                             result=result, key=key, run_id=run_id, digest=digest)
        return inspect.pending_row(req)

    def deliver_decision(self, approval_id: str, decision: str, *, by: str | None = None,
                         reason: str | None = None, result: Any = None,
                         key: bytes | None = None) -> dict[str, Any]:
        """``bide approve``: record the decision in the store on a home that hosts share
        (PostgreSQL), or drop it as a file into the inbox of a directory home.

        Returns:
            ``approval_id``, ``decision``, ``run_id``, ``home``, and ``file``: the file
            dropped, or None when the decision was recorded in the store.

        Raises:
            ApprovalKeyError, UnknownApproval, DecisionNotAllowed, DecisionRefused.
        """
        engine = self._engine()
        path = None
        if deliver.shared(engine):
            req = deliver.record(engine, approval_id, decision, by=by, reason=reason,
                                 result=result, key=key)
        else:
            path, req = deliver.drop(engine, approval_id, decision, by=by, reason=reason,
                                     result=result, key=key)
        return {"approval_id": approval_id, "decision": decision, "run_id": req.run_id,
                "home": engine.doors.home, "file": None if path is None else str(path)}

    def deliver_signal(self, run_id: str, name: str, data: Any = None, *,
                       by: str | None = None, key: bytes | None = None) -> dict[str, Any]:
        """``bide signal``: record the signal in the store on a home hosts share
        (PostgreSQL), or drop it as a signal file into a directory home's inbox (a
        watcher records it and resumes the run at once). Checked first either way.

        Returns:
            ``run_id``, ``signal``, ``home``, and ``file``: the file dropped, or None.

        Raises:
            ApprovalKeyError (the home requires signed files, ``key`` is not its key),
            UnknownRun, SignalRefused, NotSerializable.
        """
        return signal_files.deliver(self._engine(), run_id, name, data, by=by, key=key)

    # -- the store -----------------------------------------------------------------
    def doctor(self, *, rebuild: bool = False) -> DoctorReport:
        """Check every record's checksum and that the indexes equal a replay of the log;
        with ``rebuild``, first rewrite the indexes from the log (``bide doctor``).

        Raises:
            LogUnreadable: ``rebuild`` was asked but some records cannot be read.
        """
        return maintenance.doctor(self._engine().store, rebuild=rebuild)

    def prune(self, *, keep: int = 1, finished_older_than: float | None = None,
              dry_run: bool = False) -> PruneReport:
        """Remove old checkpoints (never what a run needs to resume) and, with
        ``finished_older_than`` seconds, old finished runs whole (``bide prune``).

        Raises:
            ValueError: ``keep`` < 1. LogUnreadable: some records cannot be read.
        """
        return maintenance.prune(self._engine().store, keep=keep,
                                 finished_older_than=finished_older_than, dry_run=dry_run)

    def stats(self) -> dict[str, Any]:
        """Store size and map usage, records by type, runs by status, tool calls in
        doubt and decisions waiting (``bide stats``)."""
        return maintenance.stats(self._engine().store)


def read_approval_key(path: str | os.PathLike[str]) -> bytes:
    """The HMAC key in a file (surrounding whitespace stripped), for ``approval_key=``
    and ``Engine.drop_decision(key=)``."""
    return signing.read_key(path)
