"""``bide bench serve`` (issue 18, item 5): its rows, measured tiny."""

from __future__ import annotations

import pytest
from extras import need

need("starlette")
need("uvicorn")

from bide.bench import serve as serving  # noqa: E402
from bide.bench.command import bench  # noqa: E402
from click.testing import CliRunner  # noqa: E402


def test_reads_and_decisions_are_measured_on_both_doors(tmp_path):
    reads = serving.reads(tmp_path / "reads", seconds=0.2)
    assert reads["http_rps"] > 0 and reads["in_process_rps"] > 0
    assert reads["http_share"] == pytest.approx(reads["http_rps"] / reads["in_process_rps"])
    decided = serving.decisions(tmp_path / "decisions", each=2)
    assert decided["each"] == 2
    for door in ("http", "file"):
        assert 0 < decided[f"{door}_p50_ms"] <= decided[f"{door}_max_ms"]
    text = serving.render({"reads": reads, "decisions": decided})
    assert "POST /decisions" in text and "inbox file" in text and "GET /runs/{id}" in text


@pytest.mark.slow
def test_bench_serve_quick_prints_and_writes_its_rows(tmp_path):
    out = tmp_path / "serve.json"
    result = CliRunner().invoke(bench, ["serve", "--quick", "--json", str(out),
                                        "--home", str(tmp_path / "h")])
    assert result.exit_code == 0, result.output
    assert "decision -> run running again" in result.output and out.exists()
