"""One file to ship (engine/upkeep/pack.py, ``bide pack``): bide, an app and their compiled
dependencies in one zipapp that runs where there is Python and nothing else.

The file is run by the base interpreter (not this venv's: it has no bide, no msgspec,
no lmdb), in an environment with nothing of ours (``env -i``: no PYTHONPATH, an
empty HOME, pip told there is no index), and — when the kernel lets us make one
(``unshare -rn``, root or user namespaces) — in a network namespace with no
network at all. What it imports is checked to come from the file's own unpacked copy.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import bide
import pytest
from base_python import base_python
from bide.engine.upkeep.pack import _entry_module, interpreter_tag
from extras import need

APPS = Path(__file__).parent / "apps"
need("shiv")
need("packaging")


def offline(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """A command prefix and an environment with no network, no index, nothing of ours."""
    home = tmp / "device-home"
    home.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/",
           "http_proxy": "http://127.0.0.1:9/", "https_proxy": "http://127.0.0.1:9/"}
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True,
                                  timeout=10).returncode == 0:
        return [unshare, "-rn", base_python()], env
    return [base_python()], env


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pack")
    report = bide.pack(tmp / "agent.pyz", sources=[APPS / "follow_app.py",
                                                   APPS / "pack_probe.py"])
    return tmp, report


def device(packed, *args: str, extra: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    tmp, report = packed
    prefix, env = offline(tmp)
    return subprocess.run([*prefix, str(report.path), *args], env={**env, **(extra or {})},
                          capture_output=True, text=True, timeout=timeout, cwd=tmp)


def test_the_base_interpreter_has_none_of_ours(tmp_path):
    prefix, env = offline(tmp_path)
    out = subprocess.run([*prefix, "-c", "import bide"], env=env, capture_output=True,
                         text=True, timeout=30, cwd=tmp_path)
    assert out.returncode != 0 and "No module named 'bide'" in out.stderr


def test_the_file_holds_bide_its_dependencies_and_the_app(packed):
    _, report = packed
    names = {d.split()[0].lower() for d in report.distributions}
    assert {"bide", "msgspec", "lmdb", "watchfiles", "click", "cronsim"} <= names
    assert report.python == interpreter_tag()
    out = device(packed, extra={"SHIV_ENTRY_POINT": "pack_probe:main"})
    assert out.returncode == 0, out.stderr
    shiv_root = Path(offline(packed[0])[1]["HOME"]) / ".shiv"
    for name, where in json.loads(out.stdout).items():
        assert Path(where).is_relative_to(shiv_root), (name, where)


def test_bide_demo_runs_from_the_file_offline(packed):
    out = device(packed, "demo", "--home", str(packed[0] / "demo-home"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nothing ran twice" in out.stdout
    assert "run status: DONE" in out.stdout


def test_bide_watch_serves_the_packed_app_offline(packed):
    home = str(packed[0] / "watch-home")
    app = "follow_app:flows"
    submitted = device(packed, "submit", "steps", "--app", app, "--home", home,
                       "--run-id", "r-packed", "--input", '{"topic": "offline"}')
    assert submitted.returncode == 0, submitted.stderr
    watched = device(packed, "watch", "--app", app, "--home", home, "--once")
    assert watched.returncode == 0, watched.stderr
    shown = device(packed, "show", "r-packed", "--home", home, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == bide.Status.DONE


def test_a_file_refuses_an_interpreter_it_was_not_packed_for():
    scope: dict[str, object] = {}
    exec(_entry_module("cpython-2.7-nowhere-z80"), scope)  # noqa: S102 - our own template
    with pytest.raises(SystemExit) as stopped:
        scope["main"]()  # type: ignore[operator]
    assert "packed for cpython-2.7-nowhere-z80" in str(stopped.value)
    assert interpreter_tag() in str(stopped.value)


def test_bad_input_is_refused_and_writes_nothing(tmp_path):
    out = tmp_path / "x.pyz"
    with pytest.raises(bide.PackError, match="'no-such-dist' is not installed"):
        bide.pack(out, distributions=["no-such-dist"])
    with pytest.raises(bide.PackError, match="does not exist"):
        bide.pack(out, sources=[tmp_path / "missing.py"])
    with pytest.raises(bide.PackError, match="not a distribution name"):
        bide.pack(out, distributions=["no such!"])
    assert not out.exists()


def test_a_distribution_with_extras_brings_what_they_need():
    from bide.engine.upkeep.pack import closure

    need("psycopg")
    names = {d.metadata["Name"].lower() for d in closure(["psycopg[binary]"])}
    assert {"psycopg", "psycopg-binary"} <= names


def test_bide_pack_prints_what_it_wrote_as_strict_json(tmp_path):
    from bide.cli import main
    from click.testing import CliRunner

    out = tmp_path / "a.pyz"
    result = CliRunner().invoke(main, ["pack", str(out), "--src", str(APPS / "follow_app.py"),
                                       "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(c))
    assert doc["path"] == str(out) and doc["size"] == out.stat().st_size > 0
    assert doc["sources"] == [str(APPS / "follow_app.py")]
    bad = CliRunner().invoke(main, ["pack", str(tmp_path / "b.pyz"), "--with", "no-such-dist"])
    assert bad.exit_code == 2 and "'no-such-dist' is not installed" in bad.stderr
