"""One thread per store renews every lease of the process, in batches (engine/run/renewer.py)."""

from __future__ import annotations

import threading
import time

import bide
from bide.engine.base.errors import StoreError
from bide.engine.run.lease_clock import MARGIN, LeaseClock
from bide.engine.run.renewer import Renewer
from polling import wait_for


class FakeStore:
    """``renew_leases`` that records each call and answers from ``answer(run_id)``."""

    def __init__(self, answer=lambda run_id: True, delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay
        self.calls: list[list[tuple[str, int, float]]] = []

    def renew_leases(self, leases):
        self.calls.append(list(leases))
        if self.delay:
            time.sleep(self.delay)
        return [self.answer(run_id) for run_id, _, _ in leases]

    def renewed(self, run_id: str) -> int:
        return sum(1 for call in self.calls for r, _, _ in call if r == run_id)


def _clock(ttl: float) -> LeaseClock:
    return LeaseClock(ttl, time.monotonic())


def test_each_lease_is_renewed_at_its_interval_until_ended():
    store = FakeStore()
    r = Renewer(store, name="test-renewer")
    end_a = r.add("a", 1, 0.06, _clock(0.06))  # renewed every 0.02 s
    end_b = r.add("b", 1, 0.06, _clock(0.06))
    assert wait_for(lambda: store.renewed("a") >= 3 and store.renewed("b") >= 3, 10)
    end_a()
    time.sleep(0.05)  # a renewal already under way may land once more
    seen = store.renewed("a")
    assert wait_for(lambda: store.renewed("b") >= seen + 5, 10)
    assert store.renewed("a") == seen  # ended: never again
    end_b()


def test_leases_due_together_are_renewed_in_one_call():
    """Many runs, one store: a renewal round is one ``renew_leases`` call, not one each."""
    store = FakeStore()
    r = Renewer(store, name="test-renewer")
    ends = [r.add(f"r{i}", 1, 0.3, _clock(0.3)) for i in range(50)]
    try:
        assert wait_for(lambda: all(store.renewed(f"r{i}") >= 2 for i in range(50)), 10)
        sizes = [len(call) for call in store.calls]
        assert max(sizes) == 50 and len(store.calls) <= 2 * 2 + 1, sizes
    finally:
        for end in ends:
            end()


def test_a_renewal_raises_the_lease_clock_from_when_it_was_sent():
    """The reply takes 0.15 s: the clock is raised as of the renewal's start (the store's
    expiry is its commit time plus the ttl, and the commit came after the start)."""
    sent: list[float] = []

    class Slow(FakeStore):
        def renew_leases(self, leases):
            sent.append(time.monotonic())
            return super().renew_leases(leases)

    store = Slow(delay=0.15)
    r = Renewer(store, name="test-renewer")
    clock = _clock(0.9)
    first = clock.until
    end = r.add("a", 1, 0.9, clock)
    try:
        assert wait_for(lambda: len(store.calls) >= 2 and clock.until > first, 10)
    finally:
        end()
    trusted = 0.9 * (1 - MARGIN)
    assert any(abs(clock.until - (start + trusted)) < 1e-3 for start in sent), (clock.until, sent)


def test_renewals_are_sent_an_interval_apart_however_slow_the_reply():
    sent: list[float] = []

    class Slow(FakeStore):
        def renew_leases(self, leases):
            sent.append(time.monotonic())
            return super().renew_leases(leases)

    store = Slow(delay=0.15)
    r = Renewer(store, name="test-renewer")
    end = r.add("a", 1, 0.9, _clock(0.9))
    try:
        assert wait_for(lambda: len(sent) >= 5, 10)
    finally:
        end()
    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    # due 0.3 s after each start (a third of 0.9, taken up to 0.1 s early with the batch);
    # timed from each reply they would be 0.45 s apart
    assert max(gaps[:4]) < 0.42, gaps


def test_a_refused_renewal_ends_that_lease_and_marks_its_clock_lost():
    store = FakeStore(answer=lambda run_id: run_id != "refused")
    r = Renewer(store, name="test-renewer")
    refused, fine = _clock(0.03), _clock(0.03)
    r.add("refused", 1, 0.03, refused)
    end = r.add("fine", 1, 0.03, fine)
    try:
        assert wait_for(lambda: store.renewed("fine") >= 10, 10)
    finally:
        end()
    assert store.renewed("refused") == 1 and not refused.alive()


def test_a_broken_store_ends_its_leases():
    """Not an outage (no StoreError): the leases' renewals end; their commits will say why."""
    calls = {"n": 0}

    class Broken(FakeStore):
        def renew_leases(self, leases):
            calls["n"] += 1
            raise RuntimeError("store torn down")

    store = Broken()  # the renewer holds its store weakly: a store gone ends its leases
    r = Renewer(store, name="test-renewer")
    r.add("a", 1, 0.03, _clock(0.03))
    time.sleep(0.3)
    assert calls["n"] == 1


def test_a_run_longer_than_its_lease_keeps_it_and_no_thread_per_run(tmp_path):
    """A node slower than lease_ttl: the lease is renewed, so the run is not an orphan."""
    seen: list[list[str]] = []
    flow = bide.Flow("long")

    @flow.node(start=True)
    def slow(state, ctx):
        time.sleep(0.6)
        seen.append([t.name for t in threading.enumerate() if t.name.startswith("bide-lease")])
        return {"x": 1}

    with bide.open(tmp_path / "home", durability="fast", lease_ttl=0.3) as eng:
        eng.register(flow)
        run = eng.start("long", run_id="r")
        assert run.status == bide.Status.DONE
        with eng.store.reader() as r:
            token, expires = r.lease_expiry("r")
        assert token == 1 and expires > eng.get("r").head.lease_expires  # renewed
        mine = f"bide-lease-renewer {eng.store.home}"  # (other stores' renewers may linger)
    assert [[name for name in names if name == mine] for names in seen] == [[mine]]


def test_a_renewal_failing_with_a_store_error_is_tried_again_and_said_once(caplog):
    """A store outage (StoreError) does not end the lease's renewals: they go on,
    backing off, and the renewer says so once per outage and once when it is over."""
    away = threading.Event()
    away.set()

    class Away(FakeStore):
        def renew_leases(self, leases):
            self.calls.append(list(leases))
            if away.is_set():
                raise StoreError("cannot reach PostgreSQL")
            return [True for _ in leases]

    store = Away()
    r = Renewer(store, name="test-renewer")
    with caplog.at_level("WARNING", logger="bide.renewer"):
        end = r.add("a", 1, 0.15, _clock(0.15))
        try:
            assert wait_for(lambda: len(store.calls) >= 4, 10)  # tried again and again
            away.clear()
            seen = len(store.calls)
            assert wait_for(lambda: len(store.calls) >= seen + 3, 10)  # and renewed after
        finally:
            end()
    said = [rec.getMessage() for rec in caplog.records if rec.name == "bide.renewer"]
    assert len(said) == 2 and "failing" in said[0] and "succeed again" in said[1], said


def test_a_renewal_that_fails_after_its_lease_ended_is_not_reported(caplog):
    """The lease ends (its run finished, its engine closed the store) while the renewer
    is renewing it: the closed store's error is no outage, so nothing is said (it was
    said as one, into whatever test ran next)."""
    ended = threading.Event()
    end: list = []

    class Closing(FakeStore):
        def renew_leases(self, leases):
            self.calls.append(list(leases))
            end[0]()  # the run ends and its store closes while this renewal runs
            ended.set()
            raise StoreError("store error: Attempt to operate on closed/deleted/dropped object.")

    store = Closing()
    r = Renewer(store, name="test-renewer")
    with caplog.at_level("WARNING", logger="bide.renewer"):
        end.append(r.add("a", 1, 0.03, _clock(0.03)))
        assert ended.wait(10)
        time.sleep(0.1)  # time for a report (and for a retry, which must not come)
    said = [rec.getMessage() for rec in caplog.records if rec.name == "bide.renewer"]
    assert said == [] and len(store.calls) == 1, (said, store.calls)


def test_the_thread_ends_when_idle_and_starts_again(monkeypatch):
    from bide.engine.run import renewer

    monkeypatch.setattr(renewer, "IDLE", 0.1)
    store = FakeStore()
    r = Renewer(store, name="test-renewer-idle")
    r.add("a", 1, 0.03, _clock(0.03))()  # added and ended at once
    assert wait_for(lambda: r._thread is None, 10)
    assert wait_for(lambda: "test-renewer-idle" not in [t.name for t in threading.enumerate()],
                    10)
    end = r.add("b", 1, 0.03, _clock(0.03))
    try:
        assert wait_for(lambda: store.renewed("b") >= 2, 10)
    finally:
        end()
