"""Benchmark workloads: flows with a known final state and a known logical size.

- ``linear``: K nodes in a chain; each appends one B-byte payload (append
  reducer) and bumps a counter (additive reducer).
- ``fanout4``: K supersteps of 4 parallel nodes; each layer joins all 4 of the
  previous one. Each node appends one payload and bumps the counter.
- ``agent``: an LLM-like node and a tool node alternating for N turns; the
  message list grows by ~B bytes a turn and the tool node makes one
  non-idempotent tool call per turn through the intent log.
- ``long``: one node looping K times (append + counter), to see how cost grows
  with run length.

A workload is described by a short spec (``linear:50:1000`` = kind, size,
payload bytes), so a crash-test subprocess can rebuild the same flow.
Tests reuse these flows: ``expected()`` is the final state computed by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...engine.run.flow import END, Flow, append
from ...engine.run.tools import Tool

KINDS = ("linear", "fanout4", "agent", "long")
WIDTH = 4  # fanout4's parallel nodes per superstep


def add(old: Any, new: Any) -> int:
    """Additive reducer for the counter."""
    return (old or 0) + new


def payload(i: int, size: int) -> str:
    """A deterministic ``size``-byte ASCII payload, distinct per index."""
    head = f"{i:07d}:"
    return (head + "x" * size)[:size]


class Counters:
    """Side-effect counters in plain files outside the store (they survive SIGKILL).

    ``execs-<phase>.log`` gets ``S <task>`` when a node starts and ``E <task>``
    when it returns; ``effects.log`` gets ``<idempotency key>\\t<turn>`` per tool effect.
    """

    def __init__(self, directory: str | os.PathLike[str], phase: str) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.phase = phase
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._execs = os.open(self.dir / f"execs-{phase}.log", flags)
        self._effects = os.open(self.dir / "effects.log", flags)

    def node(self, mark: str, task: str) -> None:
        os.write(self._execs, f"{mark} {task}\n".encode())  # one write: whole lines only

    def effect(self, key: str, turn: int) -> None:
        os.write(self._effects, f"{key}\t{turn}\n".encode())

    def close(self) -> None:
        os.close(self._execs)
        os.close(self._effects)

    @staticmethod
    def read_execs(directory: str | os.PathLike[str], phase: str) -> tuple[list[str], set[str]]:
        """(tasks started, in order; tasks that returned) in one phase."""
        path = Path(directory) / f"execs-{phase}.log"
        started: list[str] = []
        ended: set[str] = set()
        if path.exists():
            for line in path.read_text().splitlines():
                mark, _, task = line.partition(" ")
                if mark == "S":
                    started.append(task)
                elif mark == "E":
                    ended.add(task)
        return started, ended

    @staticmethod
    def read_effects(directory: str | os.PathLike[str]) -> dict[str, list[int]]:
        """Idempotency key → the turns it had an effect for (one entry per effect)."""
        path = Path(directory) / "effects.log"
        out: dict[str, list[int]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, turn = line.partition("\t")
                out.setdefault(key, []).append(int(turn))
        return out


@dataclass(frozen=True)
class Workload:
    """One workload at one size: ``kind`` with ``size`` (K or N turns) and ``payload`` B."""

    kind: str
    size: int
    payload: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown workload {self.kind!r}; known: {', '.join(KINDS)}")
        if self.size < 1 or self.payload < 1:
            raise ValueError("workload size and payload must be >= 1")

    @classmethod
    def parse(cls, spec: str) -> Workload:
        kind, size, payload_bytes = spec.split(":")
        return cls(kind, int(size), int(payload_bytes))

    @property
    def spec(self) -> str:
        return f"{self.kind}:{self.size}:{self.payload}"

    @property
    def label(self) -> str:
        k = "N" if self.kind == "agent" else "K"
        return f"{self.kind} {k}={self.size} B={self.payload}"

    @property
    def supersteps(self) -> int:
        return 2 * self.size if self.kind == "agent" else self.size

    @property
    def width(self) -> int:
        """The most tasks in one superstep."""
        return WIDTH if self.kind == "fanout4" else 1

    @property
    def tasks(self) -> int:
        return self.supersteps * self.width

    @property
    def logical_bytes(self) -> int:
        """Payload bytes the nodes produce: what a perfect store would keep."""
        if self.kind == "agent":
            return self.size * self.payload
        return self.tasks * self.payload

    def initial(self) -> dict[str, Any]:
        if self.kind == "agent":
            return {"messages": [], "turn": 0}
        return {"items": [], "count": 0}

    def expected(self) -> dict[str, Any]:
        """The final state, computed without running the flow."""
        if self.kind == "agent":
            messages = [m for t in range(self.size) for m in _turn_messages(t, self.payload)]
            return {"messages": messages, "turn": self.size}
        return {"items": [payload(i, self.payload) for i in range(self.tasks)],
                "count": self.tasks}

    def flow(self, counters: Counters | None = None) -> Flow:
        """A fresh flow; with ``counters``, nodes and tools log what they do."""
        build = {"linear": _linear, "fanout4": _fanout4, "agent": _agent, "long": _long}
        return build[self.kind](self, counters)


def _tracked(fn: Any, counters: Counters | None) -> Any:
    if counters is None:
        return fn

    def node(state: Any, ctx: Any) -> Any:
        counters.node("S", ctx.task_id)
        out = fn(state, ctx)
        counters.node("E", ctx.task_id)
        return out

    node.__name__ = fn.__name__
    return node


def _appender(i: int, size: int) -> Any:
    item = payload(i, size)

    def step(state: Any, ctx: Any) -> dict[str, Any]:
        return {"items": [item], "count": 1}

    return step


def _linear(w: Workload, counters: Counters | None) -> Flow:
    flow = Flow("bench-linear")
    for i in range(w.size):
        flow.node(_tracked(_appender(i, w.payload), counters), name=f"n{i:04d}", start=i == 0,
                  after=() if i == 0 else (f"n{i - 1:04d}",))
    flow.reducer("items", append)
    flow.reducer("count", add)
    return flow


def _fanout4(w: Workload, counters: Counters | None) -> Flow:
    flow = Flow("bench-fanout4")
    for layer in range(w.size):
        prev = tuple(f"f{layer - 1:04d}_{j}" for j in range(WIDTH)) if layer else ()
        for j in range(WIDTH):
            flow.node(_tracked(_appender(layer * WIDTH + j, w.payload), counters),
                      name=f"f{layer:04d}_{j}", start=layer == 0, after=prev)
    flow.reducer("items", append)
    flow.reducer("count", add)
    return flow


def _long(w: Workload, counters: Counters | None) -> Flow:
    flow = Flow("bench-long")
    size, k = w.payload, w.size

    def step(state: Any, ctx: Any) -> dict[str, Any]:
        return {"items": [payload(state["count"], size)], "count": 1}

    flow.node(_tracked(step, counters), name="step", start=True)
    flow.route("step", lambda state: END if state["count"] >= k else "step")
    flow.reducer("items", append)
    flow.reducer("count", add)
    return flow


def _turn_messages(turn: int, size: int) -> list[dict[str, Any]]:
    half = size // 2
    return [{"role": "assistant", "turn": turn, "content": payload(2 * turn, half)},
            {"role": "tool", "turn": turn, "result": {"ok": turn},
             "content": payload(2 * turn + 1, size - half)}]


def send_tool(counters: Counters | None) -> Tool[..., Any]:
    """A non-idempotent tool with an external effect (a line in ``effects.log``)."""

    def send(turn: int, idempotency_key: str = "") -> dict[str, int]:
        if counters is not None:
            counters.effect(idempotency_key, turn)
        return {"ok": turn}

    return Tool(send, name="send")


def _agent(w: Workload, counters: Counters | None) -> Flow:
    flow = Flow("bench-agent")
    size, turns = w.payload, w.size
    tool = send_tool(counters)

    def llm(state: Any, ctx: Any) -> dict[str, Any]:
        return {"messages": [_turn_messages(state["turn"], size)[0]]}

    def act(state: Any, ctx: Any) -> dict[str, Any]:
        turn = state["turn"]
        result = ctx.tool(tool, turn)
        message = dict(_turn_messages(turn, size)[1], result=result)
        return {"messages": [message], "turn": turn + 1}

    flow.node(_tracked(llm, counters), name="llm", start=True)
    flow.node(_tracked(act, counters), name="tool", after=("llm",))
    flow.route("tool", lambda state: END if state["turn"] >= turns else "llm")
    flow.reducer("messages", append)
    return flow


def for_run(quick: bool) -> dict[str, list[Workload]]:
    """The workloads of a granularity run, by kind."""
    if quick:
        return {"linear": [Workload("linear", 10, b) for b in (100, 1000, 10000)],
                "fanout4": [Workload("fanout4", 10, b) for b in (100, 1000, 10000)],
                "agent": [Workload("agent", 5, 1000)],
                "long": [Workload("long", k, 100) for k in (10, 100)]}
    return {"linear": [Workload("linear", 50, b) for b in (100, 1000, 10000)],
            "fanout4": [Workload("fanout4", 50, b) for b in (100, 1000, 10000)],
            "agent": [Workload("agent", 25, 1000)],
            "long": [Workload("long", k, 100) for k in (10, 100, 1000)]}


def for_crash(quick: bool) -> list[Workload]:
    """The workloads crashed at random moments, per policy."""
    if quick:
        return [Workload("agent", 5, 1000)]
    return [Workload("linear", 50, 1000), Workload("fanout4", 50, 1000),
            Workload("agent", 25, 1000)]
