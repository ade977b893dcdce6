"""Every PostgreSQL connection bide opens: with TCP liveness checks unless the URL sets them.

A server host that vanishes (powered off, its network cut) sends no reset. Without
keepalives an idle connection never notices, and one waiting for a reply waits for
the kernel's retransmissions, about 15 minutes on Linux: a commit, a follow or the
wake-up listener would hang that long. With them a dead peer is found within about
a minute (30 s idle, then 3 probes 10 s apart; ``tcp_user_timeout`` bounds unacknowledged
data to 60 s) and the connection fails like any lost one (``StoreError`` after the
store's reconnect time). Options the URL gives win; a URL with ``keepalives=0`` or a
service (``service=`` or ``PGSERVICE``: its file sets the options) gets none of ours.
Over a Unix socket libpq ignores them.

psycopg, the ``postgres`` extra, is bound here once for every PostgreSQL module
(``from .pg_connect import psycopg``) and imported when first used, so each of them
imports on a bare install and a missing extra is one clear ``MissingExtra``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..base.optional import extra

if TYPE_CHECKING:
    import psycopg
    from psycopg import conninfo
    from psycopg import errors as pgerrors
else:
    psycopg = extra("psycopg", "postgres", "a PostgreSQL home")
    conninfo = extra("psycopg.conninfo", "postgres", "a PostgreSQL home")
    pgerrors = extra("psycopg.errors", "postgres", "a PostgreSQL home")

LIVENESS = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
            "keepalives_count": 3, "tcp_user_timeout": 60_000}


def connect(url: str, *, application_name: str, connect_timeout: int = 10
            ) -> psycopg.Connection[Any]:
    """An autocommit connection to ``url`` with ``LIVENESS`` for what the URL leaves unset.

    Raises:
        psycopg.OperationalError: the server cannot be reached (the callers retry).
    """
    given = conninfo.conninfo_to_dict(url)
    if "service" in given or os.environ.get("PGSERVICE") or str(given.get("keepalives")) == "0":
        ours: dict[str, int] = {}  # a service's file sets its own (ours would win)
    else:
        ours = {k: v for k, v in LIVENESS.items() if k not in given}
    info = conninfo.make_conninfo(url, **ours)
    return psycopg.connect(info, autocommit=True, connect_timeout=connect_timeout,
                           application_name=application_name)
