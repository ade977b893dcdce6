"""PostgreSQL home URLs: recognizing one, and showing it without its password.

Apart from the store and its opening (``pg_home``), so that the store, the CLI and
``bide.open`` share one rule without importing each other.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

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
