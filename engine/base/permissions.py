"""Who may read and write a home: its owner only, whatever the umask.

A decision file approves actions such as "wire money", and requests carry
payloads that may be secret: so the home and its directories are created
0700 and its files 0600 (mkdir and open modes are masked by the umask, which
only removes bits, so these hold under ``umask 000`` too). An inbox file owned
by another user is refused unless signed (``inbox``); ``bide doctor`` warns when
the home, ``inbox/`` or ``requests/`` is open to others (``exposure``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` owner-only if missing (its parents, not ours, the usual way)."""
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # another process or thread created it meanwhile
            pass
    return path


def open_private(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open`` creating an owner-only file."""
    return os.open(path, flags | os.O_CREAT, PRIVATE_FILE)


def trusted_uid(uid: int, home: Path) -> bool:
    """A file owner whose unsigned decisions count: the home's owner (or root, who can
    change the store itself anyway)."""
    return uid in (0, os.stat(home).st_uid)


def exposure(home: Path) -> list[str]:
    """What in the home others could write (or, for requests, read), as warnings."""
    out = []
    for path, what in ((home, "the home"), (home / "inbox", "inbox/"),
                       (home / "requests", "requests/")):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "anyone"))
               if mode & bit]
        if who:
            out.append(f"{what} ({path}) is writable by {' and '.join(who)} "
                       f"(mode {stat.S_IMODE(mode):04o}): another user could drop or move "
                       f"decision files; chmod 700 {path}")
        elif path.name == "requests" and mode & stat.S_IROTH:
            out.append(f"requests/ ({path}) is readable by anyone (mode "
                       f"{stat.S_IMODE(mode):04o}) and requests carry payloads; "
                       f"chmod 700 {path}")
    return out
