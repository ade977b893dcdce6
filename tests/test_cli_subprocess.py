"""The installed `bide` in real processes: exit codes, JSON, killed workers, live writers."""

# ruff: noqa: F811 - tests take the imported fixtures `home`/`template` as parameters

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import bide
import pytest
from bide.cli import main
from cli_world import DECIDED, home, template  # noqa: F401 - fixtures
from click.testing import CliRunner

TESTS = Path(__file__).parent
BIDE = shutil.which("bide", path=str(Path(sys.executable).parent)) or "bide"


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("BIDE_")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), base.get("PYTHONPATH")]))
    return {**base, **extra}


def bide_cmd(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([BIDE, *args, "--home", str(home)], env=env(**extra),
                          capture_output=True, text=True, timeout=60)


def test_the_installed_command(home: Path, tmp_path: Path) -> None:
    done = bide_cmd(home, "runs", "--json")
    assert done.returncode == 0, done.stderr
    assert {r["status"] for r in json.loads(done.stdout)} >= {"DONE", "FAILED", "RUNNING"}
    shown = json.loads(bide_cmd(home, "show", "r-waiting", "--json").stdout)
    assert shown["waiting"]["type"] == "approval"
    lines = bide_cmd(home, "log", "r-recon", "--json").stdout.splitlines()
    assert json.loads(lines[-1])["type"] == "lease_released"
    assert bide_cmd(home, "doctor").returncode == 0
    assert bide_cmd(tmp_path / "missing", "runs").returncode == 3
    assert bide_cmd(home, "show", "r-nope").returncode == 3
    assert bide_cmd(home, "diff", "r-done").returncode == 2
    env_home = subprocess.run([BIDE, "stats", "--json"], env=env(BIDE_HOME=str(home)),
                              capture_output=True, text=True, timeout=60)
    assert json.loads(env_home.stdout)["total_runs"] == 8


KILLED_WORKER = """
import sys, bide, cli_world
e = bide.open(sys.argv[1], lease_ttl=60)
e.register(*cli_world.FLOWS)
e.start("pay", {"amount": 7}, run_id="r-killed")
"""


def test_a_killed_worker_leaves_a_call_in_doubt(home: Path) -> None:
    killed = subprocess.run([sys.executable, "-c", KILLED_WORKER, str(home)],
                            env=env(BIDE_FAULT="after_intent_prepared:1:kill"), timeout=60)
    assert killed.returncode == -9
    (row,) = [r for r in json.loads(bide_cmd(home, "runs", "--json").stdout)
              if r["run_id"] == "r-killed"]
    # the lease has 60 s to go, but its owner is a process of this host that is gone
    assert row["status"] == "RUNNING" and row["lease_live"] is False
    intents = json.loads(bide_cmd(home, "intents", "r-killed", "--json").stdout)
    assert [i["status"] for i in intents] == ["prepared"]
    doubt = json.loads(bide_cmd(home, "intents", "--unknown", "--json").stdout)
    assert {i["run_id"] for i in doubt} == {"r-killed", "r-recon"}
    recovered = bide_cmd(home, "recover", "--app", "cli_world:FLOWS", "--json")
    assert recovered.returncode == 0, recovered.stderr
    rows = {r["run_id"]: r["status"] for r in json.loads(recovered.stdout)}
    assert rows["r-killed"] == "NEEDS_RECONCILIATION"  # never a blind second charge
    assert rows[DECIDED] == "DONE"


def test_in_doubt_excludes_calls_a_live_worker_is_making(home: Path) -> None:
    gate, inside = threading.Event(), threading.Event()

    @bide.tool
    def blocking_charge(amount: int) -> int:
        inside.set()
        gate.wait(10)
        return amount

    live = bide.Flow("live_pay")

    @live.node(start=True)
    def bill(state, ctx):
        return {"r": ctx.tool(blocking_charge, 1)}

    def worker() -> None:
        with bide.open(home, lease_ttl=30) as e:
            e.register(live)
            e.start("live_pay", run_id="r-live")

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert inside.wait(10)  # the intent is durable, the call is under way
        runner = CliRunner()
        mine = runner.invoke(main, ["intents", "r-live", "--json", "--home", str(home)])
        assert [i["status"] for i in json.loads(mine.stdout)] == ["prepared"]
        doubt = runner.invoke(main, ["intents", "--unknown", "--json", "--home", str(home)])
        assert {i["run_id"] for i in json.loads(doubt.stdout)} == {"r-recon"}
    finally:
        gate.set()
        t.join(10)
    done = CliRunner().invoke(main, ["intents", "r-live", "--json", "--home", str(home)])
    assert [i["status"] for i in json.loads(done.stdout)] == ["completed"]


WRITER = """
import sys, bide, cli_world
e = bide.open(sys.argv[1], durability="fast")
e.register(*cli_world.FLOWS)
print("ready", flush=True)
for i in range(int(sys.argv[2])):
    e.start("steps", {"until": 4}, run_id=f"w-{i}")
print("done", flush=True)
"""


def test_reading_commands_work_while_another_process_writes(home: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(home), "150"], env=env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        runner = CliRunner()
        seen = []
        for _ in range(5):
            for argv in (["runs"], ["doctor"], ["stats"], ["intents", "--unknown"]):
                result = runner.invoke(main, [*argv, "--json", "--home", str(home)])
                assert result.exit_code == 0, result.output
                doc = json.loads(result.stdout)
                if argv == ["doctor"]:
                    assert doc["ok"], doc["problems"]
                if argv == ["runs"]:
                    seen.append(len(doc))
        assert writer.stdout.readline().strip() == "done"
    finally:
        writer.wait(60)
        writer.stdout.close()
    assert seen == sorted(seen)
    final = CliRunner().invoke(main, ["runs", "--json", "--home", str(home)])
    assert len(json.loads(final.stdout)) == 8 + 150


@pytest.mark.parametrize("fault", ["during_prune:1:kill", "during_compact_swap:1:kill"])
def test_a_maintenance_command_killed_midway_leaves_the_store_whole(home: Path,
                                                                    fault: str) -> None:
    before = json.loads(bide_cmd(home, "stats", "--json").stdout)["total_records"]
    command = ["prune", "--finished-older-than", "0s"] if "prune" in fault else ["compact"]
    assert bide_cmd(home, *command, BIDE_FAULT=fault).returncode == -9
    doctor = bide_cmd(home, "doctor", "--json")
    assert doctor.returncode == 0 and json.loads(doctor.stdout)["ok"]
    assert json.loads(bide_cmd(home, "stats", "--json").stdout)["total_records"] == before
    assert bide_cmd(home, "compact").returncode == 0  # and it cleans what the kill left
    assert not list(home.glob(".compact-*"))
    assert bide_cmd(home, *command).returncode == 0
