"""A home named by a PostgreSQL URL: recognizing one, and opening its store.

Kept apart from ``pg_store`` so that code which only asks "is this a URL?"
(``bide.open``, the CLI) never loads psycopg, an optional extra, nor the PostgreSQL
store's modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..base.optional import load
from .url import is_url as is_url  # re-exported: what callers ask of a home
from .url import redacted as redacted

if TYPE_CHECKING:
    from .store import PostgresStore


def open_store(url: str, *, durability: str, create: bool,
               clock: Callable[[], float]) -> PostgresStore:
    """The ``PostgresStore`` at ``url``.

    Raises:
        MissingExtra: psycopg (the ``postgres`` extra) is not installed.
    """
    load("psycopg", "postgres", f"{redacted(url)} (a PostgreSQL home)")
    from .store import PostgresStore

    return PostgresStore(url, durability=durability, create=create, clock=clock)
