"""Flows: named nodes, static edges and joins, conditional routes, per-key reducers."""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import FlowError
from .send import Send, checked_arg

END = "__end__"
DEFAULT_CONCURRENCY = 8  # tasks of one node that run at once in a superstep

Reducer = Callable[[Any, Any], Any]


def append(old: Any, new: Any) -> list[Any]:
    """Reducer: extend the list with ``new`` (a list) or add one item."""
    items = list(new) if isinstance(new, (list, tuple)) else [new]
    return (list(old) if old is not None else []) + items


def merge(old: Any, new: Any) -> dict[str, Any]:
    """Reducer: shallow dict update."""
    if not isinstance(new, dict):
        raise TypeError(f"merge reducer needs a dict update, got {type(new).__name__}")
    return {**(old or {}), **new}


BUILTIN_REDUCERS: dict[Any, str] = {append: "append", merge: "merge"}


def reducer_kind(fn: Reducer | None) -> str:
    """How a key's updates are stored: set, append, merge or custom."""
    if fn is None:
        return "set"
    return BUILTIN_REDUCERS.get(fn, "custom")


@dataclass(frozen=True)
class Node:
    name: str
    fn: Callable[..., Any]
    after: tuple[str, ...] = ()
    start: bool = False
    retries: int = 0
    retry_backoff: float = 0.0
    concurrency: int = DEFAULT_CONCURRENCY
    # asked of every task each superstep: looked up once, not inspected each time
    is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))


class Flow:
    """A graph of nodes; its ``name`` identifies it in the store."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise FlowError(f"a flow needs a non-empty string name, not {name!r}")
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.routes: dict[str, Callable[[Any], Any]] = {}
        self.reducers: dict[str, Reducer] = {}
        self._after_index: tuple[int, dict[str, list[str]], dict[str, int]] | None = None

    def node(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        start: bool = False,
        after: Iterable[str] = (),
        retries: int = 0,
        retry_backoff: float = 0.0,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> Any:
        """Decorator: add ``fn(state, ctx)`` as a node. ``after`` lists what it joins on.

        ``concurrency`` bounds how many of its tasks (its Sends) run at once.
        A node reached only through Sends needs neither ``start`` nor ``after``.
        """
        if (not isinstance(concurrency, int) or isinstance(concurrency, bool)
                or concurrency < 1):
            raise FlowError(f"concurrency must be an int >= 1, not {concurrency!r}",
                            flow=self.name, node=name)

        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            node_name = name or f.__name__
            if node_name in self.nodes:
                raise FlowError(f"flow {self.name!r} already has a node named {node_name!r}",
                                flow=self.name, node=node_name)
            if node_name == END:
                raise FlowError(f"{END!r} is reserved for the end of a flow", flow=self.name,
                                node=node_name)
            deps = (after,) if isinstance(after, str) else tuple(after)
            self.nodes[node_name] = Node(node_name, f, deps, start, retries, retry_backoff,
                                         concurrency)
            self._after_index = None  # successors() reads an index of who comes after whom
            return f

        return add(fn) if fn is not None else add

    def route(self, node: str, fn: Callable[[Any], Any]) -> None:
        """After ``node`` completes, ``fn(state)`` names the next node(s) or returns END.

        It may also return ``Send(node, arg)`` items (alone or in a list, mixed with
        names): one task of ``node`` per Send, whose state is ``arg``.
        """
        self.routes[node] = fn

    def reducer(self, key: str, fn: Reducer) -> None:
        """How parallel or repeated writes to ``key`` combine (default: overwrite)."""
        self.reducers[key] = fn

    # -- checks and identity ----------------------------------------------
    def validate(self) -> None:
        if not any(n.start for n in self.nodes.values()):
            raise FlowError(f"flow {self.name!r} has no start node (use @flow.node(start=True))",
                            flow=self.name)
        for node in self.nodes.values():
            for dep in node.after:
                if dep not in self.nodes:
                    raise FlowError(f"node {node.name!r} is after {dep!r}, which is not a node "
                                    f"of flow {self.name!r}", flow=self.name, node=node.name)
        for src in self.routes:
            if src not in self.nodes:
                raise FlowError(f"route from {src!r}, which is not a node of flow {self.name!r}",
                                flow=self.name, node=src)

    def fingerprint(self) -> str:
        """A digest of the graph's shape, recorded on each run."""
        shape = {
            "nodes": {n.name: [list(n.after), n.start] for n in self.nodes.values()},
            "routes": sorted(self.routes),
            "reducers": {k: reducer_kind(v) for k, v in sorted(self.reducers.items())},
        }
        blob = json.dumps(shape, sort_keys=True).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()[:16]

    def start_nodes(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.start]

    def order(self, names: Iterable[str]) -> list[str]:
        """Node names in definition order (the deterministic order of a superstep)."""
        position = self._index()[2]
        return sorted({n for n in names if n in position}, key=position.__getitem__)

    def _dependents(self, done: set[str]) -> list[Node]:
        """The nodes whose ``after`` names one of ``done``, in definition order.

        Looked up, not scanned: walking every node each superstep made a superstep's
        Python grow with the flow (200 nodes of a fan-out flow: 200 checks a step).
        """
        _, by_dep, position = self._index()
        names = {n for dep in done if dep in by_dep for n in by_dep[dep]}
        if not names:  # the nodes done lead on by their routes only (a loop's step)
            return []
        return [self.nodes[n] for n in sorted(names, key=position.__getitem__)]

    def _index(self) -> tuple[int, dict[str, list[str]], dict[str, int]]:
        """Per node, the nodes after it; per node, its place: made again when nodes change."""
        index = self._after_index
        if index is None or index[0] != len(self.nodes):
            by_dep: dict[str, list[str]] = {}
            for node in self.nodes.values():
                for dep in dict.fromkeys(node.after):
                    by_dep.setdefault(dep, []).append(node.name)
            index = (len(self.nodes), by_dep, {n: i for i, n in enumerate(self.nodes)})
            self._after_index = index
        return index

    def successors(
        self,
        completed: list[str],
        state: Any,
        seen: dict[str, dict[str, int]],
    ) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
        """The nodes triggered by ``completed``, and the Sends its routes returned.

        Each route runs once per superstep, however many tasks its node had.
        Updates ``seen`` in place: ``seen[join]`` holds the dependencies of a join
        that completed since the join last ran; the entry goes away when the join
        fires, so checkpoints carry only joins that are half satisfied.
        """
        done = set(completed)
        triggered: set[str] = set()
        sends: list[tuple[str, dict[str, Any]]] = []
        for name in completed if len(completed) == 1 else dict.fromkeys(completed):
            if name in self.routes:
                names, sent = self._routed(name, self.routes[name](state))
                triggered.update(names)
                sends.extend(sent)
        for node in self._dependents(done):
            if len(node.after) == 1:
                triggered.add(node.name)
                continue
            got = set(seen.get(node.name, {})) | (done & set(node.after))
            if got >= set(node.after):
                triggered.add(node.name)
                seen.pop(node.name, None)
            else:
                seen[node.name] = {dep: 1 for dep in sorted(got)}
        if len(triggered) == 1:  # a chain's next node (checked a node): nothing to sort
            return list(triggered), sends
        return self.order(triggered), sends

    def _routed(self, src: str, target: Any
                ) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
        if type(target) is str and target in self.nodes:  # the common route: one node
            return [target], []
        single = target is None or isinstance(target, (str, Send))
        targets = [target] if single else list(target)
        names: list[str] = []
        sends: list[tuple[str, dict[str, Any]]] = []
        for t in targets:
            if t is None or t == END:
                continue
            node = t.node if isinstance(t, Send) else t
            if not isinstance(node, str) or node not in self.nodes:
                what = "a Send to " if isinstance(t, Send) else ""
                raise FlowError(f"route from {src!r} returned {what}{node!r}, which is not a "
                                f"node of flow {self.name!r}", flow=self.name, node=src)
            if isinstance(t, Send):
                sends.append((node, checked_arg(self.name, src, t)))
            else:
                names.append(node)
        return names, sends
