"""Telling a supervisor the watcher serves: a ready file, and systemd's notify socket.

A supervisor (systemd ``Type=notify``, a container health check, a test) should
not guess from log lines when a watcher has taken the files already in its inbox
and is serving. ``ready()`` writes ``--ready-file`` (atomically: a temporary file
renamed into place, holding the pid and the time) and sends ``READY=1`` to
``$NOTIFY_SOCKET``; ``stopping()`` sends ``STOPPING=1`` and removes the ready
file this watcher wrote, so a stopped watcher never looks ready.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from .watch_log import iso_now


def notify(state: str, *, environ: dict[str, str] | None = None) -> bool:
    """Send ``state`` (``READY=1``...) to ``$NOTIFY_SOCKET``; False when there is none.

    A name starting with ``@`` is Linux's abstract namespace (systemd's way).
    """
    path = (environ if environ is not None else os.environ).get("NOTIFY_SOCKET")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(state.encode())
    return True


class Readiness:
    """The watcher's readiness, said to ``ready_file`` and to systemd when serving."""

    def __init__(self, ready_file: Path | None = None) -> None:
        self.ready_file = ready_file
        self._wrote = False

    def ready(self) -> None:
        if self.ready_file is not None:
            tmp = self.ready_file.with_name(f".{self.ready_file.name}.{os.getpid()}.tmp")
            tmp.write_text(f'{{"pid": {os.getpid()}, "ready_at": "{iso_now()}"}}\n')
            os.replace(tmp, self.ready_file)
            self._wrote = True
        notify("READY=1")

    def stopping(self) -> None:
        notify("STOPPING=1")
        if self._wrote and self.ready_file is not None:
            self.ready_file.unlink(missing_ok=True)  # our own file: it would lie from now on
            self._wrote = False
