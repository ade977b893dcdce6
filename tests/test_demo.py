"""`bide demo` — the first thing a new user runs — works, can be run again, and says what the
records say."""

import subprocess
import sys
from pathlib import Path

import bide
from bide.bench.demo import NODES_AND_TOOLS, resumed_node_story


def demo(home: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bide.cli", "demo", "--home", str(home)],
                          capture_output=True, text=True, timeout=180, cwd=cwd)


def test_demo_exits_zero_and_nothing_ran_twice(tmp_path):
    out = demo(tmp_path / "home", tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "outcome unknown → reconciled" in out.stdout
    assert "nothing ran twice" in out.stdout
    assert "run status: DONE" in out.stdout


def test_demo_three_times_in_one_directory_and_its_story_matches_the_log(tmp_path):
    home = tmp_path / ".bide"
    for run_id in ("r-42", "r-42-2", "r-42-3"):
        out = demo(home, tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"run: {run_id}\n" in out.stdout
        assert "nothing ran twice" in out.stdout and "Traceback" not in out.stderr
        assert "replayed" not in out.stdout  # the log never says that; it says one of below
        calls = count_lines(home / "demo-effects" / f"{run_id}.log")
        with bide.open(home, create=False) as eng:
            assert eng.get(run_id).status == bide.Status.DONE
            intents = {i["tool"]: i for i in eng.intents(run_id)}
        for node, tool in NODES_AND_TOOLS:
            line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith(node + ":"))
            assert f"{tool} called {calls[tool]}×" in line, line
            attempts = intents[tool]["attempts"]
            assert calls[tool] == attempts  # an idempotent tool: one call per attempt
            again = "called again with the same key " + intents[tool]["idempotency_key"]
            assert (again in line) == (attempts >= 2), (line, intents[tool])
            if "without calling the tool" in line:
                assert attempts == 1 and calls[f"node {node}"] == 2
            if "did not run again" in line:
                assert calls[f"node {node}"] == 1
    assert sorted(p.name for p in (home / "demo-effects").iterdir()) == [
        "r-42-2.log", "r-42-3.log", "r-42.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bide"]  # nothing beside the home


def count_lines(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        name = line if line.startswith("node ") else line.split()[0]
        counts[name] = counts.get(name, 0) + 1
    return counts


def row(status: str, attempts: int = 1) -> dict:
    return {"status": status, "attempts": attempts, "idempotency_key": "k-1"}


def test_the_story_of_each_resumed_node_follows_its_intent():
    # Which case a demo hits depends on where the parallel node was when the worker died,
    # so every case is checked here from the rows the demo reads.
    world = {"node prepare_patch": 2, "draft_patch": 2}
    told = resumed_node_story("prepare_patch", "draft_patch", False, row("prepared"),
                              row("completed", 2), world)
    assert "prepared with no outcome" in told and "called again with the same key k-1" in told
    assert "(attempt 2)" in told and "draft_patch called 2×" in told
    world = {"node prepare_patch": 2, "draft_patch": 1}
    told = resumed_node_story("prepare_patch", "draft_patch", False, row("completed"),
                              row("completed"), world)
    assert "returned without calling the tool" in told and "called again" not in told
    told = resumed_node_story("prepare_patch", "draft_patch", False, None, row("completed"),
                              world)
    assert "had not been called before the kill" in told
    told = resumed_node_story("prepare_patch", "draft_patch", True, row("completed"),
                              row("completed"), {"node prepare_patch": 1, "draft_patch": 1})
    assert "did not run again" in told
