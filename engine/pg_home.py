"""A home named by a PostgreSQL URL: recognizing one, and opening its store.

Kept apart from ``pg_store`` so that code which only asks "is this a URL?"
(``bide.open``, the CLI) never loads psycopg, an optional extra, nor the PostgreSQL
store's modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from .optional import load

if TYPE_CHECKING:
    from .pg_store import PostgresStore

SCHEMES = ("postgresql://", "postgres://")


def is_url(home: object) -> bool:
    """A home given as a PostgreSQL URL rather than a directory."""
    return isinstance(home, str) and home.startswith(SCHEMES)


def redacted(url: str) -> str:
    """The URL without its password, for messages and ``Store.home``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(url: str, *, durability: str, create: bool,
               clock: Callable[[], float]) -> PostgresStore:
    """The ``PostgresStore`` at ``url``.

    Raises:
        MissingExtra: psycopg (the ``postgres`` extra) is not installed.
    """
    load("psycopg", "postgres", f"{redacted(url)} (a PostgreSQL home)")
    from .pg_store import PostgresStore

    return PostgresStore(url, durability=durability, create=create, clock=clock)
