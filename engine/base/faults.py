"""Named fault points: where crash tests kill the process, and test-only switches.

Turn one on with ``BIDE_FAULT=name:occurrence:mode`` (mode ``kill`` = SIGKILL,
``exit`` = ``os._exit(137)``, ``raise`` = an exception), several separated by
commas. With no ``BIDE_FAULT`` set, ``point()`` is one global lookup and a return.
Every point the engine calls must be listed in ``FAULT_POINTS`` (a test checks).
"""

from __future__ import annotations

import os
import signal
import threading

FAULT_POINTS: dict[str, str] = {
    "before_commit": "a write transaction is about to start",
    "after_commit": "a write transaction just committed",
    "during_map_growth": "the map is full and is about to be grown",
    "after_run_created": "the run and its first checkpoint are durable",
    "after_pending_write": "a task's output is durable, its superstep not yet folded",
    "sibling_output_held": "a task finished: its output is held for the checkpoint (alone if late)",
    "after_checkpoint": "a superstep's checkpoint is durable",
    "map_planned": "the checkpoint holding a map's Sends is durable, none of them has run",
    "map_task_started": "a Send task took its slot and is about to run its node",
    "before_intent_prepared": "a tool call is about to be recorded",
    "after_intent_prepared": "the intent is durable, the tool not yet called",
    "after_tool_effect": "the tool returned (its side effect happened), outcome not recorded",
    "outcome_held": "the tool's outcome is held in memory to ride the task's next commit",
    "outcome_rides": "a commit carrying held tool outcomes is about to start",
    "before_outcome_flush": "no commit followed a held outcome in time: it is committed alone",
    "after_intent_completed": "the tool's outcome is durable (ridden or flushed alone)",
    "checkpoint_held": "a checkpoint carrying held tool outcomes waits to ride the next commit",
    "after_pause_committed": "a pause checkpoint and its request are durable",
    "after_request_file": "the request file for a pause is written",
    "timer_due": "a re-run node reached a due timer; its elapsed record not yet committed",
    "after_timer_elapsed": "a timer's elapsed record is durable, the node goes on",
    "after_lease_acquired": "a worker took a run's lease",
    "after_parent_paused": "a parent paused for child runs (created with it), none run yet",
    "after_child_ended": "a child run ended, its parent's log not yet told (no wake-up)",
    "after_parent_woken": "a child's end is in its parent's log, the parent not yet resumed",
    "after_signal_sent": "a signal is in its run's queue",
    "after_signal_consumed": "a wait's take of a signal is durable, its node not yet done",
    "after_schedule_recorded": "a schedule (new or replaced) is durable",
    "after_slot_run_created": "a schedule slot's run and its fired mark are durable, not yet run",
    "after_decision_recorded": "an inbox decision is in the store, its file not yet moved",
    "after_file_claimed": "an inbox file was claimed, not yet checked",
    "during_compact_swap": "a compacted copy is written and about to replace the store",
    "during_prune": "prune is removing a batch of records",
}

SWITCHES = ("no_intent_replay", "no_fencing", "no_signal_replay", "no_lease_deadline")


class InjectedFault(Exception):
    """Raised by a fault point in ``raise`` mode."""


def _parse(spec: str) -> dict[str, tuple[int, str]]:
    plan: dict[str, tuple[int, str]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rest = item.partition(":")
        occurrence, _, mode = rest.partition(":")
        if name not in FAULT_POINTS:
            raise ValueError(f"BIDE_FAULT names unknown fault point {name!r}")
        plan[name] = (int(occurrence or 1), mode or "kill")
    return plan


_plan: dict[str, tuple[int, str]] | None = _parse(os.environ.get("BIDE_FAULT", "")) or (
    {} if os.environ.get("BIDE_FAULT_TRACE") else None
)
_switches = frozenset(filter(None, os.environ.get("BIDE_TEST_SWITCHES", "").split(",")))
_seen: dict[str, int] = {}
_lock = threading.Lock()


def point(name: str) -> None:
    """Die here if ``BIDE_FAULT`` asks for this point at this occurrence."""
    if _plan is None:
        return
    _hit(name)


def _hit(name: str) -> None:
    wanted = _plan.get(name) if _plan else None
    with _lock:
        _seen[name] = count = _seen.get(name, 0) + 1
    if trace := os.environ.get("BIDE_FAULT_TRACE"):
        with open(trace, "a") as fh:
            fh.write(name + "\n")
    if wanted is None or wanted[0] != count:
        return
    mode = wanted[1]
    if mode == "raise":
        raise InjectedFault(f"injected fault at {name} #{count}")
    if mode == "exit":
        os._exit(137)
    os.kill(os.getpid(), signal.SIGKILL)


def switch(name: str) -> bool:
    """A test-only switch (``BIDE_TEST_SWITCHES=no_intent_replay``) that breaks a guarantee."""
    return name in _switches


def configure(spec: str | None = None, *, switches: str | None = None) -> None:
    """Re-read a plan in-process (tests, forked torture children).

    ``None`` turns every point off, unless ``BIDE_FAULT_TRACE`` is set (then
    points are only traced). ``switches`` replaces the test-only switches.
    """
    global _plan, _switches
    _plan = _parse(spec) if spec else ({} if os.environ.get("BIDE_FAULT_TRACE") else None)
    _seen.clear()
    if switches is not None:
        _switches = frozenset(filter(None, switches.split(",")))
