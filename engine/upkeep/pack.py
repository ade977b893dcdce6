"""One file to ship: bide, an agent app and their compiled dependencies in a zipapp.

``bide pack agent.pyz --src myagent.py`` copies what runs here — bide, its
dependencies as installed in this environment (the compiled ones too: lmdb,
msgspec, watchfiles), any ``--with`` distribution and their own dependencies, and
the app's sources — into one file built with shiv (``pip install 'bide[pack]'``).
Nothing is downloaded: the file holds exactly what was tested here, and needs no
package index where it runs. On the device, ``python3 agent.pyz watch --app
myagent:flows`` is ``bide watch``; shiv unpacks the file once into ``~/.shiv`` (or
``$SHIV_ROOT``) so compiled modules load, and puts it on ``PYTHONPATH`` for the
worker processes bide starts (``bide demo``, crash-kit workers).

Compiled modules only load on the interpreter they were built for: the file
refuses, with a message naming both, to start on another Python version,
implementation or platform.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..base.errors import PackError

ENTRY = "_bide_packed"  # the zipapp's entry module: checks the interpreter, then runs bide
CODE_SUFFIXES = (".py", ".pyi", ".typed", ".so", ".pyd")


@dataclass(frozen=True)
class PackReport:
    """What ``pack`` wrote: the file, its size, and what it holds."""

    path: Path
    size: int
    distributions: list[str]  # "name version", sorted
    sources: list[str]
    python: str  # the interpreter it runs on: "cpython-3.11-linux-x86_64"


def interpreter_tag() -> str:
    """The interpreter compiled modules were built for: implementation, version, platform."""
    v = sys.version_info
    return (f"{sys.implementation.name}-{v.major}.{v.minor}-{sys.platform}-"
            f"{platform.machine().lower()}")


def pack(out: str | Path, *, sources: Sequence[str | Path] = (),
         distributions: Sequence[str] = (), python: str = "/usr/bin/env python3") -> PackReport:
    """Write ``out``: a zipapp of bide, ``distributions`` and ``sources`` with every
    dependency as installed here, whose entry point is the ``bide`` CLI.

    Args:
        sources: module files or package directories of the app, put on the path as is.
        distributions: installed distributions to add (with their dependencies), as
            names with extras if wanted (``psycopg[binary]``).
        python: the file's ``#!`` line.

    Raises:
        PackError: shiv or packaging is missing, a distribution is not installed, a
            source does not exist, or shiv failed; nothing is written then.
    """
    for needed in ("shiv", "packaging"):
        if importlib.util.find_spec(needed) is None:
            raise PackError(f"bide pack needs {needed}: pip install 'bide[pack]'")
    srcs = [Path(s) for s in sources]
    for src in srcs:
        if not src.exists():
            raise PackError(f"source {str(src)!r} does not exist")
    dists = closure(["bide", *distributions])
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="bide-pack-") as tmp:
        site = Path(tmp) / "site-packages"
        site.mkdir()
        for dist in dists:
            _copy_distribution(dist, site)
        for src in srcs:
            _copy_tree(src, site / src.name) if src.is_dir() else shutil.copy2(src, site)
        if not (site / "bide" / "cli.py").is_file():  # never ship a file that cannot start
            raise PackError(f"bide's code was not found beside {__file__}")
        (site / f"{ENTRY}.py").write_text(_entry_module(interpreter_tag()))
        _shiv(site, out, python)
    return PackReport(path=out, size=out.stat().st_size,
                      distributions=sorted(f"{_name(d)} {d.version}" for d in dists),
                      sources=[str(s) for s in srcs], python=interpreter_tag())


def closure(names: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need, theirs included (markers evaluated here)."""
    from packaging.requirements import Requirement

    todo = []
    for name in names:  # "psycopg[binary]": a distribution with extras
        try:
            wanted = Requirement(name)
        except ValueError:
            raise PackError(f"{name!r} is not a distribution name") from None
        todo.append((wanted.name, frozenset(wanted.extras)))
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        key = _canonical(name)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        try:
            dist = found.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise PackError(f"distribution {name!r} is not installed here: install it "
                            "(pip install ...) before packing") from None
        found[key] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in ("", *extras)]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return list(found.values())


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _name(dist: metadata.Distribution) -> str:
    return str(dist.metadata["Name"])


def _editable(dist: metadata.Distribution) -> bool:
    text = dist.read_text("direct_url.json")
    return text is not None and bool(json.loads(text).get("dir_info", {}).get("editable"))


def _copy_distribution(dist: metadata.Distribution, site: Path) -> None:
    """Copy an installed distribution's files (an editable one: its packages' code).

    bide itself is always copied from the code running this, as if editable: the
    ``bide`` metadata found first on the path may be another copy's.
    """
    itself = _canonical(_name(dist)) == "bide"
    editable = _editable(dist) or itself
    for f in dist.files or []:
        if ".." in f.parts or "__pycache__" in f.parts or f.suffix == ".pyc":
            continue  # scripts outside site-packages; bytecode is rebuilt where it runs
        if itself and not f.parts[0].endswith((".dist-info", ".egg-info")):
            continue  # its metadata only (a checkout's bide.egg-info lists its sources)
        if editable and (f.name.startswith("__editable__") or f.suffix == ".pth"
                         or f.name in ("direct_url.json", "RECORD")):
            continue  # the editable hook points at this machine's checkout
        src = Path(str(dist.locate_file(f)))
        if src.is_file():
            dest = site / f
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    if _canonical(_name(dist)) == "bide":
        _copy_tree(Path(__file__).resolve().parents[2], site / "bide")  # bide/engine/upkeep/
    elif editable:
        for top in (dist.read_text("top_level.txt") or _name(dist)).split():
            spec = importlib.util.find_spec(top)
            if spec is None or not spec.submodule_search_locations:
                raise PackError(f"cannot find the code of editable distribution {top!r}")
            _copy_tree(Path(list(spec.submodule_search_locations)[0]), site / top)


def _copy_tree(src: Path, dest: Path) -> None:
    """A package's code: its modules and typing marker, and its subpackages (directories
    with ``__init__.py``), not its tests, results or caches."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists() and path.name != "__pycache__":
            _copy_tree(path, dest / path.name)
        elif path.is_file() and path.suffix in CODE_SUFFIXES:
            shutil.copy2(path, dest / path.name)


def _entry_module(tag: str) -> str:
    return f'''"""bide, packed by ``bide pack`` for {tag}."""
import platform
import sys

BUILT_FOR = {tag!r}


def here():
    v = sys.version_info
    return (f"{{sys.implementation.name}}-{{v.major}}.{{v.minor}}-{{sys.platform}}-"
            f"{{platform.machine().lower()}}")


def main():
    if here() != BUILT_FOR:
        sys.exit(f"this file was packed for {{BUILT_FOR}} and cannot run on {{here()}}: "
                 "its compiled modules need that interpreter (pack it again there)")
    from bide.cli import main as bide

    bide()
'''


def _shiv(site: Path, out: Path, python: str) -> None:
    cmd = [sys.executable, "-m", "shiv", "--site-packages", str(site), "-o", str(out),
           "-e", f"{ENTRY}:main", "-p", python, "--reproducible",
           "--extend-pythonpath"]  # bide demo and crash-kit workers start python -m bide...
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise PackError(f"shiv failed ({done.returncode}): "
                        f"{(done.stderr or done.stdout).strip()[-2000:]}")
