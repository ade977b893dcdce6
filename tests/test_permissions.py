"""A home is its owner's only, whatever the umask (issue 11, item 18)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import bide
import pytest
from bide.cli import main
from bide.engine.human.inbox import drop_decision
from bide.engine.ops.watcher import Watcher
from bide.engine.upkeep import compaction
from click.testing import CliRunner

NOBODY = 65534


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def ask_flow() -> bide.Flow:
    flow = bide.Flow("wire")
    flow.node(lambda s, ctx: {"sent": ctx.approve("wire money", {"to": "acct-1", "eur": 9000})},
              name="send", start=True)
    return flow


def paused(home: Path, **options: object) -> tuple[bide.Engine, str]:
    e = bide.open(home, durability="fast", **options)
    e.register(ask_flow())
    return e, e.start("wire", run_id="r").waiting["approval_id"]


def test_a_new_home_is_owner_only_under_umask_000(tmp_path: Path, umask_000: None) -> None:
    home = tmp_path / "parent" / "home"
    e, aid = paused(home)
    with e:
        e.store._grow(e.store.env.info()["map_size"])  # growing the map creates grow.lock
        Watcher(e, log=lambda _line: None).once()  # creates inbox/processed, rejected, .work
    for d in (home, home / "store", home / "inbox", home / "requests",
              home / "inbox" / "processed", home / "inbox" / "rejected", home / "inbox" / ".work"):
        assert mode(d) == 0o700, d
    for f in ("data.mdb", "lock.mdb", "grow.lock"):
        assert mode(home / "store" / f) == 0o600, f
    assert mode(home / "requests" / f"{aid}.json") == 0o600


def test_compaction_keeps_the_store_owner_only(tmp_path: Path, umask_000: None) -> None:
    home = tmp_path / "home"
    e, _ = paused(home)
    e.close()
    compaction.compact(home)
    assert mode(home / "store" / "data.mdb") == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_decision_file_of_another_user_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    e, aid = paused(home)
    with e:
        path = drop_decision(home, aid, "approve", by="mallory")
        os.chown(path, NOBODY, NOBODY)
        (result,) = Watcher(e, log=lambda _line: None).once()["files"]
        assert not result.accepted
        assert f"owned by uid {NOBODY}, not by the home's owner" in result.reason
        assert e.get("r").status == "WAITING_APPROVAL"
        assert (home / "inbox" / "rejected" / path.name).exists()  # moved aside, not deleted


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_signed_decision_of_another_user_is_accepted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    e, aid = paused(home, approval_key=b"k")
    with e:
        path = drop_decision(home, aid, "approve", by="ops-bot", key=b"k")
        os.chown(path, NOBODY, NOBODY)
        (result,) = Watcher(e, log=lambda _line: None).once()["files"]
        assert result.accepted, result.reason
        assert e.get("r").status == "DONE"


def test_the_home_owner_s_unsigned_file_is_accepted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    e, aid = paused(home)
    with e:
        drop_decision(home, aid, "approve", by="me")
        (result,) = Watcher(e, log=lambda _line: None).once()["files"]
        assert result.accepted and e.get("r").status == "DONE"


def test_doctor_warns_when_others_can_write_the_home_or_inbox(tmp_path: Path) -> None:
    home = tmp_path / "home"
    paused(home)[0].close()
    doctor = ["doctor", "--home", str(home), "--json"]
    clean = CliRunner().invoke(main, doctor)
    assert clean.exit_code == 0 and json.loads(clean.stdout)["warnings"] == []
    os.chmod(home, 0o777)
    os.chmod(home / "inbox", 0o770)
    os.chmod(home / "requests", 0o705)
    result = CliRunner().invoke(main, doctor)
    assert result.exit_code == 0, result.output  # a warning, the store itself is fine
    warnings = json.loads(result.stdout)["warnings"]
    assert len(warnings) == 3
    assert "the home" in warnings[0] and "its group and anyone" in warnings[0]
    assert "inbox/" in warnings[1] and "its group" in warnings[1]
    assert "requests/" in warnings[2] and "readable by anyone" in warnings[2]
    human = CliRunner().invoke(main, ["doctor", "--home", str(home)])
    assert human.stderr.count("warning: ") == 3 and "chmod 700" in human.stderr
    assert "warning: " not in human.stdout  # warnings on stderr, the report on stdout
