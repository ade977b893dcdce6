"""``@bide.tool``: declaring a function with side effects, and ``Outcome`` for reconcilers."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ..base.errors import ToolOutsideNode

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Outcome:
    """What a reconciler found out about a call whose outcome was unknown."""

    status: str
    result: Any = None

    @classmethod
    def done(cls, result: Any = None) -> Outcome:
        """The call did happen; ``result`` is what the node will receive."""
        return cls("done", result)

    @classmethod
    def not_done(cls) -> Outcome:
        """The call did not happen; it is safe to make it."""
        return cls("not_done")

    @classmethod
    def unknown(cls) -> Outcome:
        """Cannot tell; bide retries idempotent tools and asks a human otherwise."""
        return cls("unknown")


class Tool(Generic[P, R]):
    """A declared tool. Call it through ``ctx.tool(t, ...)`` inside a node.

    An ``async def`` tool is awaited with ``await ctx.atool(t, ...)`` in an async node.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        idempotent: bool = False,
        reconcile: Callable[..., Outcome] | None = None,
        needs_approval: bool = False,
        retries: int = 0,
        backoff: float = 0.0,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.idempotent = idempotent
        self.reconcile = reconcile
        self.needs_approval = needs_approval
        self.retries = retries
        self.backoff = backoff
        # awaited through ctx.atool only: sync ctx.tool cannot run a coroutine
        self.needs_await = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(reconcile)
        self.accepts_key = _accepts(fn, "idempotency_key")
        self.accepts_token = _accepts(fn, "fencing_token", var_keyword=False)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        raise ToolOutsideNode(self.name)

    def __repr__(self) -> str:
        return f"<bide.tool {self.name}>"


def _accepts(fn: Callable[..., Any], name: str, *, var_keyword: bool = True) -> bool:
    """Does ``fn`` take keyword ``name`` (or, with ``var_keyword``, any keyword)?

    ``fencing_token`` is passed only to a tool that names it: a ``**kwargs`` tool
    written before it existed would pass it on to a system that does not know it.
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or (var_keyword and any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    ))


@overload
def tool(fn: Callable[P, R]) -> Tool[P, R]: ...
@overload
def tool(
    *,
    name: str | None = None,
    idempotent: bool = False,
    reconcile: Callable[..., Outcome] | None = None,
    needs_approval: bool = False,
    retries: int = 0,
    backoff: float = 0.0,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(fn: Any = None, **options: Any) -> Any:
    """Declare a tool: its calls go through the write-ahead intent log.

    A tool that takes an ``idempotency_key`` keyword gets the call's key (the same on
    every retry); one that takes ``fencing_token`` gets the worker's fencing token
    (``ctx.fencing_token``), to pass to a system that refuses an older worker's.

    Args:
        idempotent: safe to repeat with the same ``idempotency_key``.
        reconcile: ``reconcile(idempotency_key, *args, **kwargs) -> Outcome`` asks the
            world whether a call whose outcome is unknown happened.
        needs_approval: every call waits for a human decision first.
        retries, backoff: attempts after a failure, sleeping ``backoff * 2**n``.
    """
    if fn is not None:
        return Tool(fn, **options)
    return lambda f: Tool(f, **options)
