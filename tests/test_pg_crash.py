"""The crash matrix on PostgreSQL: chain_app killed at every commit boundary (first
occurrences), resumed in a new process against the same database; the same checks as
on LMDB (``test_crash_resume.crash_then_resume``). A few run in the quick suite; the
whole matrix is ``slow`` (CI runs it)."""

from __future__ import annotations

import pytest
from test_crash_resume import FAULTS, crash_then_resume

pytest.importorskip("psycopg")

QUICK = ("after_pending_write:2", "before_commit:5", "after_commit:9")


@pytest.mark.parametrize("fault", [
    pytest.param(f, marks=() if f in QUICK else pytest.mark.slow) for f in FAULTS])
def test_crash_then_resume_on_postgres(pg_url, tmp_path, monkeypatch, fault):
    monkeypatch.chdir(tmp_path)  # the workers' local directory (inbox, requests) goes here
    crash_then_resume(pg_url, tmp_path / "effects.log", fault, "kill", "durable")
