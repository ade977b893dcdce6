"""A read-only home (a mounted backup, a copied device home) can be inspected.

Reading commands work; writing ones fail with ``ReadOnlyHome`` (exit 1) and
change nothing. Root ignores file modes, so as root the home sits on a tmpfs
remounted read-only; otherwise its files are made read-only with chmod.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import bide
import pytest
from bide.cli import main
from cli_world import FLOWS, template, world  # noqa: F401  (template is a fixture)
from click.testing import CliRunner, Result

READ_COMMANDS = [
    ["runs"], ["show", "r-done"], ["log", "r-done"], ["checkpoints", "r-done"],
    ["state", "r-done"], ["diff", "r-done", "0", "1"], ["intents", "r-recon"],
    ["export", "r-done"], ["stats"], ["doctor"], ["pending"],
]
WRITE_COMMANDS = [
    ["cancel", "r-waiting"], ["doctor", "--rebuild"], ["prune", "--keep", "1"], ["compact"],
    ["fork", "r-done", "--version", "1"], ["resume", "r-pending", "--app", "cli_world:FLOWS"],
    ["recover", "--app", "cli_world:FLOWS"],
]
# These write files into the inbox rather than the store: the OS refuses, bide says where.
INBOX_COMMANDS = [
    ["approve", "{approval}", "--decision", "approve"],
    ["watch", "--once", "--app", "cli_world:FLOWS"],
]


def _make_readonly(mnt: Path) -> None:
    """Remount the tmpfs at ``mnt`` read-only (root), or drop every write bit (others)."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, timeout=30)
        return
    for p in [mnt, *mnt.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.fixture
def ro_home(tmp_path: Path, template: Path) -> Iterator[Path]:  # noqa: F811
    """The CLI world (runs in every status) on a read-only file system."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = False
    if os.geteuid() == 0:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            pytest.skip(f"running as root and cannot mount a tmpfs to make read-only "
                        f"(root ignores file modes): {done.stderr.strip()}")
        mounted = True
    try:
        shutil.copytree(world(tmp_path / "src", template), mnt / "home")
        _make_readonly(mnt)
        yield mnt / "home"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)
        else:
            for p in [mnt, *mnt.rglob("*")]:
                p.chmod(p.stat().st_mode | stat.S_IWUSR)


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--home", str(home)], catch_exceptions=False)


def snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=lambda a: " ".join(a))
def test_reading_commands_work_on_a_read_only_home(ro_home: Path, argv: list[str]) -> None:
    before = snapshot(ro_home)
    result = run(ro_home, *argv, "--json")
    assert result.exit_code == 0, result.output
    for line in result.stdout.splitlines() if argv[0] == "log" else [result.stdout]:
        json.loads(line)  # `log --json` prints one document per line
    assert snapshot(ro_home) == before


@pytest.mark.parametrize("argv", WRITE_COMMANDS, ids=lambda a: " ".join(a))
def test_writing_commands_fail_clearly_on_a_read_only_home(ro_home: Path,
                                                           argv: list[str]) -> None:
    before = snapshot(ro_home)
    result = run(ro_home, *argv)
    assert result.exit_code == 1, result.output
    assert "is read-only" in result.stderr and "reading works" in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert snapshot(ro_home) == before


@pytest.mark.parametrize("argv", INBOX_COMMANDS, ids=lambda a: a[0])
def test_inbox_commands_fail_clearly_on_a_read_only_home(ro_home: Path, argv: list[str]) -> None:
    with bide.open(ro_home) as engine:
        approval = engine.get("r-waiting").waiting["approval_id"]
    before = snapshot(ro_home)
    result = run(ro_home, *[a.format(approval=approval) for a in argv])
    assert result.exit_code == 1, result.output
    assert "cannot write" in result.stderr and "Read-only file system" in result.stderr \
        or "Permission denied" in result.stderr, result.stderr
    assert snapshot(ro_home) == before


def test_an_engine_reads_a_read_only_home_and_refuses_writes(ro_home: Path) -> None:
    before = snapshot(ro_home)
    with bide.open(ro_home) as engine:
        engine.register(*FLOWS)
        assert engine.get("r-done").status == bide.Status.DONE
        assert engine.state("r-done")["n"] == 6
        assert {r.run_id for r in engine.runs()} >= {"r-done", "r-waiting", "r-orphan"}
        with pytest.raises(bide.ReadOnlyHome, match="read-only"):
            engine.start("steps", run_id="r-new")
        with pytest.raises(bide.ReadOnlyHome):
            engine.resume("r-pending")
    assert snapshot(ro_home) == before
