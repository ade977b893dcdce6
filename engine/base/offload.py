"""Blocking work (store commits, plain tools, sync nodes) off an event loop.

bide's async paths run on the caller's loop; anything that blocks goes to one
pool of bide's own, not the loop's default executor: a thread waiting there for
an async tool's coroutine must never starve the threads that coroutine may
itself hand work to (``asyncio.to_thread`` uses the default executor).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="bide-offload")
_CHECK = 1.0  # seconds between checks that a loop still runs (its result wakes the wait)


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in bide's pool and await it; context variables go along (as to_thread)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)


def loop_running() -> bool:
    """True if an event loop runs in this thread (a notebook, a server, ``asyncio.run``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_coroutine(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, even inside a running loop.

    ``asyncio.run`` refuses to start inside a running loop, so there the
    coroutine gets its own loop in a helper thread while this thread waits.
    """
    if not loop_running():
        return asyncio.run(make())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bide-loop") as helper:
        return helper.submit(lambda: asyncio.run(make())).result()


def on_loop(loop: asyncio.AbstractEventLoop, awaitable: Awaitable[T]) -> T:
    """From a pool thread: run ``awaitable`` on ``loop`` (which is free) and wait for it."""
    async def wrapped() -> T:
        return await awaitable

    return wait_on_loop(asyncio.run_coroutine_threadsafe(wrapped(), loop), loop, "a coroutine")


def wait_on_loop(future: concurrent.futures.Future[T], loop: asyncio.AbstractEventLoop,
                 what: str) -> T:
    """``future.result()`` of a coroutine sent to ``loop`` (``run_coroutine_threadsafe``).

    A loop that stops first (stopped, or its thread ended by a ``SystemExit`` a task
    raised) would never finish the coroutine, and this thread would wait forever: it
    re-checks every ``_CHECK`` s that the loop still runs, and raises if it does not.

    Raises:
        Whatever the coroutine raised; RuntimeError if the loop stopped before it ended.
    """
    while True:
        try:
            return future.result(timeout=_CHECK)
        except concurrent.futures.TimeoutError:
            if future.done():  # its own TimeoutError, or its outcome came just now
                return future.result()
        if not loop.is_running() and future.cancel():  # (cancel: False once it finished)
            raise RuntimeError(f"bide: the event loop running {what} stopped before it "
                               "finished; its outcome is unknown")
