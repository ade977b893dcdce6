"""Scripting bide (issue 17 item 4): ``--json`` on every command, errors as one JSON object,
absolute ISO-8601 times, one name per idea, ranges checked by click, ``BIDE_HOME`` in every
``--help``, not-found exits 3, success on stdout and errors on stderr, ``--by`` a real name.

The tables walk every command of ``bide --help``; a new command must join them.
"""

from __future__ import annotations

import datetime
import getpass
import json
from pathlib import Path
from typing import Any

import bide
import pytest
from bide.cli import main
from bide.engine.read import scripting
from cli_world import template, world  # noqa: F401 - template is a fixture
from click.testing import CliRunner, Result

# Commands with no --json flag, and why: each writes or tells something else.
NO_JSON = {
    "bench": "--json PATH writes the measurements to a file",
    "demo": "a story told to a person, step by step",
    "torture": "a crash campaign; its report is for a person (bench holds the numbers)",
}
ERROR_KEYS = {"error", "kind", "exit_code"}


def asking() -> bide.Flow:
    flow = bide.Flow("asking")
    flow.node(lambda s, ctx: {"n": ctx.ask("how many?", schema=int)}, name="count", start=True)
    return flow


@pytest.fixture
def home(tmp_path: Path, template: Path) -> Path:  # noqa: F811 - the fixture
    """cli_world's runs in every status, a schedule, and a run asking a question."""
    path = world(tmp_path, template)
    with bide.open(path) as e:
        e.register(asking())
        e.start("asking", run_id="r-asking")
        e.schedule("beat", "steps", every=60, check_flow=False)
    return path


def cli(home: Path, *args: str, json_flag: bool = False) -> Result:
    """``bide NAME [--json] ARGS... --home HOME``: --json right after the command name, so
    it comes before any ``--`` in ARGS."""
    argv = [args[0], *(["--json"] if json_flag else []), *args[1:]]
    return CliRunner().invoke(main, [*argv, "--home", str(home)])


def snapshot(home: Path) -> list[tuple[str, str, int]]:
    with bide.open(home, create=False) as e:
        return [(r.run_id, r.status, r.state_version) for r in e.runs()]


def approval_of(home: Path, run_id: str) -> str:
    with bide.open(home, create=False) as e:
        return e.get(run_id).waiting["approval_id"]


# -- --json on every command ---------------------------------------------------------
def test_every_command_takes_json_as_a_flag() -> None:
    for name, cmd in main.commands.items():
        flags = [p for p in cmd.params if "--json" in getattr(p, "opts", [])]
        if name in NO_JSON:
            assert not any(p.is_flag for p in flags), name  # type: ignore[attr-defined]
            continue
        assert len(flags) == 1 and flags[0].is_flag, name  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(set(main.commands) - set(NO_JSON)))
def test_every_json_command_reports_a_usage_error_as_one_json_object(name: str,
                                                                     tmp_path: Path) -> None:
    result = cli(tmp_path / "none", name, "--no-such-option", json_flag=True)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    doc = json.loads(result.stderr)
    assert set(doc) == ERROR_KEYS
    assert (doc["kind"], doc["exit_code"]) == ("NoSuchOption", 2)
    assert "--no-such-option" in doc["error"]


# One error of each kind, across the command families: (argv, exit code, kind).
ERRORS = [
    (["show", "r-nope"], 3, "UnknownRun"),
    (["log", "r-nope"], 3, "UnknownRun"),
    (["state", "r-done", "--version", "99"], 3, "UnknownVersion"),
    (["state", "r-done", "--key", "nope"], 3, "UnknownKey"),
    (["export", "r-nope"], 3, "UnknownRun"),
    (["submit", "nope", "--app", "cli_world:FLOWS"], 3, "UnknownFlow"),
    (["run", "nope", "--app", "cli_world:FLOWS"], 3, "UnknownFlow"),
    (["schedule", "s", "nope", "--every", "5", "--app", "cli_world:FLOWS"], 3, "UnknownFlow"),
    (["unschedule", "nope"], 3, "UnknownSchedule"),
    (["approve", "a-nope"], 3, "UnknownApproval"),
    (["answer", "a-nope", "1"], 3, "UnknownApproval"),
    (["signal", "r-nope", "go"], 3, "UnknownRun"),
    (["fork", "r-nope", "--version", "0"], 3, "UnknownRun"),
    (["resume", "r-nope", "--app", "cli_world:FLOWS"], 3, "UnknownRun"),
    (["cancel", "r-done"], 1, "NotCancellable"),
    (["resume", "r-done", "--app", "cli_world:FLOWS"], 1, "RunNotResumable"),
    (["fork", "r-done", "--version", "0", "--as", "r-waiting"], 1, "RunExists"),
    (["intents"], 2, "UsageError"),
    (["runs", "--status", "NOPE"], 2, "BadParameter"),
    (["config", "--max-orphan-age", "-1h"], 2, "ConfigError"),
]


@pytest.mark.parametrize("argv, code, kind", ERRORS, ids=lambda v: "-".join(v) if isinstance(
    v, list) else str(v))
def test_an_error_under_json_is_one_object_on_stderr_with_the_same_exit_code(
        home: Path, argv: list[str], code: int, kind: str) -> None:
    before = snapshot(home)
    plain = cli(home, *argv)
    result = cli(home, *argv, json_flag=True)
    assert (plain.exit_code, result.exit_code) == (code, code), (plain.output, result.output)
    assert plain.stdout == "" and result.stdout == ""  # errors on stderr, nothing on stdout
    assert "error: " in plain.stderr.lower(), plain.stderr  # click adds its usage line
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    doc = json.loads(lines[0])
    assert doc == {"error": doc["error"], "kind": kind, "exit_code": code}
    assert doc["error"] and doc["error"] in plain.stderr  # the same message, as data
    assert snapshot(home) == before  # a refused command changed nothing


# -- absolute ISO-8601 times ---------------------------------------------------------
def times_in(doc: Any, found: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Every (key, value) under a time key, outside the user's own data."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in scripting.USER_KEYS:
                continue
            if scripting.is_time_key(k) and v is not None:
                found.append((k, v))
            else:
                times_in(v, found)
    elif isinstance(doc, list):
        for v in doc:
            times_in(v, found)
    return found


READS = [  # (argv, the time keys that must be there)
    (["runs"], {"updated_at"}), (["show", "r-waiting"], {"created_at", "updated_at"}),
    (["log", "r-done"], {"at"}), (["checkpoints", "r-done"], {"at"}),
    (["pending"], {"requested_at"}), (["intents", "--unknown"], set()),
    (["intents", "r-recon"], set()), (["export", "r-waiting"], set()),
    (["schedules"], {"next_due"}), (["stats"], set()), (["doctor"], set()),
    (["inbox"], set()), (["state", "r-done"], set()), (["config"], set()),
    (["submit", "steps", "--app", "cli_world:FLOWS", "--run-id", "r-new"], set()),
    (["fork", "r-done", "--version", "1", "--as", "r-forked"], set()),
    (["cancel", "r-pending"], set()), (["diff", "r-done", "0", "1"], set()),
    (["schedule", "tick", "steps", "--every", "30"], {"next_due"}),
]


@pytest.mark.parametrize("argv, must", READS, ids=lambda v: "-".join(v) if isinstance(
    v, list) else None)
def test_every_time_in_json_is_iso_8601_utc(home: Path, argv: list[str], must: set[str]
                                            ) -> None:
    result = cli(home, *argv, json_flag=argv[0] != "export")
    assert result.exit_code == 0, result.output
    assert " ago" not in result.stdout and "just now" not in result.stdout
    docs = [json.loads(line) for line in result.stdout.splitlines()] if argv[0] == "log" \
        else [json.loads(result.stdout)]
    found = times_in(docs, [])
    assert must <= {k for k, _ in found}, found
    for key, value in found:
        assert isinstance(value, str), (key, value)
        when = datetime.datetime.fromisoformat(value)
        assert when.utcoffset() == datetime.timedelta(0), (key, value)


def test_the_users_own_fields_named_like_times_are_left_as_stored() -> None:
    doc = {"updated_at": 0, "state": {"created_at": 5}, "rows": [{"at": 1.5, "result": {"at": 2}}]}
    assert scripting.iso_times(doc) == {
        "updated_at": "1970-01-01T00:00:00+00:00", "state": {"created_at": 5},
        "rows": [{"at": "1970-01-01T00:00:01.500000+00:00", "result": {"at": 2}}]}


# -- one name for one idea -------------------------------------------------------------
@pytest.mark.parametrize("option", ["--max-orphan-age", "--max-age"])
def test_recover_takes_max_orphan_age_and_its_old_name(home: Path, option: str) -> None:
    result = cli(home, "recover", "--app", "cli_world:FLOWS", option, "0s", json_flag=True)
    assert result.exit_code == 1, result.output  # the orphan is FAILED as expired
    rows = {r["run_id"]: r for r in json.loads(result.stdout)}
    assert rows["r-orphan"]["status"] == bide.Status.FAILED
    assert "expired" in rows["r-orphan"]["error"]


def test_the_old_name_is_hidden_and_watch_uses_the_same_name() -> None:
    recover = CliRunner().invoke(main, ["recover", "--help"]).stdout
    assert "--max-orphan-age" in recover and "--max-age" not in recover
    assert "--max-orphan-age" in CliRunner().invoke(main, ["watch", "--help"]).stdout


# -- ranges ------------------------------------------------------------------------------
WATCH = ["watch", "--app", "cli_world:FLOWS", "--once"]
RECOVER = ["recover", "--app", "cli_world:FLOWS"]
OUT_OF_RANGE = [  # (argv, what the error names)
    ([*WATCH, "--lease-ttl", "-5"], "--lease-ttl"), ([*WATCH, "--max-attempts", "0"],
                                                     "--max-attempts"),
    ([*WATCH, "--workers", "0"], "--workers"), ([*WATCH, "--rescan", "0"], "--rescan"),
    ([*WATCH, "--inbox-max-bytes", "0"], "--inbox-max-bytes"),
    ([*WATCH, "--max-orphan-age", "-1h"], "--max-orphan-age"),
    ([*WATCH, "--limit", "steps=0"], "--limit"),
    (["config", "--lease-ttl", "-5"], "--lease-ttl"), (["config", "--workers", "0"], "--workers"),
    ([*RECOVER, "--max-attempts", "0"], "--max-attempts"),
    ([*RECOVER, "--max-orphan-age", "-5m"], "--max-orphan-age"),
    ([*RECOVER, "--max-age", "-5m"], "--max-age"),
    (["runs", "--limit", "0"], "--limit"), (["prune", "--keep", "0"], "--keep"),
    (["prune", "--finished-older-than", "-1d"], "--finished-older-than"),
    (["prune", "--files-older-than", "soon"], "--files-older-than"),
    (["state", "r-done", "--version", "-1"], "--version"),
    (["fork", "r-done", "--version", "-1"], "--version"),
    (["diff", "r-done", "--", "-1", "2"], "V1"),
    (["schedule", "s", "steps", "--every", "0"], "--every"),
]


@pytest.mark.parametrize("argv, names", OUT_OF_RANGE, ids=lambda v: "-".join(v[-2:])
                         if isinstance(v, list) else None)
def test_a_value_out_of_range_is_exit_2_naming_the_option(home: Path, argv: list[str],
                                                          names: str) -> None:
    before = snapshot(home)
    result = cli(home, *argv, json_flag=True)
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stderr)
    assert doc["exit_code"] == 2 and names in doc["error"], doc
    assert snapshot(home) == before


def test_copy_batch_records_is_checked_too(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["copy", str(tmp_path / "a"), str(tmp_path / "b"),
                                       "--batch-records", "0"])
    assert result.exit_code == 2 and "--batch-records" in result.stderr


# -- BIDE_HOME in every --help -------------------------------------------------------------
@pytest.mark.parametrize("name", [None, *sorted(main.commands)])
def test_every_help_says_how_bide_home_applies(name: str | None) -> None:
    result = CliRunner().invoke(main, [*([name] if name else []), "--help"])
    assert result.exit_code == 0 and "BIDE_HOME" in result.stdout, name


def test_bide_home_is_used_by_the_commands_that_say_so(home: Path) -> None:
    result = CliRunner().invoke(main, ["runs", "--json"], env={"BIDE_HOME": str(home)})
    assert result.exit_code == 0 and "r-done" in result.stdout


# -- stdout for what was done, stderr for what went wrong -------------------------------------
def test_acting_commands_print_what_they_did_on_stdout(home: Path) -> None:
    said = {
        "approve": cli(home, "approve", approval_of(home, "r-waiting")),
        "answer": cli(home, "answer", approval_of(home, "r-asking"), "3"),
        "signal": cli(home, "signal", "r-waiting", "go"),
        "submit": cli(home, "submit", "steps", "--app", "cli_world:FLOWS", "--run-id", "r-s"),
        "cancel": cli(home, "cancel", "r-pending"),
        "schedule": cli(home, "schedule", "tick", "steps", "--every", "30"),
        "prune": cli(home, "prune", "--dry-run"),
        "runs": cli(home, "runs"),
    }
    for name, result in said.items():
        assert result.exit_code == 0, (name, result.output)
        assert result.stdout.strip() and result.stderr == "", (name, result.stderr)
    assert "dropped into the inbox" in said["approve"].stdout
    assert said["submit"].stdout == "r-s\n"


def test_decisions_and_submit_answer_json_with_what_was_recorded(home: Path) -> None:
    approval = approval_of(home, "r-waiting")
    doc = json.loads(cli(home, "approve", approval, "--by", "ops", json_flag=True).stdout)
    assert (doc["approval_id"], doc["decision"], doc["by"]) == (approval, "approve", "ops")
    assert doc["run_id"] == "r-waiting" and Path(doc["file"]).parent == home / "inbox"
    question = approval_of(home, "r-asking")
    doc = json.loads(cli(home, "answer", question, "3", json_flag=True).stdout)
    assert (doc["decision"], doc["run_id"]) == (bide.Decision.ANSWER, "r-asking")
    doc = json.loads(cli(home, "signal", "r-waiting", "go", json_flag=True).stdout)
    assert (doc["run_id"], doc["signal"]) == ("r-waiting", "go") and doc["file"]
    doc = json.loads(cli(home, "submit", "steps", "--app", "cli_world:FLOWS", "--run-id", "r-j",
                         json_flag=True).stdout)
    assert doc == {"run_id": "r-j", "flow": "steps", "status": bide.Status.PENDING}


# -- --by ----------------------------------------------------------------------------------
def test_by_defaults_to_the_login_name(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "alice")  # getpass.getuser() reads LOGNAME first
    result = cli(home, "approve", approval_of(home, "r-waiting"), json_flag=True)
    doc = json.loads(result.stdout)
    assert doc["by"] == "alice"
    assert json.loads(Path(doc["file"]).read_text())["by"] == "alice"  # what the watcher reads


def test_without_a_login_name_by_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def nobody() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", nobody)
    assert scripting.who() == "unknown-user"
