"""The ``bide`` CLI through click's CliRunner, against a home with runs in every status."""

# ruff: noqa: F811 - tests take the imported fixtures `home`/`template` as parameters

from __future__ import annotations

import json
import threading
from pathlib import Path

import bide
import pytest
from bide.cli import main
from cli_world import DECIDED, FLOWS, RUNS, home, template  # noqa: F401 - fixtures
from click.testing import CliRunner, Result


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    return "cli_world:FLOWS"


def run(home: Path | None, *args: str) -> Result:
    argv = [*args] + (["--home", str(home)] if home is not None else [])
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def js(home: Path, *args: str) -> object:
    result = run(home, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


READ_COMMANDS = [
    ["runs"], ["show", "r-done"], ["log", "r-done"], ["checkpoints", "r-done"],
    ["state", "r-done"], ["diff", "r-done", "0", "1"], ["intents", "r-recon"],
    ["intents", "--unknown"], ["export", "r-done"], ["stats"], ["doctor"],
]


# -- homes ----------------------------------------------------------------------------
@pytest.mark.parametrize("argv", READ_COMMANDS + [["prune"], ["compact"], ["cancel", "r"]])
def test_a_missing_home_is_exit_3_and_is_not_created(tmp_path: Path, argv: list[str]) -> None:
    missing = tmp_path / "nope"
    result = run(missing, *argv)
    assert result.exit_code == 3, result.output
    assert "not a bide home" in result.stderr
    assert not missing.exists()


def test_home_comes_from_bide_home(home: Path) -> None:
    result = CliRunner().invoke(main, ["runs", "--json"], env={"BIDE_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == len(RUNS) + 1


@pytest.mark.parametrize("argv", READ_COMMANDS)
def test_every_read_command_prints_json(home: Path, argv: list[str]) -> None:
    result = run(home, *argv, "--json")
    assert result.exit_code == 0, result.output
    if argv[0] == "log":
        assert [json.loads(line) for line in result.stdout.splitlines()]
    else:
        json.loads(result.stdout)


@pytest.mark.parametrize("argv", READ_COMMANDS)
def test_human_output_fits_100_columns(home: Path, argv: list[str]) -> None:
    if argv[0] == "export":
        return  # always JSON
    result = run(home, *argv)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 100, result.stdout


@pytest.mark.parametrize("argv", [
    ["show", "r-x"], ["log", "r-x"], ["checkpoints", "r-x"], ["state", "r-x"],
    ["diff", "r-x", "0", "1"], ["intents", "r-x"], ["export", "r-x"], ["cancel", "r-x"],
    ["fork", "r-x", "--version", "0"], ["state", "r-done", "--version", "99"],
    ["state", "r-done", "--key", "nope"], ["diff", "r-done", "0", "99"],
    ["fork", "r-done", "--version", "99"],
])
def test_not_found_is_exit_3(home: Path, argv: list[str]) -> None:
    result = run(home, *argv)
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("error: ")


@pytest.mark.parametrize("argv", [
    ["intents"], ["show"], ["diff", "r-done", "0"], ["runs", "--limit", "0"],
    ["prune", "--keep", "0"], ["prune", "--finished-older-than", "soon"], ["fork", "r-done"],
    ["resume", "r-done"], ["resume", "r-done", "--app", "nomodule_here:X"],
    ["recover", "--app", "cli_world:FLOWS", "--max-age", "old"],
    ["resume", "r-done", "--app", "cli_world"], ["export", "r-done", "--format", "xml"],
    ["nonsense"],
])
def test_usage_errors_are_exit_2(home: Path, app: str, argv: list[str]) -> None:
    assert run(home, *argv).exit_code == 2


# -- runs and show ------------------------------------------------------------------------
def test_runs_lists_every_status(home: Path) -> None:
    rows = js(home, "runs")
    status = {r["run_id"]: r["status"] for r in rows}
    assert status == {**{v: k for k, v in RUNS.items()}, DECIDED: "WAITING_APPROVAL"}
    orphan = next(r for r in rows if r["run_id"] == "r-orphan")
    assert orphan["lease_live"] is False and orphan["waiting_on"] == "orphaned: no live lease"
    assert orphan["state_version"] == 3
    text = run(home, "runs").stdout
    assert text.splitlines()[0].split() == ["RUN", "FLOW", "STATUS", "VER", "STEP", "WAITING",
                                            "ON", "UPDATED"]


def test_runs_filters(home: Path) -> None:
    assert [r["run_id"] for r in js(home, "runs", "--status", "failed")] == ["r-failed"]
    assert {r["run_id"] for r in js(home, "runs", "--flow", "ask")} == \
        {"r-waiting", "r-decided", "r-cancelled"}
    assert len(js(home, "runs", "--limit", "2")) == 2
    assert [r["run_id"] for r in js(home, "runs", "--status", "Failed")] == ["r-failed"]


def test_runs_with_an_unknown_status_is_a_usage_error(home: Path) -> None:
    result = run(home, "runs", "--status", "NOPE")
    assert result.exit_code == 2 and result.stdout == ""
    assert "'NOPE'" in result.stderr and "WAITING_APPROVAL" in result.stderr


def test_show_has_the_design_shape(home: Path) -> None:
    doc = js(home, "show", "r-waiting")
    assert list(doc)[:6] == ["run_id", "state_version", "status", "committed",
                             "pending_writes", "waiting"]
    assert doc["status"] == "WAITING_APPROVAL" and doc["state_version"] == 1
    assert doc["committed"] == ["prep"]
    # notify finished in the paused superstep: its write waits after the checkpoint
    assert list(doc["pending_writes"]) == ["notify"]
    assert "notified" in doc["pending_writes"]["notify"]
    assert doc["waiting"]["type"] == "approval" and doc["waiting"]["node_id"] == "apply_patch"
    assert doc["flow"] == "ask" and doc["lease"] is None and doc["error"] is None
    assert doc["policy"]["snapshot"] == "delta"


def test_show_failed_and_orphaned(home: Path) -> None:
    failed = js(home, "show", "r-failed")
    assert "kaput: the disk is lava" in failed["error"]
    assert "kaput: the disk is lava" in run(home, "show", "r-failed").stdout
    orphan = js(home, "show", "r-orphan")
    lease = orphan["lease"]
    assert lease["live"] is False and lease["owner_alive"] is False and lease["token"] == 1
    assert "its process is gone" in run(home, "show", "r-orphan").stdout


# -- log, checkpoints, state, diff ------------------------------------------------------
def test_log_is_json_lines_in_order(home: Path) -> None:
    result = run(home, "log", "r-waiting", "--json")
    entries = [json.loads(line) for line in result.stdout.splitlines()]
    seqs = [e["seq"] for e in entries]
    assert seqs == sorted(seqs)
    types = [e["type"] for e in entries]
    assert types[0] == "run_created"
    assert {"checkpoint", "pending_write", "approval_requested", "lease_released"} <= set(types)
    assert all(e["bytes"] > 0 and e["record"]["type"] == e["type"] for e in entries)
    text = run(home, "log", "r-waiting").stdout
    assert "apply patch" in text and "BYTES" in text


def test_checkpoints(home: Path) -> None:
    rows = js(home, "checkpoints", "r-done")
    assert [c["version"] for c in rows] == list(range(7))
    assert [c["full"] for c in rows] == [True, False, True, False, True, False, True]
    assert rows[-1]["status"] == "DONE" and all(c["bytes"] > 0 for c in rows)


def test_state_at_versions_and_keys(home: Path) -> None:
    latest = js(home, "state", "r-done")
    assert latest["version"] == 6 and latest["state"]["n"] == 6
    v3 = js(home, "state", "r-done", "--version", "3")
    assert v3["state"]["trail"] == ["step1", "step2", "step3"]
    key = js(home, "state", "r-done", "--version", "2", "--key", "n")
    assert key == {"run_id": "r-done", "version": 2, "key": "n", "value": 2}
    assert run(home, "state", "r-done", "--key", "trail").stdout.startswith("[")


def test_diff_says_how_keys_changed(home: Path) -> None:
    doc = js(home, "diff", "r-done", "2", "4")
    changes = {c["key"]: c for c in doc["changes"]}
    assert changes["n"]["change"] == "changed" and (changes["n"]["before"],
                                                    changes["n"]["after"]) == (2, 4)
    assert changes["trail"]["change"] == "appended" and changes["trail"]["detail"] == "+2 items"
    first = {c["key"]: c["change"] for c in js(home, "diff", "r-done", "0", "1")["changes"]}
    assert first == {"n": "added", "trail": "added"}
    assert "no state keys changed" in run(home, "diff", "r-done", "3", "3").stdout


# -- intents ----------------------------------------------------------------------------
def test_intents_of_a_run_and_in_doubt(home: Path) -> None:
    rows = js(home, "intents", "r-recon")
    assert len(rows) == 1
    (i,) = rows
    assert i["tool"] == "charge" and i["status"] == "unknown"
    assert i["idempotency_key"].startswith("bide-") and i["approval_id"].startswith("a-")
    doubt = js(home, "intents", "--unknown")
    assert [d["run_id"] for d in doubt] == ["r-recon"]
    assert js(home, "intents", "r-done") == []
    assert "made no tool calls" in run(home, "intents", "r-done").stdout


# -- cancel, fork, resume, recover --------------------------------------------------------
def test_cancel(home: Path) -> None:
    assert js(home, "cancel", "r-waiting", "--reason", "obsolete")["cancelled"] is True
    doc = js(home, "show", "r-waiting")
    assert doc["status"] == "CANCELLED" and doc["reason"] == "obsolete"
    assert doc["waiting"] is None
    assert js(home, "cancel", "r-waiting")["cancelled"] is False
    result = run(home, "cancel", "r-done")
    assert result.exit_code == 1 and "DONE" in result.stderr
    assert js(home, "cancel", "r-failed")["cancelled"] is True


def test_cancelled_run_cannot_be_resumed(home: Path, app: str) -> None:
    result = run(home, "resume", "r-cancelled", "--app", app)
    assert result.exit_code == 1 and "CANCELLED" in result.stderr


def test_cancel_fences_out_a_live_worker(home: Path) -> None:
    gate, started = threading.Event(), threading.Event()
    slow = bide.Flow("slow")

    @slow.node(start=True)
    def wait(state, ctx):
        started.set()
        gate.wait(10)
        return {"late": True}

    errors: list[BaseException] = []

    def worker() -> None:
        with bide.open(home, lease_ttl=30) as e:
            e.register(slow)
            try:
                e.start("slow", run_id="r-slow")
            except bide.StaleLease as exc:
                errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    assert started.wait(10)
    assert js(home, "show", "r-slow")["lease"]["live"] is True
    assert js(home, "cancel", "r-slow")["cancelled"] is True
    gate.set()
    t.join(10)
    assert errors and isinstance(errors[0], bide.StaleLease)
    doc = js(home, "show", "r-slow")
    assert doc["status"] == "CANCELLED" and doc["lease"] is None
    assert "late" not in js(home, "state", "r-slow")["state"]


def test_fork_starts_a_pending_run_from_a_version(home: Path, app: str) -> None:
    doc = js(home, "fork", "r-done", "--version", "3", "--as", "r-again")
    assert doc == {"run_id": "r-again", "parent": "r-done", "parent_version": 3,
                   "status": "PENDING"}
    shown = js(home, "show", "r-again")
    assert shown["status"] == "PENDING" and shown["parent"] == "r-done"
    assert shown["state_version"] == 3
    assert js(home, "state", "r-again")["state"] == js(home, "state", "r-done", "--version",
                                                        "3")["state"]
    (cp,) = js(home, "checkpoints", "r-again")
    assert cp["full"] and cp["version"] == 3
    resumed = js(home, "resume", "r-again", "--app", app)
    assert resumed["status"] == "DONE" and resumed["state_version"] == 6  # input until=6
    assert js(home, "state", "r-again")["state"]["trail"] == [f"step{i}" for i in range(1, 7)]
    assert run(home, "fork", "r-done", "--version", "3", "--as", "r-again").exit_code == 1
    assert run(home, "fork", "r-done", "--version", "3", "--as", "bad/id").exit_code == 2
    auto = js(home, "fork", "r-done", "--version", "1")["run_id"]
    assert auto.startswith("r-done-fork-")


def test_resume_exit_codes(home: Path, app: str) -> None:
    assert run(home, "resume", "r-failed", "--app", app).exit_code == 1  # still raises
    result = run(home, "resume", "r-pending", "--app", app)
    assert result.exit_code == 0 and "PENDING -> DONE" in result.stdout
    assert run(home, "resume", "r-x", "--app", app).exit_code == 3
    # a waiting run with no decision stays waiting (nothing to do): ok
    assert js(home, "resume", "r-waiting", "--app", app)["status"] == "WAITING_APPROVAL"


def test_recover_resumes_orphaned_pending_and_decided_runs(home: Path, app: str) -> None:
    rows = js(home, "recover", "--app", app)
    assert {r["run_id"]: (r["was"], r["status"]) for r in rows} == {
        "r-orphan": ("RUNNING", "DONE"), "r-pending": ("PENDING", "DONE"),
        DECIDED: ("WAITING_APPROVAL", "DONE")}
    assert js(home, "state", "r-orphan")["state"]["trail"] == [f"step{i}" for i in range(1, 6)]
    assert js(home, "state", DECIDED)["state"]["applied"] is True
    assert js(home, "recover", "--app", app) == []
    assert run(home, "recover", "--app", app).stdout.strip() == "nothing to recover"


def test_recover_reports_runs_it_cannot_resume(home: Path, app: str) -> None:
    only_ask = "cli_world:ask"  # one Flow: the "steps" runs r-orphan/r-pending cannot run
    result = run(home, "recover", "--app", only_ask, "--json")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    errors = {r["run_id"]: r["error"] for r in rows}
    assert "unknown flow 'steps'" in errors["r-orphan"]
    assert errors[DECIDED] is None


def test_recover_gives_up_on_old_orphans(home: Path, app: str) -> None:
    result = run(home, "recover", "--app", app, "--max-age", "0s", "--json")
    assert result.exit_code == 1
    orphan = next(r for r in json.loads(result.stdout) if r["run_id"] == "r-orphan")
    assert orphan["status"] == "FAILED" and "expired" in orphan["error"]


# -- doctor, stats, export --------------------------------------------------------------
def test_doctor_ok(home: Path) -> None:
    doc = js(home, "doctor")
    assert doc["ok"] is True and doc["problems"] == [] and doc["runs"] == len(RUNS) + 1
    assert "ok:" in run(home, "doctor").stdout


def test_stats(home: Path) -> None:
    doc = js(home, "stats")
    assert doc["runs"] == {"CANCELLED": 1, "DONE": 1, "FAILED": 1, "NEEDS_RECONCILIATION": 1,
                           "PENDING": 1, "RUNNING": 1, "WAITING_APPROVAL": 2}
    assert doc["records"]["checkpoint"]["count"] > 10
    assert doc["total_records"] == sum(v["count"] for v in doc["records"].values())
    assert 0 < doc["store"]["map_used"] < 1
    assert doc["intents_in_doubt"] == 1 and doc["approvals_waiting"] == 3
    assert "KiB" in run(home, "stats").stdout


def test_export_has_everything(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert run(home, "export", "r-recon", "-o", str(out)).exit_code == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "bide-export" and doc["run"]["status"] == "NEEDS_RECONCILIATION"
    assert doc["intents"][0]["status"] == "unknown"
    assert doc["approvals"][0]["kind"] == "reconciliation"
    assert [r["type"] for r in doc["records"]][0] == "run_created"
    assert doc["state"]["version"] == 0 and doc["checkpoints"]


def test_prune_and_compact_through_the_cli(home: Path) -> None:
    before = js(home, "stats")["total_records"]
    dry = js(home, "prune", "--dry-run")
    assert dry["dry_run"] and dry["records_removed"] > 0
    assert js(home, "stats")["total_records"] == before
    done = js(home, "prune", "--keep", "1")
    assert done["records_removed"] == dry["records_removed"]
    assert js(home, "stats")["total_records"] == before - done["records_removed"]
    assert js(home, "doctor")["ok"]
    report = js(home, "compact")
    assert report["bytes_after"] <= report["bytes_before"]
    assert report["records"] == before - done["records_removed"]
    assert js(home, "doctor")["ok"]


def test_compact_refuses_while_this_process_has_the_store_open(home: Path) -> None:
    with bide.open(home, create=False):
        result = run(home, "compact")
    assert result.exit_code == 1 and "this process" in result.stderr


def test_flows_are_registered_by_the_app_option(home: Path, app: str) -> None:
    # a list attr and a single Flow attr work; a function is refused, not called
    # (tests/test_cli_input.py)
    assert [f.name for f in FLOWS] == ["steps", "boom", "ask", "pay"]
    assert run(home, "resume", "r-pending", "--app", "cli_world:steps").exit_code == 0
    assert run(home, "resume", "r-orphan", "--app", "cli_world:FLOWS").exit_code == 0
