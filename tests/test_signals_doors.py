"""Signals through the doors people use (issue 16.2): inbox signal files (same file rules
and signing as decisions) and ``bide signal`` (a file on a directory home, the database
on a PostgreSQL home)."""

from __future__ import annotations

import json
import sys

import bide
import pytest
from bide.cli import main
from bide.engine.human.inbox import Inbox, sign
from bide.engine.human.signal_files import drop_signal
from click.testing import CliRunner
from conftest import APPS
from extras import need

sys.path.insert(0, str(APPS))
import signal_app  # noqa: E402

EXIT_BAD_STATE, EXIT_USAGE = 1, 2


def process(eng: bide.Engine) -> dict[str, tuple[bool, str]]:
    return {r.name: (r.accepted, r.reason) for r in Inbox(eng).process()}


def put(eng: bide.Engine, name: str, body: object) -> str:
    (eng.doors.inbox / f".{name}").write_text(json.dumps(body))
    (eng.doors.inbox / f".{name}").rename(eng.doors.inbox / name)
    return name


@pytest.fixture(params=["lmdb", "postgres"])
def eng(request, home):
    if request.param == "postgres":
        need("psycopg")
        e = bide.open(request.getfixturevalue("pg_url"), local=home, durability="fast")
    else:
        e = bide.open(home, durability="fast")
    with e:
        e.register(signal_app.flow)
        yield e


def test_signal_files_are_recorded_in_order_and_bad_ones_rejected(eng):
    eng.start("courier", run_id="r-1")
    a = drop_signal(eng.doors.inbox, "r-1", "parcel", {"n": 1}, by="ann").name
    b = put(eng, "z-b.json", {"signal": "parcel", "run_id": "r-1", "data": "two"})
    got = process(eng)
    assert got == {a: (True, "recorded signal 'parcel'"), b: (True, "recorded signal 'parcel'")}
    bad = {put(eng, "x1.json", {"signal": "", "run_id": "r-1"}):
           "field 'signal' is required and must be a non-empty string",
           put(eng, "x2.json", {"signal": "parcel", "run_id": "r-1", "value": 1}):
           "unknown field(s) in a signal file: value",
           put(eng, "x3.json", {"signal": "parcel", "run_id": "nope"}): "no run with id 'nope'"}
    got = process(eng)
    assert {n: why for n, (ok, why) in got.items() if not ok} == bad
    assert json.loads((eng.doors.inbox / "rejected" / "x3.json.error.json").read_text())[
        "error"] == "no run with id 'nope'"
    run = eng.resume("r-1")
    assert run.status == bide.Status.DONE and run.state["shipped"] == "{'n': 1}+two"
    late = put(eng, "late.json", {"signal": "parcel", "run_id": "r-1"})
    accepted, why = process(eng)[late]
    assert not accepted and "the run is DONE" in why


def test_a_signal_file_taken_twice_is_recorded_once(eng):
    """A watcher that died after recording a file, before moving it, leaves it in .work/:
    the next one finds it already recorded (its name and content digest)."""
    eng.submit("courier", run_id="r-1")
    box = Inbox(eng)
    name = drop_signal(eng.doors.inbox, "r-1", "parcel", "once").name
    (eng.doors.inbox / name).rename(eng.doors.inbox / ".work" / name)
    box._record_all([box._check(name)])  # recorded; the file moved
    (eng.doors.inbox / "processed" / name).rename(eng.doors.inbox / ".work" / name)
    assert process(eng) == {name: (True, "duplicate of a recorded signal")}
    eng.signal("r-1", "parcel", "second")
    assert eng.resume("r-1").state["shipped"] == "once+second"


def test_a_signed_home_requires_signed_signal_files_covering_name_run_and_data(home):
    key = b"k3y"
    with bide.open(home, durability="fast", approval_key=key) as eng:
        eng.register(signal_app.flow)
        eng.start("courier", run_id="r-1")
        body = {"signal": "parcel", "run_id": "r-1", "data": 1}
        unsigned = put(eng, "a-unsigned.json", body)
        forged = put(eng, "b-forged.json", dict(body, data=9, sig=sign(body, key)))
        renamed = put(eng, "c-renamed.json", dict(body, signal="other", sig=sign(body, key)))
        signed = put(eng, "d-signed.json", dict(body, sig=sign(body, key)))
        got = process(eng)
        assert got[unsigned] == (False, "this home requires signed decisions and the file "
                                        "has no 'sig'")
        assert got[forged] == got[renamed] == (False, "bad signature")
        assert got[signed] == (True, "recorded signal 'parcel'")
        dropped = drop_signal(eng.doors.inbox, "r-1", "parcel", 2, key=key).name
        assert process(eng) == {dropped: (True, "recorded signal 'parcel'")}
        assert eng.resume("r-1").state["shipped"] == "1+2"


# -- the CLI ----------------------------------------------------------------------------
def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stderr + result.stdout


def test_bide_signal_drops_a_checked_file_on_a_directory_home(home):
    with bide.open(home, durability="fast") as eng:
        eng.register(signal_app.flow)
        eng.start("courier", run_id="r-1")
    code, out = cli("signal", "nope", "parcel", "--home", str(home))
    assert code != 0 and "no run with id 'nope'" in out
    code, out = cli("signal", "r-1", "parcel", "--data", "{bad", "--home", str(home))
    assert code == EXIT_USAGE and "not JSON" in out
    assert not [p for p in (home / "inbox").iterdir() if p.is_file()]  # nothing written
    code, out = cli("signal", "r-1", "parcel", "--data", '{"kg": 2}', "--by", "ann",
                    "--home", str(home))
    assert code == 0 and "dropped into the inbox" in out, out
    (name,) = [p.name for p in (home / "inbox").iterdir() if p.is_file()]
    assert json.loads((home / "inbox" / name).read_text()) == {
        "signal": "parcel", "run_id": "r-1", "data": {"kg": 2}, "by": "ann"}
    code, out = cli("signal", "r-1", "parcel", "--home", str(home))
    assert code == 0
    with bide.open(home, durability="fast") as eng:
        eng.register(signal_app.flow)
        assert all(ok for ok, _ in process(eng).values())
        run = eng.resume("r-1")
        assert run.status == bide.Status.DONE and run.state["shipped"] == "{'kg': 2}+None"
    code, out = cli("signal", "r-1", "parcel", "--home", str(home))
    assert code == EXIT_BAD_STATE and "the run is DONE" in out


def test_bide_signal_records_in_the_database_on_a_postgresql_home(pg_url, home):
    need("psycopg")
    with bide.open(pg_url, local=home, durability="fast") as eng:
        eng.register(signal_app.flow)
        eng.start("courier", run_id="r-1")
    for data in ('"a"', '"b"'):
        code, out = cli("signal", "r-1", "parcel", "--data", data, "--home", pg_url)
        assert code == 0 and "recorded for run r-1" in out, out
    with bide.open(pg_url, local=home, durability="fast") as eng:
        eng.register(signal_app.flow)
        assert eng.resume("r-1").state["shipped"] == "a+b"


def test_bide_signal_signs_for_a_home_that_requires_signatures(home, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_bytes(b"k3y\n")
    with bide.open(home, durability="fast", approval_key=b"k3y") as eng:
        eng.register(signal_app.flow)
        eng.start("courier", run_id="r-1")
    code, out = cli("signal", "r-1", "parcel", "--home", str(home))
    assert code == EXIT_USAGE and "requires signed decisions" in out
    code, out = cli("signal", "r-1", "parcel", "--data", "1", "--key-file", str(key_file),
                    "--home", str(home))
    assert code == 0, out
    with bide.open(home, durability="fast", approval_key=b"k3y") as eng:
        eng.register(signal_app.flow)
        (result,) = Inbox(eng).process()
        assert result.accepted, result.reason


def test_pending_runs_show_and_log_say_what_a_run_waits_for(home):
    with bide.open(home, durability="fast") as eng:
        eng.register(signal_app.flow, signal_app.patient)
        eng.start("patient", {"timeout": 600}, run_id="p-1")
        eng.start("courier", run_id="c-1")
        eng.signal("c-1", "parcel", {"kg": 2}, by="ann")
        eng.resume("c-1")
        rows = {r["run_id"]: r for r in eng.pending()}
    assert rows["p-1"]["kind"] == "signal" and rows["p-1"]["signal"] == "ping"
    assert rows["p-1"]["until"] == rows["p-1"]["expires_at"] > rows["p-1"]["requested_at"]
    assert rows["c-1"]["until"] is None and rows["c-1"]["approval_id"] is None
    code, out = cli("pending", "--home", str(home))
    assert code == 0 and "signal ping" in out and "in 9m" in out and "never" in out, out
    code, out = cli("runs", "--home", str(home))
    assert code == 0 and "signal 'ping' (wait) until 20" in out, out
    assert "signal 'parcel' (listen)" in out
    code, out = cli("show", "p-1", "--home", str(home))
    assert code == 0 and "signal in node wait: 'ping' until 20" in out and "(in 9m" in out, out
    code, out = cli("log", "c-1", "--home", str(home))
    assert code == 0, out
    assert "'parcel' sent by ann: {'kg': 2}" in out or "'parcel' sent by ann: {\"kg\": 2}" in out
    assert "'parcel' taken by 0:listen:0#0: the signal at #" in out
    assert "'parcel' awaited by 0:listen:0#1" in out
