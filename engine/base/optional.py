"""Optional extras, imported when first used rather than when a module is imported.

bide's core needs only its required dependencies; PostgreSQL (psycopg), ``bide serve``
(Starlette, uvicorn), traces (OpenTelemetry) and LangGraph are extras. A module that
uses one binds it with ``extra(...)``: the module itself imports on a bare install
(so ``import bide``, ``bide --help`` and every module work without any extra), and
the first attribute read imports the real package, or raises ``MissingExtra`` naming
the extra and the pip command. Type checkers see the real import under
``TYPE_CHECKING``::

    if TYPE_CHECKING:
        import psycopg
    else:
        psycopg = extra("psycopg", "postgres", "the PostgreSQL store")
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from .errors import MissingExtra


class _Extra:
    """A module of an optional extra, imported at the first attribute read.

    After that read the module's names are copied onto the proxy, so later reads are
    plain attribute lookups (no import machinery on hot paths).
    """

    def __init__(self, module: str, extra: str, what: str) -> None:
        self.__dict__["_bide_extra"] = (module, extra, what)

    def __getattr__(self, attr: str) -> Any:
        module = load(*self.__dict__["_bide_extra"])
        self.__dict__.update(vars(module))
        return getattr(module, attr)

    def __repr__(self) -> str:
        module, extra, _ = self.__dict__["_bide_extra"]
        return f"<module {module!r} of bide[{extra}], imported when first used>"


def extra(module: str, extra: str, what: str) -> Any:
    """``module`` of the extra ``extra``, imported when first used by ``what``."""
    return _Extra(module, extra, what)


def load(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` now; ``MissingExtra`` when it (or its package) is not installed.

    Only a missing module of that package is translated: an ImportError raised inside
    an installed package is a real bug of that install and propagates as it is.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name is None or exc.name.split(".")[0] != top:
            raise
        raise MissingExtra(what, extra=extra, module=module) from exc

