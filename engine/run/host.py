"""What code below the Engine may use of it, as a structural type rather than an import.

The Engine (``runtime``) sits on top of the run machinery, the inbox doors, the
read commands and upkeep, and passes itself to them. They name it through
``Host`` (and ``children.ChildRunner``, which can also run a run), so no module
below the Engine imports the Engine's module: the layers stay one-way
(``tests/test_layers.py``), and mypy checks that ``Engine`` fits each protocol.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..storage.store import Store
from .runs import CheckpointInfo


@dataclass(frozen=True)
class Doors:
    """Where people meet one engine's home: the inbox it takes decision files from, the
    directory it writes request files to (None: it writes none), the home a ``bide
    approve`` line names (a directory, or a PostgreSQL URL without its password), and
    the directory whose owner's unsigned decision files count (``trusted``: the home;
    on a PostgreSQL home, whose local directory may not even exist, the inbox).
    """

    inbox: Path
    requests: Path | None
    home: str
    trusted: Path

    @classmethod
    def of(cls, home: Path, *, url: str | None = None, local: bool = True,
           inbox: str | os.PathLike[str] | None = None,
           requests: str | os.PathLike[str] | None = None) -> Doors:
        """The defaults: ``<home>/inbox`` and ``<home>/requests``.

        On a PostgreSQL home (``url``) ``home`` is this host's local directory, and
        request files are written only where asked: ``requests``, or the local
        directory's ``requests/`` when one was given (``local``). The database is the
        one place every host reads what waits (``bide pending``); a file in whichever
        worker's directory paused the run is a convenience, not the record.
        """
        if requests is None and (url is None or local):
            requests = home / "requests"
        box = Path(inbox) if inbox is not None else home / "inbox"
        return cls(inbox=box, requests=None if requests is None else Path(requests),
                   home=url if url is not None else str(home),
                   trusted=box if url is not None else home)


class Host(Protocol):
    """An opened home: its store, where its files go, its clock and its worker name."""

    store: Store
    home: Path
    doors: Doors  # the inbox and request directories (or the shared store's door)
    owner: str  # this process's worker name, written on leases
    clock: Callable[[], float]

    def checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of the run in order (``Engine.checkpoints``)."""
        ...
