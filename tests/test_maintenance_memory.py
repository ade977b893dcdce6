"""``bide doctor`` and ``bide prune`` hold one run at a time, not the whole log.

Measured in fresh processes (``bench/maintenance_memory.py``): the anonymous memory a
command holds above a process that only opens the home must not grow with the home.
A whole-log read (as before) grew by ~9.5 KiB a run: ~14 MiB between these two sizes.
"""

# ruff: noqa: F811 - tests take the imported fixtures `home`/`template` as parameters

from __future__ import annotations

from pathlib import Path

import bide
import pytest
from bide.bench.maintenance_memory import build, growth
from cli_world import home, template  # noqa: F401 - fixtures

SMALL, LARGE = 400, 1600
SLACK_MIB = 4.0  # allocator noise between processes; a whole-log read adds ~14 MiB


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    where = tmp_path_factory.mktemp("homes")
    for n in (SMALL, LARGE):
        build(where / f"runs-{n}", n)
    return {n: where / f"runs-{n}" for n in (SMALL, LARGE)}


@pytest.mark.parametrize("command", ["doctor", "prune"])
def test_memory_does_not_grow_with_the_home(homes: dict[int, Path], command: str) -> None:
    small, large = growth(homes[SMALL]), growth(homes[LARGE])
    assert small[f"{command}_ok"] and large[f"{command}_ok"]
    assert large[f"{command}_mib"] <= small[f"{command}_mib"] + SLACK_MIB, (small, large)


def test_the_run_walk_still_finds_what_the_index_lost_or_made_up(home: Path) -> None:
    """The walk goes through the run log index, so it must catch that index's damage too:
    a run it no longer lists at all, an entry that leads nowhere, a head nobody implies."""
    from bide.engine.storage.index import RUNLOG, RUNS, runlog_key
    from bide.formats import pack_value
    from test_maintenance import cli, raw_write

    with bide.open(home, create=False) as e, e.store.reader() as r:
        lost = [seq for seq, _ in r.run_entries("r-done")]
        last = r.last_seq()
        ghost = r.head("r-failed")
    assert lost and ghost is not None
    for seq in lost:  # the whole run gone from the run log index
        raw_write(home, RUNLOG, runlog_key("r-done", seq), None)
    raw_write(home, RUNLOG, runlog_key("r-failed", last + 7), b"checkpoint")
    ghost.run_id = "r-ghost"
    raw_write(home, RUNS, b"r-ghost", pack_value(ghost))
    code, doc = cli(home, "doctor")
    assert code == 1
    found = {(p["kind"], p["table"], p["key"]) for p in doc["problems"]}
    assert found == {*(("missing", "runlog", f"r-done@{seq}") for seq in lost),
                     ("extra", "runlog", f"r-failed@{last + 7}"), ("extra", "runs", "r-ghost")}
    code, doc = cli(home, "doctor", "--rebuild")
    assert code == 0 and doc["ok"]
