"""Rebuild the files a power cut could have left, from a write log (``writelog.c``).

A power cut keeps every write a flush made durable and, of the rest, whatever the
kernel happened to write back: for each 4 KB page, the page as it stood after some
prefix of its unflushed writes (none of them, all of them, or any count between),
independently of every other page and file. ``image`` builds one such disk for a
cut at a point of the log, chosen by a seed; ``acknowledged`` reads which lines a
workload had written to its acknowledgement file before that point (that file lives
outside the rebuilt store: the world, not the disk, heard them).

Not modeled: torn sectors inside a page, and directory entries (the files a test
rebuilds exist from their first write: the store creates them before it acknowledges
anything).
"""

from __future__ import annotations

import random
import struct
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PAGE = 4096
_HEAD = struct.Struct("<4scIH")


@dataclass(frozen=True)
class Entry:
    at: int  # where the entry starts in the log: its place in the order of events
    kind: str  # W write, T truncate, S flush
    pid: int
    path: str
    a: int  # W: file offset; T: new size; S: log position the flush covers up to
    data: bytes = b""


def read_log(log: Path) -> list[Entry]:
    raw = log.read_bytes()
    entries, pos = [], 0
    while pos < len(raw):
        magic, kind, pid, plen = _HEAD.unpack_from(raw, pos)
        if magic != b"BIDW":
            raise ValueError(f"{log}: no entry at byte {pos} (magic {magic!r})")
        start, pos = pos, pos + _HEAD.size
        path = raw[pos:pos + plen].decode()
        pos += plen
        (a,) = struct.unpack_from("<Q", raw, pos)
        pos += 8
        data = b""
        if kind == b"W":
            (n,) = struct.unpack_from("<I", raw, pos)
            data, pos = raw[pos + 4:pos + 4 + n], pos + 4 + n
        entries.append(Entry(start, kind.decode(), pid, path, a, data))
    return entries


def cut_points(entries: list[Entry]) -> list[int]:
    """Every place a cut can fall: before each entry, and after the last."""
    return [e.at for e in entries] + [entries[-1].at + 1 if entries else 0]


def acknowledged(entries: list[Entry], acks: Path, cut: int) -> list[str]:
    """The lines written to ``acks`` before ``cut`` (whole lines only)."""
    text = b"".join(e.data for e in entries
                    if e.at < cut and e.kind == "W" and e.path == str(acks))
    return text.decode().splitlines()[:text.count(b"\n")]


def _durable_before(entries: list[Entry], cut: int) -> dict[str, int]:
    """For each file, the log position before which its writes are surely on disk."""
    covered: dict[str, int] = defaultdict(int)
    for e in entries:
        if e.at < cut and e.kind == "S":
            covered[e.path] = max(covered[e.path], e.a)
    return covered


def image(entries: list[Entry], root: Path, target: Path, cut: int, seed: int, *,
          keep: str = "random", skip: tuple[str, ...] = ("lock.mdb",)) -> None:
    """Write into ``target`` the files under ``root`` as a power cut at ``cut`` left them.

    keep: ``random`` (each page keeps a random prefix of its unflushed writes), ``none``
    (every unflushed write lost: the power failed before any write-back), or ``all``
    (what a killed process leaves: the page cache survives).
    """
    rng = random.Random(seed)
    covered = _durable_before(entries, cut)
    files: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        if e.at < cut and e.kind in "WT" and e.path.startswith(str(root) + "/") \
                and Path(e.path).name not in skip:
            files[e.path].append(e)
    for path, writes in files.items():
        unflushed: dict[int, int] = defaultdict(int)  # page -> unflushed writes touching it
        for e in writes:
            if e.at >= covered[path] and e.kind == "W":
                for page in range(e.a // PAGE, (e.a + len(e.data) - 1) // PAGE + 1):
                    unflushed[page] += 1
        kept = {page: (n if keep == "all" else 0 if keep == "none" else rng.randint(0, n))
                for page, n in unflushed.items()}
        seen: dict[int, int] = defaultdict(int)
        content = bytearray()
        for e in writes:
            durable = e.at < covered[path]
            if e.kind == "T":
                if durable or keep == "all" or (keep == "random" and rng.random() < 0.5):
                    del content[e.a:]
                    content.extend(b"\0" * (e.a - len(content)))
                continue
            for page in range(e.a // PAGE, (e.a + len(e.data) - 1) // PAGE + 1):
                if not durable:
                    seen[page] += 1
                    if seen[page] > kept[page]:
                        continue
                lo, hi = max(e.a, page * PAGE), min(e.a + len(e.data), (page + 1) * PAGE)
                if len(content) < hi:
                    content.extend(b"\0" * (hi - len(content)))
                content[lo:hi] = e.data[lo - e.a:hi - e.a]
        out = target / Path(path).relative_to(root)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(bytes(content))
