"""LangGraph killed mid-run: does a resumed thread make a tool's effect again?

The graph is ``kit/langgraph_loop``'s: K calls of a non-idempotent tool, one per step,
``durability="sync"``. Each call's effect is one line appended to a file outside the
store (``<i>\\t<idempotency key>``), so counting lines says what really happened. A
worker process runs the thread and is SIGKILLed at a seeded random moment of its run
(the same fractions of the run for every row); a new process resumes the thread from
its last checkpoint. Rows:

- ``sqlite``: LangGraph + SqliteSaver, the tool called as a plain function. A kill
  between a call's effect and the commit of its step's writes makes the resumed
  thread run the step, and the call, again.
- ``bide``: LangGraph + BideSaver (durable), the tool wrapped by ``durable_tool``.
  A call with a recorded outcome is replayed; one killed between its intent and its
  outcome is *outcome unknown* and the thread stops on it with a question
  (``Status.NEEDS_RECONCILIATION``), which counts as asking a person, not as a
  duplicate. The bench answers as a person would: it looks the idempotency key up
  in the effects file (there: ``mark_done`` with the call's result; not there: ``retry``).
- ``bide-reconcile``: the same with a reconciler that looks the key up itself: an
  unknown outcome is settled without asking.

Reported per row: kills, kills that landed mid-run, effects, effects duplicated (and
in how many kills), questions asked (and in how many kills), and whether every
resumed thread ended with the right state.
"""

from __future__ import annotations

import json
import random
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..engine.base.vocabulary import Status
from .kit.crashkit import count_effects, record_effect, start_worker
from .kit.langgraph_loop import build, config, finished, initial
from .tool_calls import arg, send

ROWS = {"sqlite": "LangGraph + SqliteSaver", "bide": "LangGraph + bide tools",
        "bide-reconcile": "LangGraph + bide tools + reconciler"}
THREAD = "t-crash"
READY_TIMEOUT = 60.0
PROCESS_TIMEOUT = 180.0
MAX_QUESTIONS = 10  # a resumed thread asks once per kill; more is a bug, not a loop to wait on


# -- in the worker processes -----------------------------------------------------------------
def effects_of(path: str | Path) -> list[tuple[int, str]]:
    """The effects recorded so far: ``(i, idempotency key)``, one per line of the file."""
    lines = count_effects(path)
    out = []
    for line, n in lines.items():
        i, _, key = line.partition("\t")
        out.extend([(int(i), key)] * n)
    return out


def tool_call(row: str, effects: str) -> Callable[[int], str]:
    """The step's call of the tool, as ``row`` makes it."""
    if row == "sqlite":
        def plain(i: int) -> str:
            record_effect(effects, f"{i}\t-")
            return send(i, arg(i))

        return plain
    from ..engine.langgraph.tools import current_call, durable_tool

    def charge(i: int, text: str) -> str:  # non-idempotent: one line per effect
        record_effect(effects, f"{i}\t{current_call().idempotency_key}")
        return send(i, text)

    reconcile = _reconciler(effects) if row == "bide-reconcile" else None
    wrapped = durable_tool(charge, name="charge", reconcile=reconcile)
    return lambda i: wrapped(i, arg(i))


def _reconciler(effects: str) -> Callable[..., Any]:
    from ..engine.run.tools import Outcome

    def reconcile(key: str, i: int, text: str) -> Outcome:
        """Ask the tool's own records (the effects file) whether the call happened."""
        if any(k == key for _, k in effects_of(effects)):
            return Outcome.done(send(i, text))
        return Outcome.not_done()

    return reconcile


def answer(question: dict[str, Any], effects: str) -> dict[str, Any]:
    """What a person decides about an unknown outcome, having looked in the tool's records."""
    key = question["payload"]["idempotency_key"]
    done = [i for i, k in effects_of(effects) if k == key]
    reply: dict[str, Any] = {"approval_id": question["approval_id"], "by": "bench"}
    if done:
        return {**reply, "decision": "mark_done", "result": send(done[0], "")}
    return {**reply, "decision": "retry"}


@contextmanager
def _saver(row: str, home: Path) -> Iterator[Any]:
    if row == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        home.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(home / "lg.sqlite", check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
        return
    from ..engine.langgraph.saver import BideSaver

    with BideSaver.from_home(home, durability="durable") as saver:
        yield saver


def _worker(row: str, home: Path, effects: str, k: int) -> None:
    with _saver(row, home) as saver:
        graph = build(k, tool_call(row, effects)).compile(checkpointer=saver)
        print("ready", flush=True)
        t0 = time.perf_counter()
        out = graph.invoke(initial(), config(THREAD, k), durability="sync")
        seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "state_ok": finished(out, k, send(k - 1, ""))}),
          flush=True)


def _resume(row: str, home: Path, effects: str, k: int) -> None:
    from langgraph.types import Command

    asked, stopped = 0, []
    with _saver(row, home) as saver:
        graph = build(k, tool_call(row, effects)).compile(checkpointer=saver)
        cfg = config(THREAD, k)
        # from the last checkpoint and its pending writes (a finished thread runs nothing;
        # its ``next`` may be empty mid-run too: a step whose writes committed before
        # the kill has no task left in its checkpoint); from the input if none was made
        first = graph.get_state(cfg).metadata is None
        out = graph.invoke(initial() if first else None, cfg, durability="sync")
        while "__interrupt__" in out and asked < MAX_QUESTIONS:
            asked += 1
            stopped.append(_status(saver))
            reply = answer(out["__interrupt__"][0].value, effects)
            out = graph.invoke(Command(resume=reply), cfg, durability="sync")
    print(json.dumps({"asked": asked, "stopped": stopped,
                      "state_ok": finished(out, k, send(k - 1, ""))}), flush=True)


def _status(saver: Any) -> str | None:
    """The thread's status in bide's store (a question stops it: NEEDS_RECONCILIATION)."""
    with saver.threads.store.reader() as r:
        head = r.head(THREAD)
    return None if head is None else str(head.status)


def main(argv: list[str]) -> None:
    role, row, home, effects, k = argv
    {"worker": _worker, "resume": _resume}[role](row, Path(home), effects, int(k))


# -- the parent ----------------------------------------------------------------------------
def _spawn(role: str, row: str, where: Path, k: int, *, fault: str | None = None,
           env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return start_worker("-m", "bide.bench.langgraph_crash", role, row, str(where / "home"),
                        str(where / "effects.log"), str(k), fault=fault, env=env)


def _finish(proc: subprocess.Popen[str], what: str) -> list[str]:
    try:
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{what} ran for more than {PROCESS_TIMEOUT:.0f} s") from None
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{what} exited {proc.returncode}:\n{err[-2000:]}")
    return out.splitlines()


def _wait_ready(proc: subprocess.Popen[str], what: str) -> None:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(READY_TIMEOUT):
            proc.kill()
            _finish(proc, what)
            raise RuntimeError(f"{what} did not start within {READY_TIMEOUT:.0f} s")
    line = proc.stdout.readline()
    if line.strip() != "ready":
        _finish(proc, what)
        raise RuntimeError(f"{what} did not start: {line!r}")


def calibrate(row: str, root: Path, k: int) -> float:
    """Seconds the thread takes in a worker process, from ``ready`` to its end."""
    where = root / "calibrate"
    report = json.loads(_finish(_spawn("worker", row, where, k), f"{row} calibration")[-1])
    if not report["state_ok"]:
        raise AssertionError(f"the {row} calibration run ended with a wrong state")
    return float(report["seconds"])


def kill_once(row: str, where: Path, k: int, delay: float | None, *, fault: str | None = None,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start a worker, SIGKILL it ``delay`` s into its run, resume in a new process; count.

    ``delay=None``: the worker is left to die by itself at ``fault`` (``BIDE_FAULT``'s
    ``point:occurrence:kill``, armed in the worker alone); ``env`` goes to both processes.
    """
    proc = _spawn("worker", row, where, k, fault=fault, env=env)
    _wait_ready(proc, f"{row} worker")
    if delay is not None:
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    _finish(proc, f"{row} worker")
    killed = proc.returncode == -signal.SIGKILL
    lines = _finish(_spawn("resume", row, where, k, env=env), f"{row} resumer")
    if not lines:
        raise RuntimeError(f"the {row} resumer printed nothing")
    report = json.loads(lines[-1])
    per_call: dict[int, int] = {}
    for i, _ in effects_of(where / "effects.log"):
        per_call[i] = per_call.get(i, 0) + 1
    return {"delay": delay, "killed": killed, "effects": sum(per_call.values()),
            "duplicated": sum(n - 1 for n in per_call.values()),
            "missing": sum(1 for i in range(k) if i not in per_call),
            "asked": int(report["asked"]), "stopped": report["stopped"],
            "state_ok": bool(report["state_ok"])}


def summarize(row: str, k: int, span: float, kills: list[dict[str, Any]]) -> dict[str, Any]:
    return {"row": row, "system": ROWS[row], "calls": k, "run_seconds": span,
            "kills": len(kills), "kills_mid_run": sum(r["killed"] for r in kills),
            "effects": sum(r["effects"] for r in kills),
            "duplicated": sum(r["duplicated"] for r in kills),
            "kills_duplicating": sum(r["duplicated"] > 0 for r in kills),
            "missing": sum(r["missing"] for r in kills),
            "asked": sum(r["asked"] for r in kills),
            "kills_asking": sum(r["asked"] > 0 for r in kills),
            "stopped_needing_reconciliation": sum(
                s == Status.NEEDS_RECONCILIATION for r in kills for s in r["stopped"]),
            "state_ok": all(r["state_ok"] for r in kills), "kills_detail": kills}


def run(root: Path, *, k: int, kills: int, seed: int, jobs: int = 2,
        rows: tuple[str, ...] = tuple(ROWS), say: Callable[[str], None] = lambda s: None
        ) -> list[dict[str, Any]]:
    """Every row killed at the same ``kills`` fractions of its run (seeded); one summary each."""
    rng = random.Random(f"{seed}:langgraph-crash")
    fractions = [rng.random() for _ in range(kills)]
    spans = {}
    for row in rows:
        spans[row] = calibrate(row, root / row, k)
        say(f"{ROWS[row]}: a run of {k} calls takes {spans[row]:.2f} s in a worker")
    jobs_list = [(row, j) for j in range(kills) for row in rows]

    def one(job: tuple[str, int]) -> dict[str, Any]:
        row, j = job
        return kill_once(row, root / row / f"k{j}", k, fractions[j] * spans[row])

    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="lg-crash") as pool:
        done = list(pool.map(one, jobs_list))
    by_row: dict[str, list[dict[str, Any]]] = {row: [] for row in rows}
    for (row, _), result in zip(jobs_list, done, strict=True):
        by_row[row].append(result)
    return [summarize(row, k, spans[row], by_row[row]) for row in rows]


if __name__ == "__main__":
    main(sys.argv[1:])
