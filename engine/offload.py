"""Blocking work (store commits, plain tools, sync nodes) off an event loop.

bide's async paths run on the caller's loop; anything that blocks goes to one
pool of bide's own, not the loop's default executor: a thread waiting there for
an async tool's coroutine must never starve the threads that coroutine may
itself hand work to (``asyncio.to_thread`` uses the default executor).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="bide-offload")


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

    return asyncio.run_coroutine_threadsafe(wrapped(), loop).result()
