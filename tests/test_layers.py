"""The engine's layers hold: every import points down the layer list, and none goes in a circle.

``bide.engine.LAYERS`` is the contract (its docstring draws it). This test reads every
module of the package with ``ast`` — imports at module level, inside functions and
under ``TYPE_CHECKING`` alike, since each is a dependency someone must understand —
and fails on:

- a module directly in ``engine/`` (each belongs to a layer's subpackage);
- an import from a lower layer to a higher one, or between the independent top
  layers (``serve``, ``langgraph``), or from ``bide.formats`` into the engine;
- any import circle in the package, within a layer or across (Tarjan's SCCs).

``test_a_planted_circle_is_found`` runs the same check on a package made for it, so
the check itself is known to fail when it should.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import bide
import bide.engine as engine
from import_graph import circles, imports, modules

ROOT = Path(bide.__file__).resolve().parent


def layer_of(mod: str, top: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == [top, "engine"] else None


def violations(graph: dict[str, set[str]], top: str, layers: tuple[str, ...],
               independent: tuple[str, ...]) -> list[str]:
    rank = {name: i for i, name in enumerate(layers)}
    bad = []
    for mod, targets in sorted(graph.items()):
        mine = layer_of(mod, top)
        for target in sorted(targets):
            theirs = layer_of(target, top)
            if mod.startswith(f"{top}.formats") and target.startswith(f"{top}.engine"):
                bad.append(f"{mod} -> {target}: the records import nothing of the engine")
            if mine is None or theirs is None or mine == theirs:
                continue
            if mine in independent and theirs in independent:
                bad.append(f"{mod} -> {target}: {mine} and {theirs} are independent")
            elif rank[theirs] > rank[mine]:
                bad.append(f"{mod} -> {target}: {mine} may not import {theirs}, a higher layer")
    return bad


def test_every_engine_module_belongs_to_a_layer() -> None:
    loose = [p.name for p in (ROOT / "engine").glob("*.py") if p.name != "__init__.py"]
    assert loose == [], f"modules outside any layer: {loose}"
    packages = {p.name for p in (ROOT / "engine").iterdir()
                if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(engine.LAYERS)
    for layer in engine.LAYERS:
        doc = ast.get_docstring(ast.parse((ROOT / "engine" / layer / "__init__.py").read_text()))
        assert doc, f"engine/{layer}/__init__.py says nothing of what lives there"
        if layer != "langgraph":
            assert "May import" in doc, f"engine/{layer}/__init__.py: what may it import?"


def test_imports_follow_the_layers() -> None:
    graph = imports(modules(ROOT, "bide"))
    assert violations(graph, "bide", engine.LAYERS, engine.INDEPENDENT) == []


def test_the_package_has_no_import_circle() -> None:
    assert circles(imports(modules(ROOT, "bide"))) == []


def test_the_bench_kit_imports_no_area() -> None:
    graph = imports(modules(ROOT, "bide"))
    up = [f"{m} -> {t}" for m, ts in graph.items() if m.startswith("bide.bench.kit")
          for t in ts if t.startswith("bide.bench.") and not t.startswith("bide.bench.kit")]
    assert up == []


def test_old_paths_cover_every_module_and_lead_to_one() -> None:
    mods = modules(ROOT, "bide")
    for old, new in engine.OLD_PATHS.items():
        assert f"bide.engine.{new}" in mods, (old, new)
        assert not (ROOT / "engine" / f"{old}.py").exists()


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return imports(modules(root, "pkg"))


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    graph = _plant(tmp_path, {
        "__init__.py": "",
        "engine/__init__.py": "",
        "engine/run/__init__.py": "",
        "engine/run/a.py": "from . import b\n",
        "engine/run/b.py": "def f():\n    from .c import x\n",  # inside a function
        "engine/run/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                           "    from .a import y\n",
    })
    assert circles(graph) == [["pkg.engine.run.a", "pkg.engine.run.b", "pkg.engine.run.c"]]


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    graph = _plant(tmp_path, {
        "__init__.py": "",
        "engine/__init__.py": "",
        "engine/storage/__init__.py": "",
        "engine/storage/s.py": "import pkg.engine.api.r\n",
        "engine/api/__init__.py": "",
        "engine/api/r.py": "from ..storage import s\n",
        "engine/serve/__init__.py": "",
        "engine/serve/h.py": "from ..langgraph.g import x\n",
        "engine/langgraph/__init__.py": "",
        "engine/langgraph/g.py": "x = 1\n",
        "formats/__init__.py": "from ..engine.storage import s\n",
    })
    found = violations(graph, "pkg", ("storage", "api", "serve", "langgraph"),
                       ("serve", "langgraph"))
    assert found == [
        "pkg.engine.serve.h -> pkg.engine.langgraph.g: serve and langgraph are independent",
        "pkg.engine.storage.s -> pkg.engine.api.r: storage may not import api, a higher layer",
        "pkg.formats -> pkg.engine.storage: the records import nothing of the engine",
        "pkg.formats -> pkg.engine.storage.s: the records import nothing of the engine",
    ]
