"""What the PostgreSQL outage tests share: the server away as a crash leaves it, a store
that gives up on it soon, and a commit made from elsewhere (as another process would)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing it needs psycopg: the tests skip without it first
    from bide.engine.postgres.store import PostgresStore
    from bide.formats import Record


@contextmanager
def server_away(pg_cluster: Any) -> Iterator[None]:
    """The server stopped as a crash stops it (``immediate``) for the block, then started
    again, whatever the block raised."""
    pg_cluster.stop("immediate")
    try:
        yield
    finally:
        pg_cluster.start()


def give_up_within(store: PostgresStore, seconds: float) -> None:
    """``store`` raises ``StoreError`` once the server was away longer than ``seconds``
    (its reconnect time, and its pool's wait for a connection)."""
    store.reconnect_timeout = store._pool.timeout = seconds


def commit_elsewhere(pg_url: str, records: Sequence[Record]) -> list[int]:
    """Commit ``records`` through a store of their own, closed after."""
    from bide.engine.postgres.store import PostgresStore

    other = PostgresStore(pg_url, durability="durable")
    try:
        return other.commit(records)
    finally:
        other.close()
