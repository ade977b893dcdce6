"""The CLI refuses bad input before it does anything, and its JSON is strict JSON.

Issue 11, items 11 (--app names flows, never a callable to run), 12 (a bad run
id is a usage error that states the rule) and 13 (--json never prints bare
NaN/Infinity).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import bide
import pytest
from bide.cli import main
from cli_world import template, world  # noqa: F401 - template is a fixture
from click.testing import CliRunner, Result

APPS = Path(__file__).parent / "apps"


@pytest.fixture
def runs_home(tmp_path: Path, template: Path) -> Path:  # noqa: F811 - the fixture
    """A copy of cli_world's home: one run in every status."""
    return world(tmp_path, template)


@pytest.fixture
def apps(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(APPS))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import cli_input_app

    cli_input_app.CALLS.clear()
    return cli_input_app


def invoke(home: Path, *args: str) -> Result:
    # catch_exceptions: a traceback must show up as a wrong exit code, not abort the test
    return CliRunner().invoke(main, [*args, "--home", str(home)])


def strict_json(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: bare {name}")

    return json.loads(text, parse_constant=refuse)


# -- item 11: --app ---------------------------------------------------------------------
@pytest.mark.parametrize("attr, found", [
    ("effect", "the function cli_input_app.effect"),
    ("factory", "of type Factory"),
    ("Factory", "the type cli_input_app.Factory"),
    ("NUMBER", "of type int (42)"),
    ("MIXED", "a list whose item 1 is of type str ('not a flow')"),
    ("EMPTY", "an empty list"),
    ("bide", "of type module"),
])
def test_app_that_is_not_flows_is_exit_2_naming_it_and_nothing_is_called(
        runs_home: Path, apps, attr: str, found: str) -> None:
    for argv in (["resume", "r-pending"], ["submit", "steps"], ["recover"]):
        result = invoke(runs_home, *argv, "--app", f"cli_input_app:{attr}")
        assert result.exit_code == 2, (argv, result.output)
        assert f"'cli_input_app:{attr}' is {found}" in result.stderr, result.stderr
        assert "not a Flow, a list or tuple of Flows, or a LangGraph graph" in result.stderr
    assert apps.CALLS == []
    with bide.open(runs_home, create=False) as e:
        assert e.get("r-pending").status == bide.Status.PENDING


@pytest.mark.parametrize("attr", ["odd", "FLOWS"])
def test_app_names_a_flow_or_a_tuple_of_flows(runs_home: Path, apps, attr: str) -> None:
    result = invoke(runs_home, "submit", "odd", "--app", f"cli_input_app:{attr}", "--run-id", "r-o")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "r-o"


# -- item 12: run ids -------------------------------------------------------------------
BAD_IDS = ["a/b", "", "x" * 129, "a\nb", "back\\slash"]
TAKES_A_RUN_ID = [
    ["show", "{}"], ["log", "{}"], ["checkpoints", "{}"], ["state", "{}"],
    ["diff", "{}", "0", "1"], ["intents", "{}"], ["export", "{}"], ["cancel", "{}"],
    ["fork", "{}", "--version", "0"], ["fork", "r-done", "--version", "0", "--as", "{}"],
    ["resume", "{}", "--app", "cli_world:FLOWS"],
    ["submit", "steps", "--app", "cli_world:FLOWS", "--run-id", "{}"],
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=["slash", "empty", "129-chars", "newline",
                                              "backslash"])
@pytest.mark.parametrize("argv", TAKES_A_RUN_ID,
                         ids=lambda a: a[0] + ("-as" if "--as" in a else ""))
def test_a_bad_run_id_is_a_usage_error_stating_the_rule(runs_home: Path, apps, argv: list[str],
                                                        bad: str) -> None:
    with bide.open(runs_home, create=False) as e:
        before = [(r.run_id, r.status, r.state_version) for r in e.runs()]
    result = invoke(runs_home, *[bad if a == "{}" else a for a in argv])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert ("run_id must be a non-empty string of at most 128 characters" in result.stderr
            or r"may not contain '/', '\', NUL or control chars" in result.stderr), result.stderr
    with bide.open(runs_home, create=False) as e:
        assert [(r.run_id, r.status, r.state_version) for r in e.runs()] == before


# -- item 13: strict JSON ---------------------------------------------------------------
@pytest.fixture
def odd_home(tmp_path: Path, apps) -> Path:
    """Runs whose state, tool results and approval payload hold NaN and ±Infinity."""
    path = tmp_path / "odd"
    with bide.open(path) as e:
        e.register(apps.odd)
        e.start("odd", run_id="r-odd")  # waits for approval, at version 1
        e.start("odd", run_id="r-odd-2")
        e.submit("odd", {"seed": math.nan}, run_id="r-odd-pending")
        e.schedule("odd-beat", "odd", every=3600, input={"seed": math.inf})
    return path


JSON_COMMANDS = [
    ["runs"], ["show", "r-odd"], ["log", "r-odd"], ["checkpoints", "r-odd"], ["state", "r-odd"],
    ["state", "r-odd", "--key", "deep"], ["diff", "r-odd", "0", "1"], ["intents", "r-odd"],
    ["intents", "--unknown"], ["export", "r-odd"], ["stats"], ["doctor"], ["pending"],
    ["fork", "r-odd", "--version", "1", "--as", "r-forked"], ["cancel", "r-odd-2"],
    ["resume", "r-odd-pending", "--app", "cli_input_app:odd"],
    ["recover", "--app", "cli_input_app:odd"], ["prune", "--dry-run"], ["compact"],
    ["log", "r-odd", "--follow"], ["run", "odd", "--app", "cli_input_app:odd"],
    ["schedule", "odd-2", "odd", "--every", "60", "--input", '{"seed": NaN}'], ["schedules"],
    ["unschedule", "odd-beat"],
    ["config"], ["inbox"], ["prune", "--dry-run", "--files-older-than", "0"],
    ["approve", "{approval}"], ["signal", "r-odd", "go", "--data", '{"x": NaN}'],
    ["submit", "odd", "--app", "cli_input_app:odd", "--input", '{"seed": Infinity}'],
]
LINES = {"log", "run"}  # JSON lines: one object per record (run: then the outcome)


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=lambda a: "-".join(a[:1] + a[2:3]))
def test_every_json_output_is_strict_json(odd_home: Path, argv: list[str]) -> None:
    if "{approval}" in argv:
        with bide.open(odd_home, create=False) as e:
            approval = e.get("r-odd").waiting["approval_id"]
        argv = [approval if a == "{approval}" else a for a in argv]
    result = invoke(odd_home, *argv, *([] if argv[0] == "export" else ["--json"]))
    assert result.exit_code == (4 if argv[0] == "run" else 0), result.output  # run: paused
    if argv[0] in LINES:
        docs = [strict_json(line) for line in result.stdout.splitlines()]
        assert docs
    else:
        strict_json(result.stdout)


def test_every_command_with_json_is_checked_for_strict_json() -> None:
    has_json = {name for name, cmd in main.commands.items()
                if any(p.name == "as_json" for p in cmd.params)}
    checked_elsewhere = {"copy",  # two homes, no --home: tests/test_copy.py
                         "answer",  # needs a question: tests/test_cli_script.py
                         "pack"}  # no home at all: tests/test_pack.py
    assert has_json == {argv[0] for argv in JSON_COMMANDS} - {"export"} | {"export"} \
        | checked_elsewhere


def test_non_finite_floats_are_named_in_strings(odd_home: Path) -> None:
    doc = strict_json(invoke(odd_home, "state", "r-odd", "--json").stdout)
    state = doc["state"]
    assert (state["nan"], state["inf"], state["ninf"]) == ("NaN", "Infinity", "-Infinity")
    assert state["deep"] == {"xs": ["NaN", 1.5, "-Infinity"]}
    assert state["reading"] == {"sample": "s-1", "ratio": "NaN", "ceiling": "Infinity"}
    rows = strict_json(invoke(odd_home, "pending", "--json").stdout)
    assert {r["run_id"] for r in rows} == {"r-odd", "r-odd-2"}
