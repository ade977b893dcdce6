"""Key shapes shared by the derived tables (``index`` re-exports them).

Big-endian sequence numbers sort as numbers; a run's keys share ``run ␀``.
"""

from __future__ import annotations

import struct

_SEQ = struct.Struct(">Q")


def seq_key(seq: int) -> bytes:
    """Big-endian so byte order is numeric order (LMDB's append path needs it)."""
    return _SEQ.pack(seq)


def seq_of(key: bytes) -> int:
    return _SEQ.unpack(key[-8:])[0]


def run_prefix(run_id: str) -> bytes:
    return run_id.encode() + b"\x00"


def runlog_key(run_id: str, seq: int) -> bytes:
    return run_prefix(run_id) + seq_key(seq)


def intent_key(run_id: str, key: str) -> bytes:
    return run_prefix(run_id) + key.encode()
