"""State as ops: how node updates become stored ops and ops become state again.

An op is ``(key, kind, value)``. Reading a state needs no flow code: the
built-in reducers are replayed by kind, and a custom reducer's result is
stored as a ``set`` in the checkpoint that folded it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...formats import Checkpoint, check_serializable
from ...formats.errors import NotSerializable
from ...formats.records import intent_key
from ..base.errors import ReducerConflict, StateNotSerializable
from ..storage import call_refs, latest
from ..storage.call_refs import Called
from ..storage.latest import DEFERRED as DEFERRED  # in Checkpoint.writes: the checkpoint's own ops
from ..storage.latest import Op as Op
from ..storage.store import Reader
from .flow import Flow, reducer_kind


def to_ops(flow: Flow, node: str, update: Any) -> list[Op]:
    """Check a node's return value and turn it into ops.

    Raises:
        TypeError: the node returned something other than a dict or None.
        StateNotSerializable: a value bide does not keep (names node, key and type).
    """
    if update is None:
        return []
    if type(update) is not dict and not isinstance(update, Mapping):  # (an ABC check is slow)
        raise TypeError(f"node {node!r} returned {type(update).__name__}; a node returns a "
                        "dict of state updates or None")
    ops: list[Op] = []
    for key, value in update.items():
        if not isinstance(key, str):
            raise TypeError(f"node {node!r} returned a non-string state key {key!r}")
        kind = reducer_kind(flow.reducers.get(key))
        if kind == "append" and not isinstance(value, (list, tuple)):
            value = [value]
        elif kind == "append":
            value = list(value)
        ops.append((key, kind, value))
    for key, _, value in ops:
        try:
            check_serializable(value, key)
        except NotSerializable as exc:
            raise StateNotSerializable.of(node, key, exc) from None
    return ops


def apply_op(state: dict[str, Any], op: Op, owned: set[str] | None = None) -> None:
    """Apply one stored op (``custom`` ops are inputs; their result comes as a ``set``).

    Values are copied before they change (nodes may still hold the old state),
    except keys in ``owned``: replaying a chain of deltas extends those in place,
    so reading a long run costs O(state), not O(state x deltas).
    """
    key, kind, value = op
    if kind == "set":
        state[key] = value
        if owned is not None:
            owned.discard(key)
    elif kind == "append":
        if owned is not None and key in owned:
            state[key].extend(value)
        else:
            state[key] = [*(state.get(key) or ()), *value]  # one new list, copied once
            if owned is not None:
                owned.add(key)
    elif kind == "merge":
        state[key] = {**(state.get(key) or {}), **value}


def fold(
    flow: Flow, state: dict[str, Any], writes: list[tuple[str, list[Op]]]
) -> tuple[dict[str, Any], list[Op]]:
    """Fold one superstep's writes (``(task name, ops)`` in task order) into a new state.

    Returns:
        The new state, and the ``set`` ops for keys with custom reducers (the
        checkpoint stores those, since the reducer is code).

    Raises:
        ReducerConflict: two tasks set a key that has no reducer.
    """
    if len(writes) > 1:  # one task's sets cannot conflict
        setters: dict[str, str] = {}
        for node, ops in writes:
            for key, kind, _ in ops:
                if kind == "set":
                    if key in setters and setters[key] != node:
                        raise ReducerConflict(key, [setters[key], node], flow=flow.name)
                    setters[key] = node
    new = dict(state)
    custom: dict[str, Any] = {}
    owned: set[str] = set()  # lists copied once by this fold: a map's appends extend them
    for _, ops in writes:
        for op in ops:
            key, kind, value = op
            if kind == "custom":
                new[key] = flow.reducers[key](new.get(key), value)
                custom[key] = new[key]
            else:
                apply_op(new, op, owned)
    if not custom:
        return new, []
    custom_ops = [(k, "set", v) for k, v in custom.items()]
    for key, _, value in custom_ops:
        try:
            check_serializable(value, key)
        except NotSerializable as exc:
            raise StateNotSerializable.of("(reducer)", key, exc) from None
    return new, custom_ops


def apply_delta(reader: Reader, state: dict[str, Any], cp: Checkpoint,
                owned: set[str] | None = None) -> None:
    """Apply a delta checkpoint: the pending writes it absorbed, then its own ops."""
    for op in latest.delta_ops(reader.record, cp, _call_results(reader)):
        apply_op(state, op, owned)


def _call_results(reader: Reader) -> Called:
    """What an op naming a tool call's result resolves to (engine/storage/call_refs.py)."""
    def called(run_id: str, task: str, index: int) -> Any:
        return call_refs.recorded(reader.intent(run_id, intent_key(task, index)),
                                  run_id, task, index)
    return called


def materialize(reader: Reader, run_id: str, seq: int) -> dict[str, Any]:
    """The state stored by the checkpoint at ``seq``.

    The run's newest checkpoint is read from the latest-state index in O(state);
    an older one (or a home whose index lacks the run) replays its base snapshot
    plus deltas.
    """
    indexed = latest.read(reader, run_id, seq)
    return indexed if indexed is not None else replay(reader, run_id, seq)


def replay(reader: Reader, run_id: str, seq: int) -> dict[str, Any]:
    """The state at checkpoint ``seq`` from the log: its base snapshot plus deltas."""
    cp = reader.record(seq)
    assert isinstance(cp, Checkpoint)
    if cp.full:
        return dict(cp.state or {})
    base = reader.record(cp.base)
    assert isinstance(base, Checkpoint)
    state = dict(base.state or {})
    owned: set[str] = set()  # lists this replay made itself and may extend in place
    for cseq in _checkpoints_between(reader, run_id, cp.base + 1, seq):
        delta = reader.record(cseq)
        assert isinstance(delta, Checkpoint)
        apply_delta(reader, state, delta, owned)
    return state


def _checkpoints_between(reader: Reader, run_id: str, start: int, end: int) -> Iterable[int]:
    for seq, rtype in reader.run_entries(run_id, start):
        if seq > end:
            return
        if rtype == "checkpoint":
            yield seq
