"""``bide bench commit``: one durable commit against the floors of other commit paths."""

from __future__ import annotations

from bide.bench import commit_path
from bide.cli import main
from click.testing import CliRunner


def test_the_commit_bench_measures_every_design_and_judges_the_device_target(tmp_path):
    out = commit_path.run(quick=True, home=tmp_path)
    designs = [r["design"] for r in out["rows"]]
    assert designs[0].startswith("bide store") and len(designs) == 4
    assert all(r["ms"] > 0 and r["device_bytes"] >= 0 for r in out["rows"])
    t = out["target"]
    if out["skipped"] is None:
        assert t["met"] == (t["measured"] <= commit_path.TARGET_DEVICE * (4096 + 300))
    text = commit_path.render(out)
    assert "device bytes per durable commit" in text
    assert ("bound:" in text) == (t["met"] is False)
    assert list(tmp_path.iterdir()) == []  # its stores are removed


def test_bide_bench_commit_runs_from_the_cli(tmp_path):
    result = CliRunner().invoke(main, ["bench", "commit", "--quick", "--home", str(tmp_path),
                                       "--json", str(tmp_path / "out.json")])
    assert result.exit_code == 0, result.output
    assert "write-ahead file" in result.output and (tmp_path / "out.json").exists()
