"""One config per home (issue 17, item 3): ``<home>/bide.toml``, flags over environment
over file over defaults, ``bide config`` saying where each value came from."""

from __future__ import annotations

import json
from pathlib import Path

import bide
import pytest
from bide.cli import main
from bide.engine.upkeep.home_config import load
from click.testing import CliRunner
from conftest import APPS

TOML = """\
durability = "fast"
lease_ttl = 12

[watch]
workers = 3
max_orphan_age = "2h"
"""


def config(home: Path | str, *args: str, env: dict[str, str] | None = None) -> dict:
    out = CliRunner().invoke(main, ["config", "--home", str(home), "--json", *args], env=env)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)["settings"]


def test_each_value_says_where_it_came_from(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "bide.toml").write_text(TOML)
    got = config(home, "--workers", "5", env={"BIDE_LEASE_TTL": "7"})
    assert got["durability"] == {"value": "fast", "source": "bide.toml",
                                 "where": f"{home / 'bide.toml'}:1"}
    assert got["lease_ttl"] == {"value": 7.0, "source": "env", "where": "BIDE_LEASE_TTL"}
    assert got["watch.workers"] == {"value": 5, "source": "flag", "where": "--workers"}
    assert got["watch.max_orphan_age"]["value"] == 7200.0
    assert got["watch.max_orphan_age"]["where"] == f"{home / 'bide.toml'}:6"
    assert got["watch.max_attempts"] == {"value": 5, "source": "default", "where": None}
    out = CliRunner().invoke(main, ["config", "--home", str(home), "--workers", "5"])
    rows = {line.split()[0]: line.split()[1:] for line in out.output.splitlines()[2:]}
    assert rows["durability"] == ["fast", "bide.toml", "line", "1"], out.output
    assert rows["watch.workers"] == ["5", "flag", "--workers"], out.output


@pytest.mark.parametrize(("text", "words"), [
    ("durability = \"fast\"\nlease_tt1 = 3\n", ["bide.toml:2", "unknown key 'lease_tt1'"]),
    ("[watch]\n\nworkerz = 3\n", ["bide.toml:3", "unknown key 'watch.workerz'"]),
    ("lease_ttl = -5\n", ["bide.toml:1", "lease_ttl must be above 0, not -5"]),
    ("[watch]\nmax_attempts = 0\n", ["bide.toml:2", "watch.max_attempts must be at least 1"]),
    ("durability = fast\n", ["bide.toml", "not valid TOML", "line 1"]),
])
def test_a_bad_file_is_a_clear_error_and_nothing_starts(tmp_path, monkeypatch, text, words):
    monkeypatch.syspath_prepend(str(APPS))
    home = tmp_path / "home"
    home.mkdir()
    (home / "bide.toml").write_text(text)
    for cmd in (["config"], ["watch", "--once", "--app", "watch_log_app:flows"]):
        out = CliRunner().invoke(main, [*cmd, "--home", str(home)])
        assert out.exit_code == 2, out.output
        assert all(w in out.output for w in words), out.output
    assert sorted(p.name for p in home.iterdir()) == ["bide.toml"]  # no store was made


def test_flags_out_of_range_are_refused(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(APPS))
    for flag in (["--lease-ttl", "-5"], ["--max-attempts", "0"], ["--workers", "0"],
                 ["--inbox-max-bytes", "0"]):
        out = CliRunner().invoke(main, ["watch", "--once", "--home", str(tmp_path / "h"),
                                        "--app", "watch_log_app:flows", *flag])
        assert out.exit_code == 2 and flag[0] in out.output, out.output


def test_watch_runs_with_the_homes_settings(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(APPS))
    home = tmp_path / "home"
    home.mkdir()
    (home / "bide.toml").write_text("inbox_max_bytes = 40\n" + TOML)
    with bide.open(home, durability="fast") as eng:
        (eng.doors.inbox / "big.json").write_text(json.dumps({"approval_id": "a-1",
                                                              "decision": "approve",
                                                              "reason": "x" * 40}))
    out = CliRunner().invoke(main, ["watch", "--once", "--log-json", "--home", str(home),
                                    "--app", "watch_log_app:flows"])
    assert out.exit_code == 0, out.output
    events = [json.loads(line) for line in out.output.splitlines()]
    assert events[0]["workers"] == 3  # from [watch] in bide.toml
    (rejected,) = [e for e in events if e["event"] == "file_rejected"]
    assert "larger than the 40 byte limit" in rejected["reason"]


def test_the_key_file_is_relative_to_the_config_file(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "bide.toml").write_text('approval_key_file = "hmac.key"\n')
    out = CliRunner().invoke(main, ["config", "--home", str(home)])
    assert out.exit_code == 2 and "hmac.key: no such file" in out.output, out.output
    (home / "hmac.key").write_text("s3cret\n")
    assert config(home)["approval_key_file"]["value"] == str(home / "hmac.key")


def test_a_postgresql_home_reads_the_file_it_is_given(tmp_path):
    url = "postgresql://bide@localhost/nowhere"  # bide config opens no connection
    out = CliRunner().invoke(main, ["config", "--home", url, "--json"])
    doc = json.loads(out.output)
    assert doc["file"] is None and "--config FILE" in doc["note"]
    assert doc["settings"]["durability"]["source"] == "default"
    cfg = tmp_path / "worker.toml"
    cfg.write_text(TOML)
    assert config(url, "--config", str(cfg))["lease_ttl"]["source"] == "bide.toml"
    assert config(url, env={"BIDE_CONFIG": str(cfg)})["watch.workers"]["value"] == 3
    out = CliRunner().invoke(main, ["config", "--home", url, "--config",
                                    str(tmp_path / "missing.toml")])
    assert out.exit_code == 2 and "missing.toml: no such file" in out.output


def test_load_reads_environment_strings_by_the_settings_rules(tmp_path):
    env = {"BIDE_WATCH_POLL": "yes", "BIDE_WATCH_MAX_ORPHAN_AGE": "15m",
           "BIDE_DURABILITY": "fast"}
    cfg = load(tmp_path, environ=env)
    assert (cfg["watch.poll"], cfg["watch.max_orphan_age"], cfg["durability"]) == \
        (True, 900.0, "fast")
    with pytest.raises(bide.ConfigError, match="BIDE_WATCH_WORKERS.*whole number"):
        load(tmp_path, environ={"BIDE_WATCH_WORKERS": "many"})


def test_the_defaults_are_the_watchers_own(tmp_path):
    from bide.engine.human.inbox import MAX_BYTES

    cfg = load(tmp_path / "none", environ={})
    assert cfg["watch.workers"] == bide.Watcher.DEFAULT_WORKERS
    assert cfg["inbox_max_bytes"] == MAX_BYTES and cfg.path is None


def test_run_submit_resume_and_recover_take_lease_ttl_from_the_home(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(APPS))
    home = tmp_path / "home"
    home.mkdir()
    (home / "bide.toml").write_text(TOML)  # lease_ttl = 12 (the default is 30)
    app = ["--home", str(home), "--app", "watch_log_app:flows"]
    for argv in (["run", "ok", "--run-id", "r-run"], ["submit", "ok", "--run-id", "r-sub"]):
        out = CliRunner().invoke(main, [*argv, *app])
        assert out.exit_code == 0, out.output
    assert CliRunner().invoke(main, ["resume", "r-sub", *app]).exit_code == 0
    assert CliRunner().invoke(main, ["submit", "ok", "--run-id", "r-rec", *app]).exit_code == 0
    assert CliRunner().invoke(main, ["recover", *app]).exit_code == 0
    with bide.open(home) as eng, eng.store.reader() as r:
        for run_id in ("r-run", "r-sub", "r-rec"):
            leases = [r.record(seq) for seq, kind in r.run_entries(run_id)
                      if kind == "lease_acquired"]
            # the store writes the expiry, its now() at the commit plus the lease's ttl
            assert leases and all(rec.ttl == 12 and 12 <= rec.expires_at - rec.at < 13
                                  for rec in leases), run_id
            assert eng.get(run_id).status == bide.Status.DONE
