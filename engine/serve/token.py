"""``bide serve``'s bearer token: one file, owner-only, created with a random token when missing.

The token is the server's only credential, so the file is refused (not fixed behind
the owner's back) when anyone else could read or replace it: readable or writable by
the group or others, owned by another user, a symlink or not a regular file. A missing
file is created by writing a private temporary file and linking it into place, so two
servers starting at once agree on one token and neither reads a half-written file.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from pathlib import Path

from ..base.errors import ServeError

MIN_CHARS = 16  # a shorter token is too easy to guess: refused


def load_token(path: Path) -> str:
    """The token in ``path``, created (mode 0600, ``secrets.token_urlsafe(32)``) when missing.

    Raises:
        ServeError: the file is not safe to use or holds no usable token.
    """
    if not os.path.lexists(path):
        _create(path)
    return _read(path)


def _create(path: Path) -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)  # mode 0600
    except OSError as exc:  # no such directory, or not ours to write
        raise ServeError(path, f"cannot create the token file: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # never replaces a file: another server's token stays
        except FileExistsError:  # another server created it first: use theirs
            pass
    finally:
        os.unlink(tmp)


def _read(path: Path) -> str:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise ServeError(path, "the token file is not a regular file")
    if st.st_uid != os.getuid():
        raise ServeError(path, f"the token file is owned by uid {st.st_uid}, not by this "
                         f"user (uid {os.getuid()})")
    if st.st_mode & 0o077:
        raise ServeError(path, f"the token file is open to others (mode "
                         f"{stat.S_IMODE(st.st_mode):04o})", hint=f"chmod 600 {path}")
    token = path.read_text(encoding="utf-8", errors="replace").strip()
    if len(token) < MIN_CHARS or not token.isascii() or any(
            c.isspace() or not c.isprintable() for c in token):  # an HTTP header carries it
        raise ServeError(path, f"the token file must hold one token of at least {MIN_CHARS} "
                         "printable ASCII characters without spaces")
    return token
