"""Kill a real worker process at commit boundaries, resume in another, count executions."""

from __future__ import annotations

import json
from collections import Counter

import bide
import pytest
from bide.engine.upkeep import maintenance
from conftest import count_lines, run_app

# Every commit boundary of chain_app's run (a fault-free run hits: 9 commits = run created,
# 2 pending writes (the third parallel task's output rides in the checkpoint), 6 checkpoints).
FAULTS = (
    ["after_pending_write:1", "after_pending_write:2"]
    + [f"after_checkpoint:{k}" for k in range(1, 7)]
    + [f"before_commit:{k}" for k in range(1, 10)]
    + [f"after_commit:{k}" for k in (1, 2, 4, 6, 9)]
    + ["after_run_created:1"]
)
EXPECTED_TRAIL = ["a", "b", "c", "join", "loop", "loop", "loop", "loop"]


def written_tasks(home) -> set[str] | None:
    """Tasks whose output is in the store (they must never run again); None: no run."""
    with bide.open(home, durability="fast") as eng:
        with eng.store.reader() as r:
            if r.head("r1") is None:
                return None
            done = set()
            for seq, rtype in r.run_entries("r1"):
                if rtype == "checkpoint":
                    cp = r.record(seq)
                    done |= {f"{n}@{cp.superstep - 1}" for n in cp.committed if cp.version}
            for seq, rtype in r.run_entries("r1"):
                if rtype == "pending_write":
                    w = r.record(seq)
                    done.add(f"{w.node}@{w.superstep}")
    return done


def finish(home, counter, durability, action="resume", env=None):
    out = run_app("chain_app.py", str(home), str(counter), action, "r1", durability, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("durability", ["durable", "fast"])
@pytest.mark.parametrize("mode", ["kill", "exit"])
@pytest.mark.parametrize("fault", FAULTS)
def test_crash_then_resume_in_a_new_process(tmp_path, fault, mode, durability):
    crash_then_resume(tmp_path / "home", tmp_path / "effects.log", fault, mode, durability)


def crash_then_resume(home, counter, fault: str, mode: str, durability: str,
                      env: dict | None = None) -> None:
    """Kill chain_app at ``fault``, resume it in a new process, check every count
    (also run on PostgreSQL by test_pg_crash.py, with a URL as ``home``)."""
    crashed = run_app("chain_app.py", str(home), str(counter), "start", "r1", durability,
                      fault=f"{fault}:{mode}", env=env)
    assert crashed.returncode in (-9, 137), crashed.stderr  # it really died there
    committed_before = written_tasks(home)
    before = count_lines(counter)
    if committed_before is None:  # died before the run was created: the caller starts again
        assert before == {}
        result = finish(home, counter, durability, action="start", env=env)
        committed_before = set()
    else:
        with bide.open(home, durability="fast") as eng:
            finished = eng.get("r1").status == "DONE"  # the crash came after the last commit
        result = finish(home, counter, durability, action="get" if finished else "resume",
                        env=env)
    after = count_lines(counter)

    assert result["status"] == "DONE"
    assert result["state"]["trail"] == EXPECTED_TRAIL
    assert result["state"]["n"] == 4
    for task in committed_before:  # finished before the kill: ran exactly once, ever
        assert after[task] == 1, (task, after)
    redone = {t: c for t, c in after.items() if c > 1}
    assert all(c == 2 for c in redone.values()), redone
    assert len(redone) <= 3, redone  # at most the unfinished tasks of one superstep
    assert set(after) == {"a@0", "b@0", "c@0", "join@1", "loop@2", "loop@3", "loop@4",
                          "loop@5"}
    assert sum(before.values()) <= sum(after.values())


# With a bound no sibling misses, the fan-out's three outputs are held and ride in its
# checkpoint: 7 commits (run created, 6 checkpoints), no pending write.
HELD = {"CHAIN_SIBLING_BOUND": "60"}
HELD_FAULTS = ([f"sibling_output_held:{k}" for k in (1, 2, 3)]
               + ["before_commit:2", "after_commit:2", "after_checkpoint:1", "after_checkpoint:2"])


@pytest.mark.parametrize("mode", ["kill", "exit"])
@pytest.mark.parametrize("fault", HELD_FAULTS)
def test_crash_with_held_sibling_outputs_then_resume(tmp_path, fault, mode):
    """A kill while finished siblings' outputs wait for the checkpoint: they run again
    (at most once more), and every output the checkpoint carried never runs again."""
    crash_then_resume(tmp_path / "home", tmp_path / "effects.log", fault, mode, "durable",
                      env=HELD)


def test_held_sibling_outputs_ride_in_one_checkpoint(tmp_path):
    home, counter = tmp_path / "home", tmp_path / "effects.log"
    out = run_app("chain_app.py", str(home), str(counter), "start", "r1", "durable", env=HELD)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["state"]["trail"] == EXPECTED_TRAIL
    with bide.open(home, durability="fast") as eng:
        with eng.store.reader() as r:
            kinds = Counter(rtype for _, rtype in r.run_entries("r1"))
            fan_out = next(r.record(seq) for seq, rtype in r.run_entries("r1")
                           if rtype == "checkpoint" and r.record(seq).superstep == 1)
        assert kinds["pending_write"] == 0, kinds
        assert fan_out.writes == [-1] and len(fan_out.deferred) == 6  # 3 outputs, 2 ops each
        assert maintenance.doctor(eng.store).ok


def test_fault_free_run_is_the_reference(tmp_path):
    home, counter = tmp_path / "home", tmp_path / "effects.log"
    out = run_app("chain_app.py", str(home), str(counter), "start", "r1")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "DONE" and result["state"]["trail"] == EXPECTED_TRAIL
    assert Counter(count_lines(counter).values()) == Counter({1: 8})


@pytest.mark.parametrize("policy", [{"checkpoint_every": "exit"}, {"checkpoint_every": 3},
                                    {"pending_writes": False}])
def test_other_policies_resume_to_the_same_state(tmp_path, policy):
    home, counter = tmp_path / "home", tmp_path / "effects.log"
    crashed = run_app("chain_app.py", str(home), str(counter), "start", "r1", "fast",
                      json.dumps(policy), fault="after_commit:5:kill")
    assert crashed.returncode == -9
    result = finish(home, counter, "fast")
    assert result["status"] == "DONE" and result["state"]["trail"] == EXPECTED_TRAIL


@pytest.mark.parametrize("second", ["after_lease_acquired:1", "before_commit:3",
                                    "after_checkpoint:1"])
def test_crash_during_resume_then_resume_again(tmp_path, second):
    home, counter = tmp_path / "home", tmp_path / "effects.log"
    first = run_app("chain_app.py", str(home), str(counter), "start", "r1", "fast",
                    fault="after_pending_write:2:kill")
    assert first.returncode == -9
    again = run_app("chain_app.py", str(home), str(counter), "resume", "r1", "fast",
                    fault=f"{second}:kill")
    assert again.returncode == -9, again.stderr
    result = finish(home, counter, "fast")
    assert result["status"] == "DONE" and result["state"]["trail"] == EXPECTED_TRAIL
    assert max(count_lines(counter).values()) <= 2
    with bide.open(home, durability="fast") as eng:
        assert eng.get("r1").head.attempts >= 1  # each takeover of a dead worker is counted
