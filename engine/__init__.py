"""bide's engine, in layers. Internal: the public names are re-exported by ``bide``.

Each subpackage is one layer and may import only the layers before it in
``LAYERS`` (and ``bide.formats``, the records, below them all); within a layer
the imports form no circle either. ``tests/test_layers.py`` checks both over every
import in the package, at module level, in functions and under ``TYPE_CHECKING``::

    base → storage → postgres → run → human → read → upkeep → api → ops → serve
                                                                      ↘ langgraph

- ``base``: errors, vocabulary, fault points, optional extras, permissions, text
- ``storage``: the Store seam, derived tables, leases, LMDB and in-memory backends
- ``postgres``: the PostgreSQL backend behind the same seam
- ``run``: flows, the executor, ``ctx`` and what a run asks of the world
- ``human``: the inbox, signed decisions, delivering a decision
- ``read``: what the read commands show, events, following a run
- ``upkeep``: doctor, prune, compaction, cancel and fork, config, pack
- ``api``: the Engine (``bide.open``)
- ``ops``: the watcher and ``bide copy``, which drive an Engine
- ``serve`` and ``langgraph``: the HTTP server and the LangGraph checkpointer

A module below the Engine that is handed one names it by the protocol
``run.host.Host``, never by importing ``api``.

The modules used to sit flat in this folder. An import by an old path
(``bide.engine.store``) still works, giving the same module, with a
``DeprecationWarning`` naming the new one: see ``OLD_PATHS``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

LAYERS = ("base", "storage", "postgres", "run", "human", "read", "upkeep", "api", "ops",
          "serve", "langgraph")
# layers at the top that must not import each other (both plug into the Engine)
INDEPENDENT = ("serve", "langgraph")

# old flat module -> its place now (relative to bide.engine)
OLD_PATHS = {
    "approvals": "run.approvals",
    "attention": "storage.attention",
    "blocking": "run.blocking",
    "call_refs": "storage.call_refs",
    "change_feed": "storage.change_feed",
    "children": "run.children",
    "compaction": "upkeep.compaction",
    "context": "run.context",
    "copy_home": "ops.copy_home",
    "copy_verify": "ops.copy_verify",
    "deliver": "human.deliver",
    "dispatch": "ops.dispatch",
    "errors": "base.errors",
    "events": "read.events",
    "executor": "run.executor",
    "extension": "storage.extension",
    "extensions": "storage.extensions",
    "faults": "base.faults",
    "flow": "run.flow",
    "follow": "read.follow",
    "full_disk": "run.full_disk",
    "group_commit": "storage.group_commit",
    "held": "run.held",
    "home_config": "upkeep.home_config",
    "home_files": "upkeep.home_files",
    "host": "run.host",
    "hot_cache": "storage.hot_cache",
    "in_doubt": "human.in_doubt",
    "inbox": "human.inbox",
    "inbox_events": "human.inbox_events",
    "index": "storage.index",
    "inspect": "read.inspect",
    "kept": "storage.kept",
    "keys": "storage.keys",
    "langgraph_index": "storage.langgraph_index",
    "langgraph_store": "langgraph.store",
    "latest": "storage.latest",
    "leases": "storage.leases",
    "lmdb_layout": "storage.lmdb_layout",
    "lmdb_store": "storage.lmdb_store",
    "maintenance": "upkeep.maintenance",
    "memory_store": "storage.memory_store",
    "offload": "base.offload",
    "operations": "upkeep.operations",
    "optional": "base.optional",
    "pack": "upkeep.pack",
    "permissions": "base.permissions",
    "pg_connect": "postgres.connect",
    "pg_follow": "postgres.follow",
    "pg_home": "postgres.home",
    "pg_listen": "postgres.listen",
    "pg_reader": "postgres.reader",
    "pg_store": "postgres.store",
    "pg_url": "postgres.url",
    "planned": "run.planned",
    "policy": "run.policy",
    "readiness": "ops.readiness",
    "recovery": "run.recovery",
    "render": "base.render",
    "renewer": "run.renewer",
    "restore": "storage.restore",
    "run_view": "run.run_view",
    "run_walk": "upkeep.run_walk",
    "runs": "run.runs",
    "runtime": "api.runtime",
    "schedule_index": "storage.schedule_index",
    "schedule_loop": "ops.schedule_loop",
    "schedules": "run.schedules",
    "scripting": "read.scripting",
    "send": "run.send",
    "serve_app": "serve.app",
    "serve_errors": "serve.errors",
    "serve_events": "serve.events",
    "serve_openapi": "serve.openapi",
    "serve_runs": "serve.runs",
    "serve_token": "serve.token",
    "server": "serve.server",
    "siblings": "run.siblings",
    "signal_files": "human.signal_files",
    "signals": "run.signals",
    "signing": "human.signing",
    "state": "run.state",
    "step": "run.step",
    "store": "storage.store",
    "surface": "api.surface",
    "table_reads": "storage.table_reads",
    "task_threads": "run.task_threads",
    "tasks": "run.tasks",
    "timers": "run.timers",
    "tools": "run.tools",
    "tracing": "run.tracing",
    "value_schema": "run.value_schema",
    "vocabulary": "base.vocabulary",
    "waits": "run.waits",
    "waker": "ops.waker",
    "wakeups": "storage.wakeups",
    "watch_log": "ops.watch_log",
    "watcher": "ops.watcher",
    "langgraph_saver": "langgraph.saver",
}
_WHY = {"langgraph_saver": "use `from bide.langgraph import BideSaver`"}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of ``bide.engine.<old>``: the module at its new place, under both names."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        prefix, _, old = fullname.rpartition(".")
        if prefix != __name__ or old not in OLD_PATHS:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        old = spec.name.rpartition(".")[2]
        new = f"{__name__}.{OLD_PATHS[old]}"
        # stacklevel 2: the importing line (warnings skips importlib's own frames)
        warnings.warn(f"{spec.name} is deprecated: {_WHY.get(old, 'it moved to ' + new)}",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system set the alias's spec on the module: give it back its own
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
    sys.meta_path.append(_OldPaths())
