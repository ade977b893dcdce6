"""A package's import graph read with ``ast``: every import, anywhere in a module.

Imports at module level, inside functions and under ``TYPE_CHECKING`` all count: each
is a dependency someone must understand. ``tests/test_layers.py`` checks the layers and
circles of bide with it, ``tests/test_step_scope.py`` one edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

SKIP = {"tests", "build", ".git"}


def modules(root: Path, name: str) -> dict[str, Path]:
    """Every module of the package at ``root`` (called ``name``), by dotted name."""
    found = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[0] in SKIP or any(p.startswith(".") or "venv" in p for p in rel.parts):
            continue
        parts = (name, *rel.with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Which modules of ``mods`` each one imports (any kind of import, anywhere in it)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found = [target, *(f"{target}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            for name in found:
                while name and name not in mods:  # `import a.b.c` imports a.b.c's packages
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    graph[mod].add(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out
