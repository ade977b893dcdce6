"""Map at run time: ``Send(node, arg)`` makes one task of ``node`` whose state is ``arg``.

A route returns Sends (alone, or mixed with node names and END) when the items
are only known at run time. Each Send is one task of the next superstep, with
its own identity ``superstep:node:index``, so its own pending write, intents
and approvals. The Sends are stored with the checkpoint that plans them, so a
resume runs exactly those tasks with exactly those args.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ...formats import check_serializable
from ...formats.errors import NotSerializable
from ..base.errors import FlowError


@dataclass(frozen=True)
class Send:
    """One task of ``node`` in the next superstep, whose ``state`` argument is ``arg``.

    ``arg`` is a mapping with string keys and values bide keeps (the same rule as a
    run's state); the task sees it read-only. Its output is reduced into the run's
    state like any node's (``bide.append`` collects the items' results).
    """

    node: str
    arg: Mapping[str, Any]


class Task(NamedTuple):
    """One task of a superstep: its id, its node, and its Send's ``arg`` (None: run state).

    A named tuple, not a frozen dataclass: one is made per task per superstep, and
    a frozen dataclass sets each field through ``object.__setattr__``.
    """

    id: str
    node: str
    arg: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """How people see it: ``search[3]`` for a Send task, ``plan`` for the others."""
        return self.node if self.arg is None else f"{self.node}[{self.id.rpartition(':')[2]}]"


def checked_arg(flow: str, src: str, send: Send) -> dict[str, Any]:
    """The Send's ``arg`` as a plain dict, or a FlowError naming the route and the node."""
    where = f"route from {src!r} sent to {send.node!r}"
    if not isinstance(send.arg, Mapping):
        raise FlowError(f"{where} with an arg of type {type(send.arg).__name__}; a Send's arg "
                        "is a mapping of state values, e.g. Send('search', {'query': q})",
                        flow=flow, node=send.node)
    arg = dict(send.arg)
    for key, value in arg.items():
        if not isinstance(key, str):
            raise FlowError(f"{where} with a non-string key {key!r} in its arg", flow=flow,
                            node=send.node)
        try:
            check_serializable(value, key)
        except NotSerializable as exc:
            raise FlowError(f"{where} with an arg bide cannot keep: {exc}", flow=flow,
                            node=send.node) from None
    return arg


def plan_tasks(superstep: int, names: list[str], sends: list[tuple[str, dict[str, Any]]]
               ) -> list[Task]:
    """The tasks of a superstep: its triggered nodes, then its Sends in the order sent.

    A node's Send tasks are numbered after its own task (if it is also triggered),
    so every task id is unique and the same on every resume.
    """
    tasks = [Task(f"{superstep}:{name}:0", name) for name in names]
    if not sends:
        return tasks
    used = {name: 1 for name in names}
    for node, arg in sends:
        index = used.get(node, 0)
        used[node] = index + 1
        tasks.append(Task(f"{superstep}:{node}:{index}", node, arg))
    return tasks


def next_labels(names: list[str], sends: list[Any]) -> list[str]:
    """What a checkpoint runs next, for people: names, then ``search[0..11]`` per Send node."""
    tasks = plan_tasks(0, list(names), [(node, arg) for node, arg in sends])
    out = list(names)
    sent: dict[str, list[str]] = {}
    for t in tasks[len(names):]:
        sent.setdefault(t.node, []).append(t.id.rpartition(":")[2])
    for node, ids in sent.items():
        out.append(f"{node}[{ids[0]}]" if len(ids) == 1 else f"{node}[{ids[0]}..{ids[-1]}]")
    return out


def labels_of(superstep: int, names: list[str], sends: list[Any]) -> dict[str, str]:
    """Task id -> label (``search[3]``) for the tasks a checkpoint plans."""
    tasks = plan_tasks(superstep, list(names), [(node, arg) for node, arg in sends])
    return {t.id: t.label for t in tasks}
