"""A decision file whose commit meets a PostgreSQL outage stays claimed and is recorded
once the server is back.

The bug this reproduces: a commit that failed because the server was away longer
than the store's reconnect time moved the file to ``inbox/rejected/`` (the path built
for a full disk, where each file is tried alone and refused with the reason). A store
outage is not the file's fault: it now stays in ``inbox/.work/``, the inbox says why
(``StoreError``), and the next pass records it, exactly once.
"""

from __future__ import annotations

import sys
from typing import Any

import bide
import pytest
from bide import Decision, Status
from bide.engine.base.errors import StoreError
from bide.engine.human.inbox import Inbox, drop_decision
from bide.formats import ApprovalDecided
from conftest import APPS
from extras import need
from pg_outage_helpers import give_up_within, server_away

need("psycopg")

sys.path.insert(0, str(APPS))
import wake_app  # noqa: E402


def _decided(eng: Any, run_id: str) -> int:
    with eng.store.reader() as r:
        return sum(isinstance(r.record(seq), ApprovalDecided) for seq, _ in r.run_entries(run_id))


def test_a_file_whose_commit_meets_an_outage_stays_claimed_and_is_recorded_once_back(
        tmp_path, pg_cluster, pg_url, monkeypatch):
    monkeypatch.setenv("BIDE_TEST_EFFECTS", str(tmp_path / "effects.log"))
    with bide.open(pg_url, local=tmp_path, durability="durable") as eng:
        eng.register(*wake_app.flows)
        eng.start("ask", run_id="q")
        (pending,) = eng.pending()
        give_up_within(eng.store, 0.2)  # away longer than this
        real, away = eng.store.commit, []

        def commit_in_an_outage(*args: Any, **kwargs: Any) -> Any:
            if away:
                return real(*args, **kwargs)
            away.append(True)
            with server_away(pg_cluster):  # the checks read the store; the commit finds it gone
                return real(*args, **kwargs)

        monkeypatch.setattr(eng.store, "commit", commit_in_an_outage)
        inbox = Inbox(eng)
        name = drop_decision(tmp_path, pending["approval_id"], Decision.APPROVE, by="t",
                             inbox=eng.doors.inbox).name
        with pytest.raises(StoreError):
            inbox.process()
        assert away  # the commit did meet the outage
        assert sorted(p.name for p in inbox.work.iterdir()) == [name]  # still claimed
        assert list((inbox.dir / "rejected").iterdir()) == []
        assert _decided(eng, "q") == 0
        (result,) = inbox.process()  # the server is back
        assert result.accepted and not result.duplicate, result
        assert result.approval_id == pending["approval_id"], result
        assert list(inbox.work.iterdir()) == []
        assert [p.name for p in (inbox.dir / "processed").iterdir()] == [name]
        assert _decided(eng, "q") == 1
        assert inbox.process() == []  # nothing left, nothing recorded twice
        assert _decided(eng, "q") == 1
        assert eng.get("q").status == Status.WAITING_APPROVAL  # decided, not yet resumed
