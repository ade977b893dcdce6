"""Every code block of the README runs, so what a newcomer reads cannot rot.

- ``python`` blocks are executed, each in a fresh directory;
- ``console`` blocks are run in order, in one directory where ``bide demo --home .bide``
  ran first: each ``$`` line through bash, its exit code 0, and the lines shown under it
  found, in order, in what it printed (``...`` stands for any text, runs of spaces for any
  column width);
- ``json`` blocks are decision files: strict JSON the inbox accepts the shape of;
- ``toml`` blocks are ``bide.toml`` files that load with the values they show;
- the one ``bash`` block is the two commands, and ``.ci/run`` runs exactly those.

A block of any other language fails here, so every block stays tested.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import bide
import pytest
from bide.engine.human.inbox import check_fields, parse
from bide.engine.upkeep.home_config import HomeConfig
from extras import need

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, re.S | re.M)
TESTED = {"python", "console", "json", "toml", "bash"}
TWO_COMMANDS = ['pip install -e ".[test]" && bide demo', "python -m pytest -q -n 2"]


def blocks(lang: str) -> list[str]:
    return [body for kind, body in BLOCKS if kind == lang]


def test_every_block_is_of_a_tested_kind() -> None:
    kinds = [kind for kind, _ in BLOCKS]
    assert set(kinds) <= TESTED, f"untested code blocks: {sorted(set(kinds) - TESTED)}"
    assert len(blocks("python")) >= 4 and len(blocks("console")) >= 1


def test_the_readme_is_short_and_speaks_to_users() -> None:
    assert len(README.encode()) < 32_000, "the README is for a newcomer: about 25 KB"
    # internal issue numbers mean nothing to a user
    assert not re.search(r"\b[Ii]ssues? \d|\(\d+\.\d+\)", README)


@pytest.mark.parametrize("block", blocks("python"),
                         ids=[f"python{i}" for i in range(len(blocks("python")))])
def test_python_block_runs(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if "langgraph" in block:
        need("langgraph.graph")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec", dont_inherit=True), {"__name__": "readme"})


@pytest.mark.parametrize("block", blocks("json"),
                         ids=[f"json{i}" for i in range(len(blocks("json")))])
def test_json_block_is_a_decision_file_the_inbox_takes(block: str) -> None:
    body = check_fields(parse(block.encode()))
    assert body["approval_id"] and body["decision"] in {d.value for d in bide.Decision} | {
        "answer"}


@pytest.mark.parametrize("block", blocks("toml"),
                         ids=[f"toml{i}" for i in range(len(blocks("toml")))])
def test_toml_block_is_a_config_that_loads(block: str, tmp_path: Path) -> None:
    home = tmp_path / ".bide"
    bide.open(home).close()
    (home / "bide.toml").write_text(block)
    config = HomeConfig.load(home, environ={})
    for key, value in re.findall(r'^(\w+) = ("?[\w.]+"?)', block, re.M):
        key = key if key in config.values else f"watch.{key}"
        assert config.values[key].source.startswith("bide.toml"), key
        if not value.startswith('"'):
            assert config[key] == type(config[key])(value), key


def test_the_bash_block_is_the_two_commands_ci_runs() -> None:
    (block,) = blocks("bash")
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == TWO_COMMANDS
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    ran = [line for line in ci if line and not line.startswith("#")]
    for command in TWO_COMMANDS:
        assert command in ran, f".ci/run does not run the README's {command!r}"
    # nothing else is installed on top: CI proves what a newcomer gets
    installs = [line for line in ran if "pip install" in line or "pip3 install" in line]
    assert installs == [TWO_COMMANDS[0]], installs


def _expected(shown: str) -> re.Pattern[str]:
    parts = [re.sub(r"(\\ )+", " +", re.escape(p)) for p in shown.rstrip().split("...")]
    return re.compile(".*".join(parts))


def _steps() -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for block in blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif line.strip():
                steps[-1][1].append(line)
    return steps


def test_console_blocks_run_as_shown(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "COLUMNS": "200"}
    env.pop("BIDE_HOME", None)
    demo = subprocess.run([sys.executable, "-m", "bide.cli", "demo", "--home", ".bide"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    for command, shown in _steps():
        if command.startswith("export "):
            name, _, value = command[len("export "):].partition("=")
            env[name] = shlex.split(value)[0]
            continue
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"$ {command}\n{done.stdout}{done.stderr}"
        printed = (done.stdout + done.stderr).splitlines()
        at = 0
        for line in shown:
            pattern = _expected(line)
            while at < len(printed) and not pattern.fullmatch(printed[at].rstrip()):
                at += 1
            assert at < len(printed), (f"$ {command}: no line like {line!r} (in order) in:\n"
                                       + "\n".join(printed))
            at += 1
