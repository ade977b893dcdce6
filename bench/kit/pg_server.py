"""A throwaway PostgreSQL cluster started from the machine's binaries.

Shared by the tests (``tests/pg_cluster.py``, the pytest fixtures) and by
``bide bench peers`` (``bench/postgres.py``), so both measure and test against
the same kind of server: ``initdb`` + ``pg_ctl start`` in a temporary
directory, a Unix socket only (no TCP port to collide on), fsync on, as the
``postgres`` user when we run as root (PostgreSQL refuses to run as root),
stopped with a deadline. It knows nothing of bide's engine: it only runs the
server and makes databases on it.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin",
            "/usr/lib/postgresql/14/bin")
START_DEADLINE = 60  # seconds for initdb + start
STOP_DEADLINE = 30


def bin_dir() -> Path | None:
    """``$BIDE_PG_BIN`` alone when set (a test points it at binaries that fail), else the
    first of ``BIN_DIRS`` that has them."""
    chosen = os.environ.get("BIDE_PG_BIN")
    for d in (chosen,) if chosen else BIN_DIRS:
        if d and (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file():
            return Path(d)
    return None


def missing_binaries() -> str:
    """Why ``bin_dir()`` found nothing, for a skip or an error message."""
    return f"no PostgreSQL binaries (initdb, pg_ctl) in {', '.join(BIN_DIRS)} or $BIDE_PG_BIN"


@dataclass
class Cluster:
    """A running cluster: its directory, socket and a counter for fresh database names.

    ``settings`` are extra ``-c name=value`` server settings (the bench keeps a
    timed checkpoint out of its measurements with them).
    """

    bin: Path
    base: Path
    user: str | None  # the OS user the server runs as (None: this process's user)
    settings: Sequence[str] = ()
    _names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def socket(self) -> Path:
        return self.base / "sock"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket}"

    def run(self, *args: str, timeout: float = START_DEADLINE) -> subprocess.CompletedProcess:
        """Run a PostgreSQL binary as the server's user, failing loudly with its output."""
        kw = {} if self.user is None else {"user": self.user, "group": self.user,
                                           "extra_groups": []}
        out = subprocess.run([str(self.bin / args[0]), *args[1:]], capture_output=True,
                             text=True, timeout=timeout, cwd=self.base, **kw)  # type: ignore[call-overload]
        if out.returncode != 0:
            log = self.base / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({out.returncode}): {out.stderr}{tail}")
        return out

    def start(self) -> None:
        opts = (f"-c listen_addresses='' -c unix_socket_directories='{self.socket}' "
                "-c fsync=on -c synchronous_commit=on -c max_connections=200 "
                "-c shared_buffers=32MB -c max_prepared_transactions=0")
        opts += "".join(f" -c {s}" for s in self.settings)
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.base / "server.log"),
                 "-w", "-t", str(START_DEADLINE), "-o", opts, "start")

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(STOP_DEADLINE),
                 "stop", timeout=STOP_DEADLINE + 10)

    def restart(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: as a crash, no shutdown checkpoint) and start it."""
        self.stop(mode)
        self.start()

    def create_database(self) -> str:
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_cluster(bin_dir: Path, settings: Sequence[str] = ()) -> Cluster:
    """initdb + start in a new temporary directory the server's user can reach."""
    user = "postgres" if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="bide-pg-", dir="/tmp" if user else None))
    cluster = Cluster(bin_dir, base, user, tuple(settings))
    try:
        cluster.socket.mkdir()
        if user is not None:  # mkdtemp made it 0700 root: hand it to the server's user
            pw = pwd.getpwnam(user)
            for p in (base, cluster.socket):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        cluster.run("initdb", "-D", str(cluster.data), "-U", "postgres", "--auth=trust",
                    "-E", "UTF8", "--locale=C", "--no-sync")
        cluster.start()
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    """Stop within the deadline (fast, then immediate), then remove the directory."""
    try:
        cluster.stop("fast")
    except (RuntimeError, subprocess.TimeoutExpired):
        cluster.stop("immediate")
    finally:
        shutil.rmtree(cluster.base, ignore_errors=True)


@contextmanager
def throwaway(settings: Sequence[str] = ()) -> Iterator[Cluster]:
    """A cluster for the ``with`` block, stopped and removed after it.

    Raises:
        RuntimeError: no PostgreSQL binaries here, or the server did not start.
    """
    found = bin_dir()
    if found is None:
        raise RuntimeError(missing_binaries())
    cluster = start_cluster(found, settings)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
