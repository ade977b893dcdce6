"""``offload.wait_on_loop``: a coroutine's outcome that arrives just as a re-check's wait
times out is returned, not reported as a timeout (found by review; the loop-stopped
cases are in tests/test_loop_stopped.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from bide.engine.base import offload


class _LateFuture(concurrent.futures.Future):
    """The interleaving pinned: the outcome is set right after the wait timed out."""

    def __init__(self, set_it) -> None:
        super().__init__()
        self._set_it = set_it

    def result(self, timeout=None):
        try:
            return super().result(timeout)
        except concurrent.futures.TimeoutError:
            if not self.done():
                self._set_it(self)  # the loop's thread sets it now
            raise


def _running_loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True, name="test-loop")
    thread.start()
    return loop, thread


def _stop(loop, thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_a_value_arriving_at_the_timeout_is_returned(monkeypatch) -> None:
    monkeypatch.setattr(offload, "_CHECK", 0.01)
    loop, thread = _running_loop()
    try:
        assert offload.wait_on_loop(_LateFuture(lambda f: f.set_result(42)), loop, "x") == 42
    finally:
        _stop(loop, thread)


def test_the_coroutine_s_own_timeout_error_arriving_then_is_raised(monkeypatch) -> None:
    monkeypatch.setattr(offload, "_CHECK", 0.01)
    loop, thread = _running_loop()
    own = TimeoutError("the coroutine's own")
    try:
        try:
            offload.wait_on_loop(_LateFuture(lambda f: f.set_exception(own)), loop, "x")
        except TimeoutError as exc:
            assert exc is own
        else:
            raise AssertionError("the coroutine's TimeoutError was not raised")
    finally:
        _stop(loop, thread)
