"""What one durable commit costs, and the floor each commit-path design puts under it.

Measured in one run, on the same file system, each as N commits of a record of
``RECORD`` bytes plus a small index update (what a tool outcome commit writes):

- ``bide store``: a real bide store's durable commits (LMDB: the pages flushed
  under the writer lock, the meta page flushed after it: ``durable_point.py``);
- ``write-ahead file``: one append of the record to a pre-zeroed file and one
  ``fdatasync`` per commit, what a write-ahead log in front of LMDB would pay
  at commit;
- ``lmdb, no flush, snapshot pinned``: LMDB committed without flushes while a
  reader holds the last flushed snapshot, flushed every 200 commits. A
  write-ahead file is only power-cut safe if, after a cut, LMDB can be brought
  back to a snapshot the log starts from; LMDB (0.9) reuses freed pages, so
  that snapshot's pages must not be reused until the next one is flushed: a
  pinned reader is how LMDB keeps them. These are the bytes LMDB still writes
  per commit behind such a log;
- ``lmdb, no flush, nothing pinned``: the same without the pin (what ``fast``
  does): pages are reused and rewritten in the page cache, few bytes reach the
  device, and a power cut can leave the file unreadable (``tests/test_power_cut``).

Device bytes are ``write_bytes`` of ``/proc/self/io``. The target for device bytes
per durable commit is ``1.2 x (4 KB + the record)``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from .kit.verdicts import verdict
from .physical import available, device_writes

RECORD = 300  # bytes: a tool outcome record with its index entries
PAGE = 4096
TARGET_DEVICE = 1.2  # x (one page + the record)


def _bide_store(root: Path, n: int) -> tuple[float, int]:
    from ..engine.storage.lmdb_store import LMDBStore  # the bench's look inside the store

    store = LMDBStore(root / "bide", durability="durable")
    try:
        def put(i: int) -> None:
            def body(txn: Any) -> None:
                txn.put(b"bench-%08d" % i, b"r" * RECORD, db=store.dbs["meta"])
            store._write(body)

        for i in range(50):  # warm: the tree's pages exist
            put(i)
        with device_writes() as dev:
            t0 = time.perf_counter()
            for i in range(n):
                put(50 + i)
            seconds = time.perf_counter() - t0
    finally:
        store.close()
    return seconds / n, dev.bytes // n


def _write_ahead(root: Path, n: int) -> tuple[float, int]:
    path = root / "wal"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        for k in range((n * (RECORD + 64)) // PAGE + 2):  # zeroed page by page, flushed
            os.pwrite(fd, b"\0" * PAGE, k * PAGE)
        os.fsync(fd)
        frame = b"f" * (RECORD + 32)  # the record with a frame header and checksum
        with device_writes() as dev:
            t0 = time.perf_counter()
            for i in range(n):
                os.pwrite(fd, frame, i * len(frame))
                os.fdatasync(fd)
            seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
    return seconds / n, dev.bytes // n


def _lmdb_unflushed(root: Path, n: int, *, pinned: bool) -> tuple[float, int, int]:
    import lmdb

    path = root / ("pinned" if pinned else "unpinned")
    env = lmdb.open(str(path), map_size=1 << 30, max_dbs=4, sync=False, metasync=False,
                    readahead=False)
    try:
        db = env.open_db(b"t")
        with env.begin(write=True) as txn:
            for i in range(300):
                txn.put(b"k%06d" % i, b"v" * 100, db=db)
        env.sync(True)
        pin = env.begin() if pinned else None
        with device_writes() as dev:
            t0 = time.perf_counter()
            for i in range(n):
                with env.begin(write=True) as txn:
                    txn.put(b"log%08d" % i, b"r" * RECORD, db=db)
                    txn.put(b"k%06d" % (i % 300), b"v" * 100, db=db)
                if pin is not None and i % 200 == 199:  # the next safe snapshot
                    env.sync(True)
                    pin.abort()
                    pin = env.begin()
            env.sync(True)
            seconds = time.perf_counter() - t0
        if pin is not None:
            pin.abort()
        size = (path / "data.mdb").stat().st_size
    finally:
        env.close()
    return seconds / n, dev.bytes // n, size


def run(*, quick: bool = False, home: Path | None = None) -> dict[str, Any]:
    n = 200 if quick else 2000
    skip = available()
    root = Path(tempfile.mkdtemp(prefix="bide-commit-", dir=home))
    try:
        rows: list[dict[str, Any]] = []
        ms, dev = _bide_store(root, n)
        rows.append({"design": "bide store (durable)", "ms": ms * 1e3, "device_bytes": dev})
        ms, dev = _write_ahead(root, n)
        rows.append({"design": "write-ahead file (append + fdatasync)", "ms": ms * 1e3,
                     "device_bytes": dev})
        for pinned in (True, False):
            ms, dev, size = _lmdb_unflushed(root, n, pinned=pinned)
            kept = "snapshot pinned" if pinned else "nothing pinned"
            rows.append({"design": f"lmdb, no flush, {kept}", "ms": ms * 1e3,
                         "device_bytes": dev, "file_bytes": size})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    limit = TARGET_DEVICE * (PAGE + RECORD)
    bide_bytes = rows[0]["device_bytes"]
    behind = rows[1]["device_bytes"] + rows[2]["device_bytes"]
    return {"commits": n, "rows": rows, "skipped": skip,
            "target": {"target": "device bytes per durable commit",
                       "limit": f"<= {limit:.0f} B", "measured": bide_bytes,
                       "met": None if skip else bide_bytes <= limit,
                       "bound": behind}}


def render(out: dict[str, Any]) -> str:
    lines = [f"One durable commit ({out['commits']} commits of a {RECORD} B record)",
             f"{'design':<40}{'ms/commit':>10}{'device B/commit':>17}"]
    for r in out["rows"]:
        lines.append(f"{r['design']:<40}{r['ms']:>10.3f}{r['device_bytes']:>17.0f}"
                     + (f"   (file {r['file_bytes'] >> 10} KB)" if "file_bytes" in r else ""))
    t = out["target"]
    lines.append(f"  {t['target']} ({t['limit']}): {t['measured']} -> {verdict(t['met'])}")
    if t["met"] is False:
        wal, behind = out["rows"][1]["device_bytes"], out["rows"][2]["device_bytes"]
        lines.append(f"  bound: a write-ahead file alone would write {wal} B a commit, but "
                     f"LMDB behind it, kept power-cut safe (its last flushed snapshot "
                     f"pinned), still writes {behind} B: "
                     f"{t['bound']} B together. Under the limit needs the log out of LMDB's "
                     "copied-on-write pages, or pages reused before they reach the disk, "
                     "which a power cut does not survive.")
    if out["skipped"]:
        lines.append(f"  {out['skipped']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(render(run(quick=args.quick)))


if __name__ == "__main__":
    main()
