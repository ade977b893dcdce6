"""Bugs the torture suite found, one test each, named after the bug."""

from __future__ import annotations

import bide


def test_map_growth_while_sibling_threads_commit_does_not_fail_the_run(tmp_path):
    """py-lmdb's set_mapsize cancels every open transaction of the process. When one
    parallel sibling filled the map and grew it, a sibling thread's write transaction
    was cancelled under it ("Attempt to operate on closed/deleted/dropped object") and
    the run went FAILED. Growing now waits for this process's other transactions."""
    flow = bide.Flow("grow")
    names = [f"n{i}" for i in range(6)]
    for name in names:
        flow.node(lambda s, c, name=name: {name: name * 40_000}, name=name, start=True)
    flow.node(lambda s, c: {"done": True}, name="join", after=tuple(names))
    for i in range(8):
        with bide.open(tmp_path / f"h{i}", durability="fast", map_size=1 << 17) as eng:
            eng.register(flow)
            run = eng.start("grow", run_id="r")
            assert run.status == "DONE", run.error
            assert sorted(run.state) == sorted([*names, "done"])


def test_a_crash_while_creating_a_home_does_not_brick_it(tmp_path):
    """Killed between creating ``store/`` and LMDB creating ``data.mdb`` (a random kill
    trial hit it), the home held an empty ``store/`` and every later open refused it as
    "not empty and not a bide home". What bide made itself is now recognised."""
    home = tmp_path / "home"
    (home / "store").mkdir(parents=True)
    (home / "store" / "lock.mdb").write_bytes(b"")
    with bide.open(home, durability="fast") as eng:
        assert eng.runs() == []
    other = tmp_path / "other"
    (other / "store").mkdir(parents=True)
    (other / "store" / "notes.txt").write_text("mine")
    try:
        bide.open(other)
    except bide.NotAHome:
        pass
    else:
        raise AssertionError("a store/ holding someone else's files was taken over")


def test_a_claimed_file_another_watcher_finished_does_not_crash_the_watcher(tmp_path):
    """Each watcher also finishes the files in ``inbox/.work/`` (claims a crashed watcher
    left), so a file one live watcher had claimed could be finished by another meanwhile;
    the first then died in ``os.lstat`` with FileNotFoundError (found by the racing
    watchers test). A claimed file that is gone was finished elsewhere: skip it."""
    from bide.engine.human.inbox import Inbox, drop_decision

    flow = bide.Flow("ask")
    flow.node(lambda s, c: {"ok": c.approve("go")}, name="n", start=True)
    with bide.open(tmp_path / "h", durability="fast") as eng:
        eng.register(flow)
        aid = eng.start("ask", run_id="r").waiting["approval_id"]
        path = drop_decision(eng.home, aid, "approve", by="alice")
        first, second = Inbox(eng), Inbox(eng)
        assert first._claim(path.name)
        assert [f.accepted for f in second.process()] == [True]  # took the claimed file
        assert first._finish([path.name]) == []  # gone: finished by the other watcher
        assert first.process() == []
        processed = list((eng.home / "inbox" / "processed").iterdir())
        assert [p.name for p in processed] == [path.name]
        assert not list((eng.home / "inbox" / "rejected").iterdir())


def test_a_kill_while_lmdb_writes_a_new_store_s_first_pages_does_not_brick_the_home(tmp_path):
    """The nightly torture run (116,776 crashes, seed 7) hit it 7 times: a worker killed
    while LMDB was writing a new ``data.mdb``'s two meta pages left a file of one page,
    and every later open failed with ``MDB_INVALID: File is not an LMDB file``. A file
    shorter than two pages holds no commit; it is now set aside (kept, renamed) and the
    store created again. A damaged file that could hold data is never touched."""
    import os

    import pytest

    page = os.sysconf("SC_PAGE_SIZE")
    for partial in (b"", b"\0" * page, b"\x01" * (page + 7)):
        home = tmp_path / f"home-{len(partial)}"
        (home / "store").mkdir(parents=True)
        (home / "store" / "data.mdb").write_bytes(partial)
        with bide.open(home, durability="fast") as eng:
            eng.register(_one_node_flow())
            assert eng.start("one", run_id="r").status == "DONE"
        kept = [p for p in (home / "store").iterdir() if p.name.startswith("data.mdb.")]
        assert len(kept) == (1 if partial else 0)
        if partial:
            assert kept[0].read_bytes() == partial  # set aside unchanged, never deleted
    damaged = tmp_path / "damaged"
    (damaged / "store").mkdir(parents=True)
    (damaged / "store" / "data.mdb").write_bytes(b"\x01" * (4 * page))
    with pytest.raises(bide.StoreError, match="not an LMDB file"):
        bide.open(damaged)
    assert (damaged / "store" / "data.mdb").read_bytes() == b"\x01" * (4 * page)


def _one_node_flow() -> bide.Flow:
    flow = bide.Flow("one")
    flow.node(lambda s, c: {"ok": True}, name="only", start=True)
    return flow
