"""Decisions on a PostgreSQL home (issue 14, item 3).

`bide approve` records in the database after a decision file's checks; the
signing requirement lives in the database, so every host enforces it; each
host's watcher serves its own inbox (`--inbox`) and writes request files only
where asked (`--requests`). Every test runs against tests/pg_cluster.py's server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bide
import cli_world
import pytest
from bide.cli import main
from bide.engine.base.errors import ApprovalKeyError, DecisionRefused
from bide.engine.human.inbox import FileResult, Inbox, drop_decision
from bide.engine.human.signing import MARKER, SETTING, key_id
from click.testing import CliRunner
from extras import need

need("psycopg")

EXIT_BAD_STATE, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 3
TESTS = Path(__file__).parent
BIDE = shutil.which("bide", path=str(Path(sys.executable).parent)) or "bide"
KEY = b"s3cret-key"


def host(pg_url: str, local: Path, **kw) -> bide.Engine:
    """One host's engine on the shared home: its own local directory."""
    eng = bide.open(pg_url, local=local, durability="fast", **kw)
    eng.register(*cli_world.FLOWS)
    return eng


def waiting_id(eng: bide.Engine, run_id: str) -> str:
    return eng.get(run_id).waiting["approval_id"]


def approve(pg_url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["approve", *args, "--home", pg_url])
    return result.exit_code, result.stderr + result.stdout


def records(eng: bide.Engine, kind: str | None = None) -> int:
    stats = eng.stats()
    if kind is None:
        return stats["total_records"]
    return stats["records"].get(kind, {}).get("count", 0)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def world(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        bide.Engine]:
    """Host A's engine on a home with a run waiting for approval and one in doubt; the
    CLI runs in ``tmp_path/cli`` (its default local directory is ``.bide`` there)."""
    cwd = tmp_path / "cli"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with host(pg_url, tmp_path / "host-a") as eng:
        eng.start("ask", run_id="r-waiting")
        cli_world._with_fault(eng, "after_intent_prepared:1:raise", "pay", "r-recon")
        eng.resume("r-recon")
        yield eng


def test_approve_records_in_the_database_and_the_run_goes_on(world: bide.Engine,
                                                             pg_url: str,
                                                             tmp_path: Path) -> None:
    aid = waiting_id(world, "r-waiting")
    before = files_under(tmp_path)
    code, out = approve(pg_url, aid, "--by", "alice", "--reason", "fine")
    assert code == 0, out
    assert f"approve for {aid} recorded in {pg_url}: a watcher resumes run r-waiting" in out
    assert files_under(tmp_path) == before  # no decision file anywhere: the database has it
    assert not (tmp_path / "cli" / ".bide").exists()  # nor a local directory made for one
    assert world.pending() == [p for p in world.pending() if p["approval_id"] != aid]
    (entry,) = [e for e in world.log("r-waiting") if e["type"] == "approval_decided"]
    assert entry["record"]["by"] == "alice" and entry["record"]["reason"] == "fine"
    assert world.resume("r-waiting").status == bide.Status.DONE


@pytest.mark.parametrize("decision", ["mark_done", "retry", "abort"])
def test_every_reconciliation_decision_records_in_the_database(world: bide.Engine, pg_url: str,
                                                               decision: str) -> None:
    extra = ("--result", '{"charged": 7}') if decision == "mark_done" else ()
    code, out = approve(pg_url, waiting_id(world, "r-recon"), "--decision", decision, *extra)
    assert code == 0, out
    assert "recorded in" in out and records(world, "approval_decided") == 1
    run = world.resume("r-recon")
    expected = {"mark_done": bide.Status.DONE, "retry": bide.Status.DONE,
                "abort": bide.Status.FAILED}[decision]
    assert run.status == expected, run
    if decision == "mark_done":
        assert run.state["receipt"] == {"charged": 7}  # the tool was not called again


def test_reject_records_in_the_database(world: bide.Engine, pg_url: str) -> None:
    aid = waiting_id(world, "r-waiting")
    code, out = approve(pg_url, aid, "--reject")
    assert code == 0 and f"reject for {aid} recorded" in out
    (row,) = [e["record"] for e in world.log("r-waiting") if e["type"] == "approval_decided"]
    assert row["decision"] == bide.Decision.REJECT


def test_a_refused_decision_is_a_clear_error_and_writes_nothing(world: bide.Engine,
                                                                pg_url: str) -> None:
    aid, recon = waiting_id(world, "r-waiting"), waiting_id(world, "r-recon")
    before = records(world)
    code, out = approve(pg_url, "a-000000000000")
    assert code == EXIT_NOT_FOUND and "no approval request" in out
    code, out = approve(pg_url, recon)
    assert code == EXIT_USAGE and "mark_done / retry / abort" in out
    code, out = approve(pg_url, aid, "--decision", "retry")
    assert code == EXIT_USAGE and "approval request" in out
    assert records(world) == before
    assert approve(pg_url, aid, "--by", "ann")[0] == 0
    after = records(world)
    for args in ((), ("--reject",)):
        code, out = approve(pg_url, aid, *args)
        assert code == EXIT_BAD_STATE and "already decided 'approve' by ann" in out, out
    assert records(world) == after == before + 1


def test_an_expired_request_is_refused_and_nothing_is_written(pg_url: str, tmp_path: Path,
                                                              monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    flow = bide.Flow("exp")
    flow.node(lambda s, ctx: {"ok": ctx.approve("x", expires_in=0.001)}, name="n", start=True)
    with bide.open(pg_url, local=tmp_path / "a", durability="fast") as eng:
        eng.register(flow)
        aid = eng.start("exp").waiting["approval_id"]
        before = records(eng)
        time.sleep(0.01)  # past its expiry
        code, out = approve(pg_url, aid)
        assert code == EXIT_BAD_STATE and "expired" in out
        assert records(eng) == before


def test_record_decision_checks_the_run_and_digest_it_is_bound_to(world: bide.Engine) -> None:
    aid = waiting_id(world, "r-waiting")
    before = records(world)
    with pytest.raises(DecisionRefused, match="does not match the request's run"):
        world.record_decision(aid, "approve", run_id="r-recon")
    with pytest.raises(DecisionRefused, match="digest does not match"):
        world.record_decision(aid, "approve", digest="sha256:00")
    assert records(world) == before
    row = next(p for p in world.pending() if p["approval_id"] == aid)
    done = world.record_decision(aid, "approve", run_id="r-waiting", digest=row["digest"])
    assert done["run_id"] == "r-waiting" and records(world) == before + 1


def test_the_signing_requirement_lives_in_the_database_for_every_host(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    key_file = tmp_path / "approval.key"
    key_file.write_bytes(KEY + b"\n")
    with host(pg_url, tmp_path / "host-a", approval_key=KEY) as a:  # marks the home
        a.start("ask", run_id="r1")
        aid = waiting_id(a, "r1")
        with a.store.reader() as r:
            (text,) = r.conn.execute("SELECT value FROM bide.meta WHERE key = %s",
                                     (SETTING,)).fetchone()
    assert json.loads(text)["key_id"] == key_id(KEY) and "s3cret" not in text
    assert not list(tmp_path.rglob(MARKER))  # no host's directory holds the marker
    with pytest.raises(ApprovalKeyError, match="is not the home's"):
        host(pg_url, tmp_path / "host-b", approval_key=b"another key")
    with host(pg_url, tmp_path / "host-b") as b:  # no key: still bound by the database
        before = records(b)
        code, out = approve(pg_url, aid)
        assert code == EXIT_USAGE and "requires signed decisions" in out
        assert "bide.meta" in out and "no key" in out
        wrong = tmp_path / "wrong.key"
        wrong.write_bytes(b"not it")
        code, out = approve(pg_url, aid, "--approval-key-file", str(wrong))
        assert code == EXIT_USAGE and "is not the home's" in out
        drop_decision(b.home, aid, "approve", by="mallory")  # unsigned, in host B's inbox
        (result,) = Inbox(b).process()
        assert not result.accepted and "requires signed decisions" in result.reason
        assert records(b) == before  # nothing recorded by any refusal
        code, out = approve(pg_url, aid, "--approval-key-file", str(key_file))
        assert code == 0 and "recorded" in out, out
        assert records(b, "approval_decided") == 1


def test_two_hosts_marking_the_home_with_different_keys_one_wins(pg_url: str,
                                                                 tmp_path: Path) -> None:
    with host(pg_url, tmp_path / "first"):
        pass  # the store exists: the race is on the marker alone
    outcomes: dict[int, str] = {}
    go = threading.Barrier(2, timeout=30)

    def mark(i: int) -> None:
        go.wait()
        try:
            host(pg_url, tmp_path / f"h{i}", approval_key=f"key {i}".encode()).close()
            outcomes[i] = "marked"
        except ApprovalKeyError:
            outcomes[i] = "refused"

    threads = [threading.Thread(target=mark, args=(i,), name=f"mark-{i}") for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert sorted(outcomes.values()) == ["marked", "refused"], outcomes


def _race(engines: list[bide.Engine]) -> list[FileResult]:
    """Process every engine's inbox at once, one thread each; their results."""
    inboxes = [Inbox(e) for e in engines]
    go = threading.Barrier(len(inboxes), timeout=30)
    out: list[list[FileResult]] = [[] for _ in inboxes]
    errors: list[BaseException] = []

    def serve(i: int) -> None:
        try:
            go.wait()
            out[i] = inboxes[i].process()
        except BaseException as exc:  # surfaced by the assert below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(i,), name=f"inbox-{i}")
               for i in range(len(inboxes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    return [f for results in out for f in results]


def test_two_watchers_with_their_own_inboxes_record_a_decision_once(pg_url: str,
                                                                    tmp_path: Path) -> None:
    a, b = host(pg_url, tmp_path / "host-a"), host(pg_url, tmp_path / "host-b",
                                                      inbox=tmp_path / "drop-b")
    try:
        assert b.doors.inbox == tmp_path / "drop-b"
        for n in range(10):
            same, split = f"r-same-{n}", f"r-split-{n}"
            a.start("ask", run_id=same)
            a.start("ask", run_id=split)
            s_aid, x_aid = waiting_id(a, same), waiting_id(a, split)
            for eng in (a, b):  # the same decision dropped into both hosts' inboxes
                drop_decision(eng.home, s_aid, "approve", by=eng.home.name,
                              inbox=eng.doors.inbox)
            drop_decision(a.home, x_aid, "approve", by="a", inbox=a.doors.inbox)
            drop_decision(b.home, x_aid, "reject", by="b", inbox=b.doors.inbox)
            results = _race([a, b])
            assert len(results) == 4, results
            mine = [f for f in results if f.approval_id == s_aid]
            assert sorted(f.duplicate for f in mine) == [False, True], mine
            accepted = [f for f in results if f.approval_id == x_aid and f.accepted]
            refused = [f for f in results if f.approval_id is None]
            assert len(accepted) == 1 and len(refused) == 1, results
            assert "already decided" in refused[0].reason
            for run_id in (same, split):
                decided = [e for e in a.log(run_id) if e["type"] == "approval_decided"]
                assert len(decided) == 1, (run_id, decided)
        for eng in (a, b):  # every file moved out, none lost
            box = eng.doors.inbox
            assert Inbox(eng).names() == [] and not list((box / ".work").iterdir())
            moved = len(list((box / "processed").iterdir()))
            moved += len([p for p in (box / "rejected").iterdir()
                          if not p.name.endswith(".error.json")])
            assert moved == 20
    finally:
        a.close()
        b.close()


def test_watch_serves_its_own_inbox_and_writes_requests_only_where_asked(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with host(pg_url, tmp_path / "submitter") as eng:
        eng.submit("ask", run_id="r-plain")
    watch = ["watch", "--once", "--home", pg_url, "--app", "cli_world:FLOWS"]
    out = CliRunner().invoke(main, watch)
    assert out.exit_code == 0, out.output
    assert "r-plain: WAITING_APPROVAL" in out.output
    assert not list(tmp_path.rglob("requests/*.json"))  # none unless asked
    with host(pg_url, tmp_path / "submitter") as eng:
        eng.submit("ask", run_id="r-asked")
    drop, asks = tmp_path / "drop", tmp_path / "asks"
    out = CliRunner().invoke(main, [*watch, "--inbox", str(drop), "--requests", str(asks)])
    assert out.exit_code == 0, out.output
    with host(pg_url, tmp_path / "submitter") as eng:
        aid = waiting_id(eng, "r-asked")
    request = json.loads((asks / f"{aid}.json").read_text())
    assert f"into {drop}" in request["how_to_decide"]
    assert f"--home '{pg_url}'" in request["how_to_decide"]  # quoted: a URL has ? and &
    code, said = approve(pg_url, aid, "--inbox", str(drop))  # a file, not a record
    assert code == 0 and "dropped into the inbox" in said, said
    with host(pg_url, tmp_path / "submitter") as eng:
        assert records(eng, "approval_decided") == 0
    out = CliRunner().invoke(main, [*watch, "--inbox", str(drop)])
    assert out.exit_code == 0, out.output
    assert "file accepted" in out.output and "r-asked: DONE" in out.output
    assert len(list((drop / "processed").iterdir())) == 1


def test_watch_inbox_and_requests_options_on_a_directory_home(tmp_path: Path,
                                                              monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    home, drop, asks = tmp_path / "home", tmp_path / "drop", tmp_path / "asks"
    with bide.open(home, durability="fast") as eng:
        eng.register(*cli_world.FLOWS)
        eng.submit("ask", run_id="r1")
    watch = ["watch", "--once", "--home", str(home), "--app", "cli_world:FLOWS",
             "--inbox", str(drop), "--requests", str(asks)]
    out = CliRunner().invoke(main, watch)
    assert out.exit_code == 0, out.output
    (request,) = asks.iterdir()
    assert not list((home / "requests").iterdir())  # written where asked only
    body = json.loads(request.read_text())
    assert f"into {drop}" in body["how_to_decide"]
    approved = CliRunner().invoke(main, ["approve", body["approval_id"], "--home", str(home),
                                         "--inbox", str(drop)])
    assert approved.exit_code == 0 and "dropped into the inbox" in approved.stdout
    assert not [p for p in (home / "inbox").iterdir() if p.is_file()]  # only where asked
    out = CliRunner().invoke(main, watch)
    assert out.exit_code == 0 and "r1: DONE" in out.output, out.output
    assert len(list((drop / "processed").iterdir())) == 1


def test_a_watcher_serving_only_its_inbox_needs_no_local_directory(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd, drop = tmp_path / "cwd", tmp_path / "drop"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with host(pg_url, tmp_path / "submitter") as eng:
        eng.start("ask", run_id="r1")
        drop_decision(tmp_path, waiting_id(eng, "r1"), "approve", by="ann", inbox=drop)
    out = CliRunner().invoke(main, ["watch", "--once", "--home", pg_url, "--app",
                                    "cli_world:FLOWS", "--inbox", str(drop)])
    assert out.exit_code == 0, out.output
    assert "file accepted" in out.output and "r1: DONE" in out.output, out.output
    assert not (cwd / ".bide").exists() and files_under(drop / ".work") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_an_unsigned_file_of_another_user_is_refused_in_a_hosts_inbox(
        world: bide.Engine, pg_url: str, tmp_path: Path) -> None:
    nobody = 65534
    drop = tmp_path / "drop"
    with host(pg_url, tmp_path / "host-b", inbox=drop) as b:
        path = drop_decision(b.home, waiting_id(b, "r-waiting"), "approve", by="mallory",
                             inbox=drop)
        os.chown(path, nobody, nobody)
        (result,) = Inbox(b).process()
        assert not result.accepted
        assert f"owned by uid {nobody}, not by the owner of {drop}" in result.reason
        assert records(b, "approval_decided") == 0


def test_a_watcher_on_another_host_resumes_a_run_approved_from_the_cli(
        world: bide.Engine, pg_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    host_b = tmp_path / "host-b"
    host_b.mkdir()
    watcher = subprocess.Popen([BIDE, "watch", "--home", pg_url, "--app", "cli_world:FLOWS",
                                "--durability", "fast"], cwd=host_b, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        code, out = approve(pg_url, waiting_id(world, "r-waiting"), "--by", "ann")
        assert code == 0 and "recorded" in out, out
        deadline = time.monotonic() + 30
        while world.get("r-waiting").status != bide.Status.DONE:
            assert time.monotonic() < deadline and watcher.poll() is None, "not resumed"
            time.sleep(0.05)
    finally:
        watcher.send_signal(signal.SIGTERM)
        output, _ = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, output
    assert "run r-waiting: DONE" in output, output


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_a_killed_approve_records_all_or_nothing_and_can_be_run_again(
        world: bide.Engine, pg_url: str, point: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    aid = waiting_id(world, "r-waiting")
    args = [BIDE, "approve", aid, "--home", pg_url, "--by", "ann"]
    killed = subprocess.run(args, env={**env, "BIDE_FAULT": f"{point}:1:kill"},
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    landed = records(world, "approval_decided")
    assert landed == (1 if point == "after_commit" else 0)
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    if landed:  # the first one counted: run again, it says so and records nothing more
        assert again.returncode == EXIT_BAD_STATE, again.stderr
        assert "already decided 'approve' by ann" in again.stderr
    else:
        assert again.returncode == 0 and "recorded" in again.stdout, again.stderr
    assert records(world, "approval_decided") == 1
    assert world.resume("r-waiting").status == bide.Status.DONE


def test_a_hosts_inbox_keeps_the_file_rules_a_burst_in_one_commit(pg_url: str,
                                                                   tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    with host(pg_url, tmp_path / "host-a", inbox=drop) as eng:
        for i in range(12):
            eng.start("ask", run_id=f"r{i}")
        for p in eng.pending():
            drop_decision(eng.home, p["approval_id"], "approve", by="t", inbox=drop)
        (drop / "bad.json").write_bytes(b"{nope")
        (drop / "half.json.tmp").write_bytes(b"{")  # still being written: left alone
        commits: list = []
        eng.store.on_commit(commits.append)
        results = Inbox(eng).process()
        assert sorted(f.accepted for f in results) == [False] + [True] * 12
        assert len(commits) == 1 and len(commits[0].seqs) == 12  # the burst: one commit
        assert eng.pending() == []
        assert len(list((drop / "processed").iterdir())) == 12
        reason = json.loads((drop / "rejected" / "bad.json.error.json").read_text())
        assert "not valid JSON" in reason["error"] and (drop / "rejected" / "bad.json").exists()
        assert Inbox(eng).names() == [] and (drop / "half.json.tmp").exists()
