"""``bide bench langgraph-tools``: what ``durable_tool`` costs a call, and what a kill leaves.

Cost: K sequential calls of ``tool_calls.send`` (100 B of arguments, 100 B of
result), one per step (``kit/langgraph_loop``'s graph, ``durability="sync"``), in
one process, every case measured once per round and the rounds back to back (the
case order rotated each round), so a shared disk's mood hits all alike:

- ``lg-plain``: LangGraph + BideSaver (durable), the node calls the plain function;
- ``lg-durable``: the same graph, the function wrapped by ``durable_tool``;
- ``lg-lc`` / ``lg-lc-durable``: the same with a LangChain tool (``StructuredTool``)
  invoked in the node, bare and wrapped;
- ``bide``: a bide flow step calling it through ``ctx.tool`` (``tool_calls.bide_flow``);
- ``lg-sqlite``: LangGraph + SqliteSaver (``synchronous=FULL``), the plain function.

Per case: the median ms per call over the rounds; store commits per call (counted in
one more run, outside the timed ones: bide's ``on_commit`` observer, SQLite's
``COMMIT`` statements); and, when ``strace`` is installed, the flushes per call
(``fsync``/``fdatasync``/``msync`` calls of a child process running K and then 2K
calls: the difference over K, so opening the store counts for nothing). Ratios are
taken per round and their median given with the spread. The crash rows are
``langgraph_crash``'s.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import langgraph_crash
from .kit.langgraph_loop import Call, build, config, finished, initial
from .tool_calls import ARG, RESULT, arg, bide_flow, send

CASES = {
    "lg-plain": "LangGraph + BideSaver, plain function",
    "lg-durable": "LangGraph + BideSaver, durable_tool(function)",
    "lg-lc": "LangGraph + BideSaver, LangChain tool",
    "lg-lc-durable": "LangGraph + BideSaver, durable_tool(LangChain tool)",
    "bide": "bide flow step, ctx.tool",
    "lg-sqlite": "LangGraph + SqliteSaver, plain function",
}
RATIOS = (  # (name, numerator, denominator, what it says)
    ("b/a", "lg-durable", "lg-plain", "durable_tool against the same call unwrapped"),
    ("b/c", "lg-durable", "bide", "durable_tool against a bide flow's ctx.tool"),
    ("lc b/a", "lg-lc-durable", "lg-lc", "durable_tool(LangChain tool) against it unwrapped"),
    ("b/sqlite", "lg-durable", "lg-sqlite", "durable_tool against LangGraph + SqliteSaver"),
)
QUICK = {"k": 20, "rounds": 3, "crash_k": 20, "kills": 2}
FULL = {"k": 200, "rounds": 9, "crash_k": 100, "kills": 20}
SYNC_CALLS = ("fsync", "fdatasync", "msync", "sync_file_range", "syncfs")
STRACE_TIMEOUT = 300


def skip() -> str | None:
    """None if this bench can run, else why not."""
    for module in ("langgraph.graph", "langgraph.checkpoint.sqlite", "langchain_core.tools"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return (f"{exc.name} is not installed: pip install 'bide[langgraph,compare]' "
                    "(LangGraph and langgraph-checkpoint-sqlite)")
    return None


# -- one case: a context manager yielding a Runner ------------------------------------------
@dataclass(frozen=True)
class Runner:
    """A case, open and warmed up: run K calls on a new thread (or run) of the given name."""

    once: Callable[[str], float]  # thread -> seconds
    commits: Callable[[str], int]  # thread -> store commits of that run


def calls(form: str) -> Call:
    """The step's call of ``send`` in the given form."""
    if form == "plain":
        return lambda i: send(i, arg(i))
    from ..engine.langgraph.tools import durable_tool

    if form == "durable":
        wrapped = durable_tool(send, name="send")
        return lambda i: wrapped(i, arg(i))
    from langchain_core.tools import StructuredTool

    tool: Any = StructuredTool.from_function(send, name="send")
    if form == "lc-durable":
        tool = durable_tool(tool)
    return lambda i: tool.invoke({"i": i, "text": arg(i)})


def _checked(out: Any, k: int, case: str) -> None:
    if not finished(out, k, send(k - 1, "")):
        raise AssertionError(f"{case} ended with {out!r}")


def _counting(store: Any, once: Callable[[str], float]) -> Callable[[str], int]:
    """``commits`` of a Runner on a bide store: its ``on_commit`` observer, around one run."""
    def commits(name: str) -> int:
        seen: list[Any] = []
        stop = store.on_commit(seen.append)
        try:
            once(name)
        finally:
            stop()
        return sum(1 for e in seen if e.kind == "commit")

    return commits


@contextmanager
def _langgraph_on_bide(case: str, where: Path, k: int) -> Iterator[Runner]:
    from ..engine.langgraph.saver import BideSaver

    form = {"lg-plain": "plain", "lg-durable": "durable", "lg-lc": "lc",
            "lg-lc-durable": "lc-durable"}[case]
    with BideSaver.from_home(where, durability="durable") as saver:
        graph = build(k, calls(form)).compile(checkpointer=saver)

        def once(thread: str) -> float:
            t0 = time.perf_counter()
            out = graph.invoke(initial(), config(thread, k), durability="sync")
            seconds = time.perf_counter() - t0
            _checked(out, k, case)
            return seconds

        once("warmup")
        yield Runner(once, _counting(saver.threads.store, once))


@contextmanager
def _langgraph_on_sqlite(where: Path, k: int) -> Iterator[Runner]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    where.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(where / "lg.sqlite", check_same_thread=False)
    try:
        graph = build(k, calls("plain")).compile(checkpointer=SqliteSaver(conn))

        def once(thread: str) -> float:
            t0 = time.perf_counter()
            out = graph.invoke(initial(), config(thread, k), durability="sync")
            seconds = time.perf_counter() - t0
            _checked(out, k, "lg-sqlite")
            return seconds

        def commits(thread: str) -> int:
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            try:
                once(thread)
            finally:
                conn.set_trace_callback(None)
            return sum(1 for statement in seen if statement.strip().upper() == "COMMIT")

        once("warmup")
        yield Runner(once, commits)
    finally:
        conn.close()


@contextmanager
def _bide_flow(where: Path, k: int) -> Iterator[Runner]:
    from ..engine.api.runtime import open as open_home

    with open_home(where, durability="durable") as engine:
        engine.register(bide_flow(k))

        def once(run_id: str) -> float:
            t0 = time.perf_counter()
            run = engine.start("bench-tools", {"count": 0}, run_id=run_id)
            seconds = time.perf_counter() - t0
            _checked(run.state, k, "bide")
            return seconds

        once("warmup")
        yield Runner(once, _counting(engine.store, once))


def open_case(case: str, where: Path, k: int) -> Any:
    """The case's context manager (a ``Runner`` when entered)."""
    if case == "bide":
        return _bide_flow(where, k)
    if case == "lg-sqlite":
        return _langgraph_on_sqlite(where, k)
    return _langgraph_on_bide(case, where, k)


# -- the cost section -------------------------------------------------------------------
def cost(root: Path, *, k: int, rounds: int, cases: tuple[str, ...] = tuple(CASES),
         flushes: bool = True) -> dict[str, Any]:
    """Every case once a round, ``rounds`` rounds back to back; rows and per-round ratios
    (and the flushes per call unless ``flushes`` is false)."""
    times: dict[str, list[float]] = {case: [] for case in cases}
    with ExitStack() as stack:
        runners = {case: stack.enter_context(open_case(case, root / case, k))
                   for case in cases}
        for n in range(rounds):
            turn = n % len(cases)
            for case in cases[turn:] + cases[:turn]:
                times[case].append(runners[case].once(f"r{n}"))
        commits = {case: runners[case].commits("counted") for case in cases}
    synced = flushes_per_call(root / "flushes", k, cases) if flushes else {}
    rows = [{"case": case, "system": CASES[case], "calls": k,
             "ms_per_call": 1000 * statistics.median(times[case]) / k,
             "ms_per_call_rounds": [1000 * t / k for t in times[case]],
             "commits_per_call": commits[case] / k, "flushes_per_call": synced.get(case)}
            for case in cases]
    ratios = []
    for name, top, bottom, about in RATIOS:
        if top in times and bottom in times:
            per_round = [a / b for a, b in zip(times[top], times[bottom], strict=True)]
            ratios.append({"ratio": name, "of": top, "to": bottom, "about": about,
                           "median": statistics.median(per_round), "min": min(per_round),
                           "max": max(per_round), "rounds": per_round})
    return {"calls": k, "rounds": rounds, "arg_bytes": ARG, "result_bytes": RESULT,
            "rows": rows, "ratios": ratios}


def flushes_per_call(root: Path, k: int, cases: tuple[str, ...]) -> dict[str, float]:
    """Flush system calls per call of each case, by ``strace -f -c`` of a child running K
    calls and one running 2K (each after a warm-up of as many): (f(2K) - f(K)) / 2K.
    Empty when ``strace`` is not installed or cannot trace here."""
    if shutil.which("strace") is None:
        return {}
    out = {}
    for case in cases:
        counts = [_traced_flushes(root / f"{case}-{n}", case, n) for n in (k, 2 * k)]
        if None in counts:
            return {}
        assert counts[0] is not None and counts[1] is not None
        out[case] = (counts[1] - counts[0]) / (2 * k)
    return out


_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def _traced_flushes(where: Path, case: str, k: int) -> int | None:
    where.mkdir(parents=True, exist_ok=True)
    summary = where / "strace.txt"
    cmd = ["strace", "-f", "-c", "-o", str(summary), "-e", "trace=" + ",".join(SYNC_CALLS),
           sys.executable, "-m", "bide.bench.langgraph_tools", "flushes", case, str(k),
           str(where / "home")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=STRACE_TIMEOUT)
    if done.returncode != 0 or not summary.exists():
        return None  # no ptrace here (a container without it): said as "not measured"
    return sync_calls(summary.read_text())


def sync_calls(summary: str) -> int:
    """The flush calls counted in an ``strace -c`` summary."""
    total = 0
    for line in summary.splitlines():
        match = _STRACE_ROW.match(line)
        if match and match.group(2) in SYNC_CALLS:
            total += int(match.group(1))
    return total


def _flushes_child(case: str, k: int, home: str) -> None:
    """Under strace: open the case (its warm-up run included), run K calls once."""
    with open_case(case, Path(home), k) as runner:
        runner.once("traced")


# -- the whole bench ---------------------------------------------------------------------
def run(*, quick: bool = False, home: Path | None = None, seed: int = 0,
        kills: int | None = None, jobs: int = 2, say: Callable[[str], None] = lambda s: None
        ) -> dict[str, Any]:
    """The cost rows, then the crash rows; with what machine measured them."""
    size = QUICK if quick else FULL
    started = time.perf_counter()
    out: dict[str, Any] = {"meta": _meta(quick, seed)}
    with tempfile.TemporaryDirectory(prefix="bide-bench-lg-tools-", dir=home) as d:
        root = Path(d)
        say(f"cost: {size['rounds']} rounds of {size['k']} calls per case")
        out["cost"] = cost(root / "cost", k=size["k"], rounds=size["rounds"])
        n = kills if kills is not None else size["kills"]
        say(f"crash: {n} kills per row, {size['crash_k']} calls a run")
        out["crash"] = langgraph_crash.run(root / "crash", k=size["crash_k"], kills=n,
                                           seed=seed, jobs=jobs, say=say)
    out["meta"]["seconds"] = time.perf_counter() - started
    out["meta"]["loadavg_end"] = os.getloadavg()
    return out


def _meta(quick: bool, seed: int) -> dict[str, Any]:
    from importlib.metadata import version

    from .. import __version__
    from .suite import _commit

    return {"quick": quick, "seed": seed, "bide": __version__, "commit": _commit(),
            "python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "langgraph": version("langgraph"),
            "langgraph_checkpoint_sqlite": version("langgraph-checkpoint-sqlite"),
            "langchain_core": version("langchain-core")}


def render(out: dict[str, Any]) -> str:
    c = out["cost"]
    lines = [f"LangGraph tools: {c['calls']} sequential calls, {c['arg_bytes']} B args, "
             f"{c['result_bytes']} B result, median of {c['rounds']} rounds back to back",
             f"{'case':<52}{'ms/call':>9}{'commits/call':>14}{'flushes/call':>14}"]
    for r in c["rows"]:
        flushes = "-" if r["flushes_per_call"] is None else f"{r['flushes_per_call']:.2f}"
        lines.append(f"{r['system']:<52}{r['ms_per_call']:>9.3f}{r['commits_per_call']:>14.2f}"
                     f"{flushes:>14}")
    lines.append("ratios (per round; median, min-max):")
    lines.extend(f"  {r['ratio']:<9}{r['median']:>6.2f}x  ({r['min']:.2f}-{r['max']:.2f})  "
                 f"{r['about']}" for r in c["ratios"])
    crash = out["crash"]
    if crash:
        lines += ["", f"Killed mid-run (SIGKILL at seeded random moments, resumed in a new "
                      f"process; {crash[0]['calls']} calls a run)",
                  f"{'row':<38}{'kills':>6}{'mid-run':>8}{'effects':>8}{'duplicated':>11}"
                  f"{'(kills)':>8}{'asked':>6}{'(kills)':>8}{'state ok':>9}"]
        for r in crash:
            lines.append(f"{r['system']:<38}{r['kills']:>6}{r['kills_mid_run']:>8}"
                         f"{r['effects']:>8}{r['duplicated']:>11}{r['kills_duplicating']:>8}"
                         f"{r['asked']:>6}{r['kills_asking']:>8}"
                         f"{'yes' if r['state_ok'] else 'NO':>9}")
    return "\n".join(lines)


if __name__ == "__main__":  # the traced child of flushes_per_call
    _, role, case_arg, k_arg, home_arg = sys.argv
    if role != "flushes":
        raise SystemExit(f"unknown role {role!r}")
    _flushes_child(case_arg, int(k_arg), home_arg)
