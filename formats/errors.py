"""Errors raised while reading or writing stored records.

``BideError`` is the root of every error bide raises; it lives here because
``formats`` is the bottom layer (``engine`` imports it, never the reverse).
"""

from __future__ import annotations


class BideError(Exception):
    """Base class of every error bide raises on purpose."""


class RecordError(BideError):
    """A stored value could not be turned back into a record."""


class CorruptRecord(RecordError):
    """The stored bytes fail their checksum or are truncated."""

    def __init__(self, key: object, why: str) -> None:
        self.key = key
        self.why = why
        super().__init__(f"corrupt record at key {key!r}: {why}")


class CorruptIndex(RecordError):
    """A derived index value fails its checksum or does not decode.

    The log is the source of truth: a rebuild (``bide doctor --rebuild``) rewrites
    the index from it. Names the table and the key.
    """

    def __init__(self, table: str, key: bytes, why: str, shown: str | None = None) -> None:
        self.table, self.key, self.why = table, key, why
        if shown is None:  # a text key, parts separated by NUL
            shown = key.decode(errors="replace").replace("\x00", " ")
        super().__init__(
            f"corrupt index entry in table {table!r} at key {shown!r}: {why}. The log is "
            "intact: `bide doctor` lists the damage, `bide doctor --rebuild` rewrites the "
            "index from the log"
        )


class NewerSchema(RecordError):
    """The record was written by a newer bide than this one."""

    def __init__(self, key: object, rtype: str, version: int, known: int) -> None:
        self.key, self.rtype, self.version, self.known = key, rtype, version, known
        super().__init__(
            f"record {rtype!r} at key {key!r} has schema version {version}, but this bide "
            f"only knows up to version {known}: upgrade bide (pip install -U bide) to read it"
        )


class UnknownRecordType(RecordError):
    """The record's type tag is not one this bide knows (written by a newer bide)."""

    def __init__(self, key: object, rtype: str) -> None:
        self.key, self.rtype = key, rtype
        super().__init__(
            f"record at key {key!r} has unknown type {rtype!r}: it was probably written by a "
            "newer bide; upgrade bide to read it"
        )


class NotSerializable(BideError):
    """A value given to bide cannot be stored (see ``formats/values.py`` for the kept types).

    ``type_name`` is the refused type, when a type is the reason; ``trail`` the
    path from the outermost value down to it (list indexes, dict keys).
    """

    def __init__(self, what: str, why: str, *, type_name: str | None = None,
                 trail: list[object] | None = None) -> None:
        self.what, self.why = what, why
        self.type_name = type_name
        self.trail: list[object] = [] if trail is None else trail
        super().__init__(f"{what} cannot be stored: {why}")

    def where(self) -> str:
        """The trail as Python subscripts, e.g. ``["items"][2]``."""
        return "".join(f"[{step!r}]" for step in self.trail)
