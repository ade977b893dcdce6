"""Signed decisions are required by the home, not by one watcher (issue 11, item 5)."""

# ruff: noqa: F811 - tests take the imported fixtures `home`/`template` as parameters

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import bide
import pytest
from bide.cli import main
from bide.engine.human.inbox import drop_decision
from bide.engine.human.signing import MARKER, key_id
from bide.engine.ops.watcher import Watcher
from cli_world import home, template  # noqa: F401 - fixtures
from click.testing import CliRunner

TESTS = Path(__file__).parent
BIDE = shutil.which("bide", path=str(Path(sys.executable).parent)) or "bide"


def bide_cmd(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return subprocess.run([BIDE, *args, "--home", str(home)], env=env, capture_output=True,
                          text=True, timeout=60)


def waiting(home: Path) -> tuple[str, str]:
    with bide.open(home, create=False) as e:
        run = e.get("r-waiting")
        return str(run.status), (run.waiting or {}).get("approval_id", "")


def rejected_reasons(home: Path) -> list[str]:
    return sorted(json.loads(p.read_text())["error"]
                  for p in (home / "inbox" / "rejected").glob("*.error.json"))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "approval.key"
    path.write_bytes(b"s3cret-key\n")
    return path


def test_a_second_watcher_without_the_key_refuses_unsigned_decisions(home: Path,
                                                                     key_file: Path) -> None:
    keyed = bide_cmd(home, "watch", "--once", "--app", "cli_world:FLOWS",
                     "--approval-key-file", str(key_file))
    assert keyed.returncode == 0, keyed.stderr
    marker = json.loads((home / MARKER).read_text())
    assert marker["key_id"] == key_id(b"s3cret-key") and "s3cret" not in json.dumps(marker)
    _, aid = waiting(home)
    drop_decision(home, aid, "approve", by="mallory")  # unsigned
    keyless = bide_cmd(home, "watch", "--once", "--app", "cli_world:FLOWS")
    assert keyless.returncode == 0, keyless.stderr
    assert "requires signed decisions and this watcher has no key" in keyless.stdout
    assert rejected_reasons(home) == ["this home requires signed decisions and the file has "
                                      "no 'sig'"]
    assert waiting(home)[0] == "WAITING_APPROVAL"
    # a signed file cannot be checked by a process without the key: refused, saying so
    drop_decision(home, aid, "approve", by="alice", key=b"s3cret-key")
    assert bide_cmd(home, "watch", "--once", "--app", "cli_world:FLOWS").returncode == 0
    assert any("no key to check the signature" in r for r in rejected_reasons(home))
    assert waiting(home)[0] == "WAITING_APPROVAL"


def test_approve_signs_with_the_key_and_refuses_without_it(home: Path, key_file: Path,
                                                           tmp_path: Path) -> None:
    with bide.open(home, approval_key=b"s3cret-key"):
        pass  # a writing open with a key marks the home
    _, aid = waiting(home)
    runner = CliRunner()
    missing = runner.invoke(main, ["approve", aid, "--home", str(home)])
    assert missing.exit_code == 2 and "this process has no key" in missing.stderr
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"other")
    bad = runner.invoke(main, ["approve", aid, "--home", str(home), "--key-file", str(wrong)])
    assert bad.exit_code == 2 and "is not the home's" in bad.stderr
    assert not [p for p in (home / "inbox").iterdir() if p.is_file()]
    good = runner.invoke(main, ["approve", aid, "--home", str(home), "--key-file",
                                str(key_file)])
    assert good.exit_code == 0, good.stderr
    with bide.open(home, approval_key=b"s3cret-key") as e:
        e.register(*__import__("cli_world").FLOWS)
        (accepted,) = [f for f in Watcher(e, log=lambda _l: None).once()["files"]]
        assert accepted.accepted, accepted.reason
        assert e.get("r-waiting").status == "DONE"


def test_a_watcher_with_another_key_does_not_start(home: Path, key_file: Path,
                                                   tmp_path: Path) -> None:
    with bide.open(home, approval_key=b"s3cret-key"):
        pass
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"other")
    result = bide_cmd(home, "watch", "--once", "--app", "cli_world:FLOWS", "--key-file",
                      str(wrong))
    assert result.returncode == 1 and "is not the home's" in result.stderr
    assert json.loads((home / MARKER).read_text())["key_id"] == key_id(b"s3cret-key")


def _paused_under_key(tmp_path: Path) -> tuple[Path, bide.Flow, str]:
    """A home marked by key "k", with run "r" waiting for approval: (home, flow, approval id)."""
    home = tmp_path / "home"
    flow = bide.Flow("ask")
    flow.node(lambda s, ctx: {"ok": ctx.approve("wire money")}, name="n", start=True)
    with bide.open(home, durability="fast", approval_key="k") as e:
        e.register(flow)
        aid = e.start("ask", run_id="r").waiting["approval_id"]
    return home, flow, aid


def test_a_library_engine_without_the_key_refuses_too(tmp_path: Path) -> None:
    home, flow, aid = _paused_under_key(tmp_path)
    with bide.open(home, durability="fast") as e:  # no key: the home still requires one
        e.register(flow)
        drop_decision(home, aid, "approve")
        (result,) = Watcher(e, log=lambda _l: None).once()["files"]
        assert not result.accepted and "no 'sig'" in result.reason
        assert e.get("r").status == "WAITING_APPROVAL"


def test_a_damaged_marker_still_requires_signatures(tmp_path: Path) -> None:
    home, flow, aid = _paused_under_key(tmp_path)
    (home / MARKER).write_text("{not json")
    with bide.open(home, durability="fast") as e:
        e.register(flow)
        drop_decision(home, aid, "approve")
        (result,) = Watcher(e, log=lambda _l: None).once()["files"]
        assert not result.accepted and e.get("r").status == "WAITING_APPROVAL"
