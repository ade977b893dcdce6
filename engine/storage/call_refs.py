"""Checkpoint ops that name a tool call's recorded result instead of repeating it.

A node that returns what its tool returned (``{"last": ctx.tool(send, ...)}``)
had that result stored twice: in the call's ``IntentCompleted`` and again in
the checkpoint's op that sets ``last`` (100 B of a tool step's 415). A version-5
checkpoint's deferred op may instead be ``(key, "@", [task, index])``: set
``key`` to the recorded result of the task's call ``index`` (or ``[index,
"node:fan-out"]`` for a task of the superstep just before the checkpoint's).

Why it is safe:
- The result is recorded before the checkpoint is durable: every commit of the
  run carries the held outcomes first (engine/run/held.py), in the same transaction
  or an earlier one, and a completed call never changes afterwards (only a call
  in doubt is resolved later, and its decision then holds the result).
- Only a ``str`` or ``bytes`` result is referred to: it cannot have changed
  between the call and the node's return. A dict the node might have edited is
  stored as before.
- Every reader resolves it through ``resolve``: the latest-state fold (from the
  intents table, in the same transaction), a replay (``state.apply_delta``),
  a rebuild, retention's refold and ``bide doctor``. Retention keeps every
  intent of a run it keeps, so a kept checkpoint's calls stay (engine/upkeep/maintenance.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from ...formats import Checkpoint
from ...formats.records import intent_key
from ..base.vocabulary import IntentStatus


class _Outcome(Protocol):
    """What ``recorded`` reads of a call's intent state (``index.IntentState``)."""

    @property
    def status(self) -> str: ...

    @property
    def result(self) -> Any: ...


CALL = "@"  # the op kind ("at call"): its value is [task, index]
Op = tuple[str, str, Any]
Called = Callable[[str, str, int], Any]  # (run_id, task, index) -> the recorded result
_KEPT = (str, bytes)
_SAVES = 8  # a reference costs the task id and a few bytes: refer only to longer results


def refer(ops: Iterable[Op], task: str, results: Mapping[int, Any]) -> list[Op]:
    """``ops`` with each ``set`` of a value the task's call returned as a reference."""
    if not results:
        return list(ops)
    out = []
    for op in ops:
        key, kind, value = op
        if kind == "set" and type(value) in _KEPT and len(value) > len(task) + _SAVES:
            index = _index_of(value, results)
            if index is not None:
                op = (key, CALL, [task, index])
        out.append(op)
    return out


def _index_of(value: Any, results: Mapping[int, Any]) -> int | None:
    for index, result in results.items():
        if result is value or (type(result) is type(value) and result == value):
            return index
    return None


def shorten(ops: Iterable[Op], superstep: int) -> list[Op]:
    """References to calls of the superstep before a checkpoint's (``superstep``) as
    ``[index, "node:fan-out"]``: the superstep number is the checkpoint's, less one.
    The order tells the forms apart (a full one is ``[task, index]``)."""
    ops = list(ops)
    for op in ops:
        if op[1] == CALL:
            break
    else:  # no reference (most supersteps): nothing to shorten
        return ops
    prefix = f"{superstep - 1}:"
    out = []
    for op in ops:
        if op[1] == CALL and op[2][0].startswith(prefix):
            task, index = op[2]
            op = (op[0], CALL, [index, task[len(prefix):]])
        out.append(op)
    return out


def resolve(ops: Iterable[Op], run_id: str, superstep: int, called: Called) -> Iterator[Op]:
    """``ops`` (a checkpoint's at ``superstep``) with each reference replaced by the
    ``set`` of the result it names.

    Raises:
        KeyError: a referred call has no recorded result (damage: no reader guesses).
    """
    for op in ops:
        if op[1] == CALL:
            yield (op[0], "set", called(run_id, *_named(op[2], superstep)))
        else:
            yield op


def _named(ref: list[Any], superstep: int) -> tuple[str, int]:
    """``(task, index)`` of a reference in either form (``shorten``)."""
    first, second = ref
    if isinstance(first, int):
        return f"{superstep - 1}:{second}", first
    return first, second


def unresolved(items: Iterable[tuple[int, int, Any]], called: Called
               ) -> list[tuple[int, str]]:
    """``(seq, why)`` of each checkpoint among a run's ``(seq, size, record)`` whose
    named call has no recorded result (``bide doctor``)."""
    out = []
    for seq, _, record in items:
        if not isinstance(record, Checkpoint):
            continue
        for op in record.deferred:
            if op[1] == CALL:
                try:
                    called(record.run_id, *_named(op[2], record.superstep))
                except KeyError as exc:
                    out.append((seq, str(exc.args[0])))
    return out


def no_calls(run_id: str, task: str, index: int) -> Any:
    """A ``Called`` for a fold that has no intents to read: every reference is damage."""
    raise KeyError(f"run {run_id!r}: no call results to resolve {intent_key(task, index)!r}")


def recorded(state: _Outcome | None, run_id: str, task: str, index: int) -> Any:
    """The result a call's intent state holds, for ``resolve``.

    Raises:
        KeyError: no such call, or it has no result (not completed, not marked done).
    """
    if state is None or state.status not in (IntentStatus.COMPLETED, IntentStatus.RESOLVED):
        raise KeyError(f"run {run_id!r}: a checkpoint names the result of call "
                       f"{intent_key(task, index)!r}, which has none")
    return state.result
