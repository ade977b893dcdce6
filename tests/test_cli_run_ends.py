"""``bide run`` prints a run's events while another thread runs it: when that thread
ends without the run finishing or pausing (``start`` raised; the run is left RUNNING),
the command ends too, with what the thread raised, instead of following forever."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import bide
from bide import cli

DEADLINE = 15.0


def test_bide_run_ends_when_its_run_s_thread_ends_with_the_run_left_running(
        tmp_path: Path, capsys):
    flow = bide.Flow("f")

    @flow.node(start=True)
    def first(state, ctx):
        return {"x": 1}

    @flow.node(after="first")
    def leaves(state, ctx):
        time.sleep(0.3)  # the follow is under way (not only its last read after the end)
        raise SystemExit(3)  # start raises it; nothing marks the run stopped

    outcome: dict[str, BaseException] = {}
    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(flow)

        def run() -> None:
            try:
                cli._run_followed(eng, "f", {}, "r1", False)
            except BaseException as exc:  # noqa: BLE001 - what the test checks
                outcome["error"] = exc

        caller = threading.Thread(target=run, name="test-bide-run", daemon=True)
        caller.start()
        caller.join(DEADLINE)
        assert not caller.is_alive(), "bide run still follows a run nobody runs"
        assert isinstance(outcome.get("error"), SystemExit)
        assert eng.get("r1").status == bide.Status.RUNNING
    printed = capsys.readouterr().out
    assert "first" in printed  # the events committed before the thread ended were printed


def test_bide_run_follows_a_run_with_one_follow_however_long_it_takes(tmp_path: Path, capsys,
                                                                     monkeypatch):
    """One follow for the whole run, and one last read: each follow is a change feed, and
    on PostgreSQL a connection of its own (a follow taken up again every second opened one
    a second, and one refused connection ended the command mid-run)."""
    monkeypatch.setattr(cli, "RUNNER_CHECK", 0.2)
    flow = bide.Flow("f")

    @flow.node(start=True)
    def slow(state, ctx):
        time.sleep(1.5)  # several RUNNER_CHECKs
        return {"x": 1}

    with bide.open(tmp_path / "home", durability="fast") as eng:
        eng.register(flow)
        opened: list[str] = []
        real = eng.store.change_feed
        monkeypatch.setattr(eng.store, "change_feed",
                            lambda run_id: opened.append(run_id) or real(run_id))
        run, stopped = cli._run_followed(eng, "f", {}, "r1", False)
    assert run.status == bide.Status.DONE and not stopped
    assert len(opened) <= 2, f"{len(opened)} follows for one run"
    printed = capsys.readouterr().out.splitlines()
    seqs = [int(line.split()[0]) for line in printed]
    assert seqs == sorted(set(seqs)), printed  # every event once, in order
    assert any(" DONE " in line for line in printed), printed
