"""A list index value kept as bytes: items are added as their own encodings.

The latest-state index (engine/storage/latest.py) rewrites a list's open tail chunk at
every append. Decoding the tail, appending, and encoding every item again cost
more than the rest of the fold. A msgpack array is its length then its items'
encodings one after another, and ``pack_value(items)`` frames exactly that, so
a tail read as ``(count, body)`` grows by concatenation and packs to the same
bytes as ``pack_value`` of the decoded list plus the new items (a test holds
the two equal).
"""

from __future__ import annotations

import struct

from .envelope import frame_index, unframe_index
from .errors import CorruptIndex

_FIX, _ARRAY16, _ARRAY32 = 0x90, 0xDC, 0xDD
_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")


class PackedList:
    """A list's items as ``count`` and their encodings (``check_serializable``'s bytes)."""

    __slots__ = ("count", "parts")

    def __init__(self) -> None:
        self.count = 0
        self.parts: list[bytes] = []

    @classmethod
    def unpacked(cls, raw: bytes, *, table: str, key: bytes) -> PackedList:
        """The list ``pack_value`` stored as ``raw``, items left encoded.

        Raises:
            CorruptIndex: the checksum fails, or ``raw`` is not an array (names ``table``, ``key``).
        """
        try:
            body = unframe_index(raw)
        except ValueError as exc:
            raise CorruptIndex(table, key, str(exc)) from None
        data = bytes(raw if body is None else body)
        first = data[0] if data else -1
        if _FIX <= first < _FIX + 16:
            count, start = first - _FIX, 1
        elif first == _ARRAY16 and len(data) >= 3:
            count, start = _U16.unpack_from(data, 1)[0], 3
        elif first == _ARRAY32 and len(data) >= 5:
            count, start = _U32.unpack_from(data, 1)[0], 5
        else:
            raise CorruptIndex(table, key, "not a list")
        found = cls()
        found.count = count
        if count:
            found.parts.append(data[start:])
        return found

    def add(self, encoded: bytes) -> None:
        """Append one item, given as its encoding."""
        self.count += 1
        self.parts.append(encoded)

    def extend(self, other: PackedList) -> None:
        self.count += other.count
        self.parts.extend(other.parts)

    def packed(self) -> bytes:
        """The framed value: what ``pack_value`` makes of the list of these items."""
        n = self.count
        if n < 16:
            head = bytes((_FIX + n,))
        elif n < 1 << 16:
            head = bytes((_ARRAY16,)) + _U16.pack(n)
        else:
            head = bytes((_ARRAY32,)) + _U32.pack(n)
        return frame_index(head + b"".join(self.parts))
