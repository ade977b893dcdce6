"""Hostile inbox files: a deterministic corpus, and a run of a watcher through it.

Most files aim at a *real* pending approval (ids and digests are deterministic),
so only the inbox's checks stand between them and a run going on. Special files
(symlinks, FIFOs, hard links, directories, world-writable files) cannot live in
git; ``special_files`` makes them at run time, with valid content.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

KEY = b"torture-key"
LIVE, EXPIRED, OLD, GOOD = "r-live", "r-expiring", "r-old", "r-good"


def aid(run_id: str) -> str:
    from bide.engine.run.approvals import approval_id

    return approval_id(run_id, "1:apply_patch:0", 0)


def digest(patch: str = "p-9") -> str:
    from bide.engine.run.approvals import digest_of

    return digest_of("apply patch", {"patch": patch})


def valid(run_id: str = LIVE, **extra: Any) -> dict[str, Any]:
    return {"approval_id": aid(run_id), "decision": "approve", "by": "mallory",
            "reason": "looks fine", "run_id": run_id, "digest": digest(), **extra}


def _dump(body: Any) -> bytes:
    return json.dumps(body).encode()


def generate() -> list[dict[str, Any]]:
    """Every hostile file: ``{"name", "data", "category", "home"}`` (home: plain|signed)."""
    out: list[dict[str, Any]] = []

    def add(category: str, data: bytes, name: str | None = None, home: str = "plain") -> None:
        out.append({"name": name or f"{category}-{len(out):04d}.json", "data": data,
                    "category": category, "home": home})

    base = _dump(valid())
    for n in range(len(base)):
        add("truncated", base[:n])
    for size in (64 * 1024 + 1, 70_000, 100_000):
        body = valid(reason="x" * size)
        add("oversize", _dump(body))
    add("oversize", base + b" " * (64 * 1024))
    for depth in (3_000, 10_000, 30_000):
        add("deep-nesting", b'{"approval_id": "%s", "decision": "approve", "result": %s1%s}'
            % (aid(LIVE).encode(), b"[" * depth, b"]" * depth))
        add("deep-nesting", b'{"approval_id": "%s", "decision": "approve", "result": %s1%s}'
            % (aid(LIVE).encode(), b'{"a":' * depth, b"}" * depth))
    for field in ("approval_id", "decision", "by", "run_id", "digest", "reason"):
        text = base.decode()[:-1] + f', "{field}": "other"}}'
        add("duplicate-keys", text.encode())
        add("duplicate-keys", text.replace('"other"', json.dumps(valid()[field])).encode())
    for const in ("NaN", "Infinity", "-Infinity"):
        for field in ("result", "by", "approval_id", "digest", "extra"):
            add("nan-infinity", base[:-1] + f', "{field}": {const}}}'.encode())
    for digits in (20, 400, 5_000, 50_000):
        big = "9" * digits
        add("huge-int", base[:-1] + f', "result": {big}}}'.encode())
        add("huge-int", base[:-1] + f', "result": -{big}}}'.encode())
        add("huge-int", base.replace(f'"{aid(LIVE)}"'.encode(), big.encode()))
    for bad in (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80",
                b"\xe2\x82", b"\xc0\xaf", b"\xfe\xfe\xff\xff", b"\xed\xbf\xbf"):
        add("invalid-utf8", base.replace(b"mallory", b"mal" + bad + b"lory"))
        add("invalid-utf8", bad + base)
    add("invalid-utf8", b"\xef\xbb\xbf" + base)  # a BOM: JSON text must not start with one
    add("invalid-utf8", base.decode().encode("utf-16"))
    add("invalid-utf8", base.decode().encode("utf-32"))
    for field in ("approval_id", "decision", "by", "reason", "run_id", "digest", "sig"):
        for value in (0, 1.5, True, None, [], ["x"], {}, {"a": 1}, ""):
            if field in ("by", "reason", "run_id", "digest", "sig") and value is None:
                continue  # absent-or-null is allowed for these
            if field in ("by", "reason", "sig") and value == "":
                continue  # an empty string is a string
            add("wrong-type", _dump({**valid(), field: value}))
    for top in ([], [valid()], "approve", 1, None, True):
        add("wrong-type", _dump(top))
    for field in ("state_version", "approved", "Decision", "approval-id", "__proto__",
                  "constructor", "x" * 300, "", " approval_id", "run"):
        add("unknown-field", _dump({**valid(), field: "1"}))
    add("unknown-field", _dump({"approval_id": aid(LIVE)}))
    add("unknown-field", _dump({"decision": "approve"}))
    for decision in ("APPROVE", "approved", "yes", "mark_done", "retry", "abort", "approve ",
                     "approve\x00", "reject\n", "1"):
        add("bad-decision", _dump({**valid(), "decision": decision}))
    traversal = ["..%2f..%2fetc%2fpasswd.json", "..\\..\\windows\\x.json", "a..b.json",
                 "~root.json", "-rf.json", "x" * 240 + ".json", "line\nbreak.json",
                 "tab\there.json", "ünïcödé.json", "sp ace.json", "$(reboot).json",
                 "`id`.json", "processed.json", "rejected.json", "x.json.error.json",
                 ".work.json", "NUL.json", "con.json", "a;b.json", "%00.json"]
    for name in traversal:
        add("path-traversal-name", _dump(valid(run_id=OLD, decision="reject")), name=name)
    for i, name in enumerate(traversal):
        add("path-traversal-name", _dump({**valid(), "approval_id": f"../../{name}"}),
            name=f"traversal-id-{i}.json")
    for run in (OLD,):
        add("replay", _dump({**valid(run), "decision": "reject"}))
        for i in range(9):
            add("replay", _dump({**valid(run), "decision": "reject", "reason": f"again {i}"}))
    for patch in ("p-8", "p-10", "", "p-9 "):
        add("stale-state", _dump({**valid(), "digest": digest(patch)}))
    for v in range(5):
        add("stale-state", _dump({**valid(), "state_version": v}))
    add("stale-state", _dump({**valid(), "digest": "sha256:" + "0" * 64}))
    for other in (OLD, EXPIRED, GOOD + "-0", "r-nope", "", "r-live "):
        add("other-run", _dump({**valid(), "run_id": other}))
        add("other-run", _dump({**valid(), "approval_id": aid(other or "x")}))
    add("expired", _dump(valid(EXPIRED)))
    for i in range(9):
        add("expired", _dump(valid(EXPIRED, reason=f"late {i}")))
    from bide.engine.human.inbox import sign

    for key, mutate in [
        (None, {}), (b"wrong-key", {}), (KEY, {"by": "someone else"}),
        (KEY, {"decision": "reject"}), (KEY, {"run_id": OLD}), (b"", {}),
    ]:
        body = valid()
        if key is not None:
            body["sig"] = sign(body, key)
        body.update(mutate)
        add("signature", _dump(body), home="signed")
        add("signature", _dump({**body, "sig": (body.get("sig") or "")[:-1] + "0"}),
            home="signed")
    fields = valid()
    signed = _dump({**fields, "sig": sign(fields, KEY)})
    for n in range(0, len(signed), 3):
        add("truncated", signed[:n], home="signed")
    for blob in (b"", b" ", b"\n", b"{}", b"null", b"\xef\xbb\xbf", b"[]", b'""', b"{,}",
                 b"\x00" * 64):
        add("empty", blob)
    for sig in ("", "00", "z" * 64, "A" * 64, sign(valid(), KEY).upper(), " " + sign(valid(), KEY)):
        add("signature", _dump({**valid(), "sig": sig}), home="signed")
    return out


def special_files(inbox: Path, scratch: Path) -> list[str]:
    """Symlinks, a FIFO, a hard link, a directory, a world-writable file: valid content."""
    scratch.mkdir(parents=True, exist_ok=True)
    good = scratch / "valid.json"
    good.write_bytes(_dump(valid()))
    names = []

    def made(name: str) -> None:
        names.append(name)

    os.symlink(good, inbox / "symlink.json")
    made("symlink.json")
    os.symlink(scratch / "missing.json", inbox / "dangling.json")
    made("dangling.json")
    os.symlink("/dev/zero", inbox / "dev-zero.json")
    made("dev-zero.json")
    os.mkfifo(inbox / "fifo.json")
    made("fifo.json")
    os.link(good, inbox / "hardlink.json")
    made("hardlink.json")
    (inbox / "directory.json").mkdir()
    (inbox / "directory.json" / "inner.json").write_bytes(_dump(valid()))
    made("directory.json")
    ww = inbox / ".ww.tmp"
    ww.write_bytes(_dump(valid()))
    os.chmod(ww, 0o666)
    os.rename(ww, inbox / "world-writable.json")
    os.chmod(inbox / "world-writable.json", 0o666)
    made("world-writable.json")
    return names


def corpus_size() -> int:
    return len(generate())


def _make_homes(base: Path, goods: int) -> dict[str, Path]:
    """A plain and a signed home: a live approval, an expired one, an old decided run."""
    import bide

    from .workloads import World, build_flow

    homes = {}
    world = World(base / "effects")
    for kind in ("plain", "signed"):
        home = base / kind
        with bide.open(home, durability="fast", approval_key=KEY if kind == "signed" else None,
                       clock=time.time) as eng:
            eng.register(build_flow("approval", world))
            flow = "torture-approval"
            for run in (LIVE, OLD, EXPIRED, *(f"{GOOD}-{i}" for i in range(goods))):
                eng.start(flow, run_id=run, input={"expires_in": 0.001} if run == EXPIRED
                          else {})
            eng.decide(aid(OLD), "approve", by="alice")
            eng.resume(OLD)
        homes[kind] = home
    return homes


def run_corpus(base: Path, files: list[dict[str, Any]] | None = None,
               count: int | None = None) -> dict[str, Any]:
    """Drop every hostile file (good files between them) into a served inbox; check."""
    import bide
    from bide.engine.human.inbox import drop_decision
    from bide.engine.ops.watcher import Watcher

    from .workloads import World, build_flow

    base = Path(base) / f"corpus-{os.getpid()}-{time.monotonic_ns()}"
    files = files if files is not None else generate()
    if count is not None:
        files = files[:count]
    goods = 8
    homes = _make_homes(base, goods)
    world = World(base / "effects")
    violations: list[str] = []
    crashes = 0
    dropped = {"plain": 0, "signed": 0}
    hostile: dict[str, set[str]] = {"plain": set(), "signed": set()}
    batches = [files[i::goods] for i in range(goods)]
    clock_now = [time.time() + 1.0]  # EXPIRED's request (expires_in 0.001) is now late
    for kind, home in homes.items():
        key = KEY if kind == "signed" else None
        with bide.open(home, durability="fast", approval_key=key,
                       clock=lambda: clock_now[0]) as eng:
            eng.register(build_flow("approval", world))
            inbox = home / "inbox"
            names = special_files(inbox, base / f"scratch-{kind}") if kind == "plain" else []
            hostile[kind].update(names)
            dropped[kind] += len(names)
            for i, batch in enumerate(batches):
                for f in batch:
                    if f["home"] != kind:
                        continue
                    tmp = inbox / f".drop-{dropped[kind]}.tmp"
                    tmp.write_bytes(f["data"])
                    target = inbox / f["name"]
                    if target.exists():
                        target = inbox / f"dup{dropped[kind]}-{f['name']}"
                    os.rename(tmp, target)
                    hostile[kind].add(target.name)
                    dropped[kind] += 1
                good = f"{GOOD}-{i}"
                body = {"run_id": good, "digest": digest()}
                drop_decision(home, aid(good), "approve", by="ops", key=key, **body)
                dropped[kind] += 1
                try:
                    Watcher(eng, log=lambda line: None).once()
                except Exception as exc:  # noqa: BLE001 - counted: the watcher must survive
                    crashes += 1
                    violations.append(f"watcher crashed on {kind} batch {i}: {exc!r}")
            for i in range(goods):
                status = eng.get(f"{GOOD}-{i}").status.value
                if status != "DONE":
                    violations.append(f"good run {GOOD}-{i} in {kind} is {status}, not DONE")
            live = eng.get(LIVE)
            if live.status.value != "WAITING_APPROVAL":
                violations.append(f"{LIVE} in {kind} moved to {live.status.value}")
        rejected, reasons = _rejected(inbox / "rejected")
        processed = set(os.listdir(inbox / "processed"))
        left = [n for n in os.listdir(inbox) if n not in ("processed", "rejected", ".work")]
        ignored = {n for n in hostile[kind] if n.startswith(".")}  # in-progress names: kept
        hostile[kind] -= ignored
        dropped[kind] -= len(ignored)
        if set(left) != ignored or os.listdir(inbox / ".work"):
            violations.append(f"files left in the {kind} inbox: {left}")
        for name in hostile[kind]:
            if name not in rejected:
                where = "processed" if name in processed else "nowhere"
                violations.append(f"hostile {name!r} was not rejected ({where})")
        if len(os.listdir(inbox / "rejected")) - reasons + len(processed) != dropped[kind]:
            violations.append(f"{kind}: {dropped[kind]} dropped, {len(rejected)} rejected + "
                              f"{len(processed)} processed: something was deleted")
    effects = world.lines()
    pushed = sum(n for k, n in effects.items() if k.startswith("tool:git_push"))
    if pushed != 2 * goods + 2:  # each good run in both homes, and OLD in both
        violations.append(f"{pushed} pushes happened, expected {2 * goods + 2}")
    total = sum(len(v) for v in hostile.values())
    rejected_ok = total - sum(1 for v in violations if v.startswith("hostile"))
    shutil.rmtree(base, ignore_errors=True) if not violations else None
    return {"hostile_total": total, "hostile_rejected": rejected_ok,
            "watcher_crashes": crashes, "violations": violations,
            "categories": sorted({f["category"] for f in files}), "dir": str(base)}


def _rejected(folder: Path) -> tuple[set[str], int]:
    """Names rejected with a reason (from the reason files), and how many reason files."""
    names, reasons = set(), 0
    for n in os.listdir(folder):
        if not n.endswith(".error.json") or not (folder / n).is_file():
            continue
        try:
            body = json.loads((folder / n).read_bytes())
        except ValueError:
            continue  # a hostile file that happens to be named *.error.json
        if isinstance(body, dict) and set(body) == {"file", "error", "at"} and body["error"]:
            names.add(body["file"])
            reasons += 1
    return names, reasons


def write_corpus(folder: Path) -> int:
    """Write the corpus as regression seeds: safe file names and a manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = []
    for i, f in enumerate(generate()):
        safe = f"{i:04d}-{f['category']}.bin"
        (folder / safe).write_bytes(f["data"])
        manifest.append({"file": safe, "name": f["name"], "category": f["category"],
                         "home": f["home"]})
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=True))
    return len(manifest)


def read_corpus(folder: Path) -> list[dict[str, Any]]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return [{**m, "data": (folder / m["file"]).read_bytes()} for m in manifest]


_ = stat  # special files are checked by the inbox with stat; kept for readers of this module
